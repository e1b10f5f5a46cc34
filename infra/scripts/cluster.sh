#!/usr/bin/env bash
# Bring a SURREAL cluster up or down with the Terraform stack of one cloud, or deploy the chart into it.
# Called by the Makefile:
#   make cluster-up   CLOUD=gcp|aws|azure [AUTO_APPROVE=1] [BACKEND_CONFIG=backend.hcl]
#   make cluster-down CLOUD=gcp|aws|azure [AUTO_APPROVE=1] [BACKEND_CONFIG=backend.hcl]
#   make deploy       [CLOUD=...] [VALUES=values.yaml] [RELEASE=surreal] [NAMESPACE=surreal]
#                     [IMAGE_REGISTRY=ghcr.io/org] [IMAGE_TAG=<tag>, default the git short sha make push-images pushed]
# Every missing tool, login or file is reported before Terraform touches anything.
set -euo pipefail

usage() {
  echo "usage: $0 up|down CLOUD  |  $0 deploy [CLOUD]" >&2
  exit 2
}

die() {
  echo "error: $*" >&2
  exit 1
}

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tf_root=${SURREAL_TF_ROOT:-$repo_root/infra/terraform}
chart=${SURREAL_CHART:-$repo_root/infra/helm/surreal-chart}
terraform=${TERRAFORM:-terraform}
helm=${HELM:-$repo_root/.tools/bin/helm}
clouds="gcp aws azure"

require_tool() { # name, how to get it
  command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH: $2"
}

check_cloud() {
  case "$1" in
    gcp | aws | azure) ;;
    "") die "CLOUD is not set: make cluster-up CLOUD=gcp|aws|azure" ;;
    *) die "unknown CLOUD '$1': choose one of: $clouds" ;;
  esac
}

# The cloud's CLI (terraform's providers and the kubeconfig command use its login) and a working login.
check_cloud_cli() {
  case "$1" in
    gcp)
      require_tool gcloud "install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install)"
      require_tool gke-gcloud-auth-plugin "gcloud components install gke-gcloud-auth-plugin (kubectl authenticates to GKE with it)"
      gcloud auth application-default print-access-token >/dev/null 2>&1 ||
        die "no Google application-default credentials (Terraform's google provider uses them): run gcloud auth application-default login"
      ;;
    aws)
      require_tool aws "install the AWS CLI v2 (https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html)"
      aws sts get-caller-identity >/dev/null 2>&1 ||
        die "no working AWS credentials: run aws configure, or aws sso login, or set AWS_PROFILE"
      ;;
    azure)
      require_tool az "install the Azure CLI (https://learn.microsoft.com/cli/azure/install-azure-cli)"
      require_tool kubelogin "az aks install-cli (kubectl and helm sign in to AKS through Entra ID with kubelogin)"
      az account show >/dev/null 2>&1 || die "not logged in to Azure: run az login"
      ;;
  esac
}

terraform_init() { # stack dir
  local dir=$1
  require_tool "$terraform" "install Terraform >= 1.10 (https://developer.hashicorp.com/terraform/install)"
  if [[ -n ${BACKEND_CONFIG:-} ]]; then
    [[ -f $dir/backend.tf ]] || die "BACKEND_CONFIG is set but $dir/backend.tf does not exist: cp $dir/backend.tf.example $dir/backend.tf"
    [[ -f $BACKEND_CONFIG ]] || die "BACKEND_CONFIG file $BACKEND_CONFIG not found (see $dir/backend.hcl.example)"
    "$terraform" -chdir="$dir" init -input=false -backend-config="$(realpath "$BACKEND_CONFIG")"
  else
    "$terraform" -chdir="$dir" init -input=false
  fi
}

check_tfvars() { # cloud, stack dir
  # gcp and azure have required inputs (project_id, subscription_id); aws runs on its defaults.
  if [[ $1 != aws && ! -f $2/terraform.tfvars ]]; then
    die "$2/terraform.tfvars not found: cp $2/terraform.tfvars.example $2/terraform.tfvars and edit it"
  fi
}

confirm() { # question; AUTO_APPROVE=1 answers yes
  [[ ${AUTO_APPROVE:-0} == 1 ]] && return 0
  local answer=""
  read -r -p "$1 [y/N] " answer || true
  [[ $answer == y || $answer == yes ]]
}

cluster_up() {
  local cloud=$1 dir=$tf_root/$1
  check_cloud_cli "$cloud"
  check_tfvars "$cloud" "$dir"
  terraform_init "$dir"
  "$terraform" -chdir="$dir" plan -input=false -out=cluster.tfplan
  if ! confirm "Apply this plan to $cloud?"; then
    rm -f "$dir/cluster.tfplan"
    die "not applied (answer y, or run with AUTO_APPROVE=1)"
  fi
  "$terraform" -chdir="$dir" apply -input=false cluster.tfplan
  rm -f "$dir/cluster.tfplan"

  # The kubeconfig goes next to the stack, never into ~/.kube/config.
  export KUBECONFIG=$dir/kubeconfig
  local kubeconfig_command
  kubeconfig_command=$("$terraform" -chdir="$dir" output -raw kubeconfig_command)
  echo "+ $kubeconfig_command"
  eval "$kubeconfig_command"
  "$terraform" -chdir="$dir" output -raw helm_pool_values >"$dir/pool-values.yaml"
  "$terraform" -chdir="$dir" output -raw helm_storage_values >"$dir/storage-values.yaml"
  echo "kubeconfig: $KUBECONFIG"
  echo "pool placement values: $dir/pool-values.yaml"
  echo "run folder storage values: $dir/storage-values.yaml"
  echo "next: make deploy CLOUD=$cloud VALUES=<experiment values.yaml>"
}

cluster_down() {
  local cloud=$1 dir=$tf_root/$1
  check_cloud_cli "$cloud"
  check_tfvars "$cloud" "$dir"
  terraform_init "$dir"
  if [[ ${AUTO_APPROVE:-0} == 1 ]]; then
    "$terraform" -chdir="$dir" destroy -input=false -auto-approve
  else
    "$terraform" -chdir="$dir" destroy -input=false
  fi
  rm -f "$dir/kubeconfig" "$dir/pool-values.yaml" "$dir/storage-values.yaml"
}

deploy() {
  local cloud=${1:-}
  if [[ -z $cloud ]]; then
    # The one cluster cluster-up wrote a kubeconfig for.
    local found=()
    for candidate in $clouds; do
      [[ -f $tf_root/$candidate/kubeconfig ]] && found+=("$candidate")
    done
    [[ ${#found[@]} -gt 0 ]] || die "no cluster to deploy to: run make cluster-up CLOUD=gcp|aws|azure first"
    [[ ${#found[@]} -eq 1 ]] || die "clusters on ${found[*]}: say which with CLOUD=..."
    cloud=${found[0]}
  fi
  check_cloud "$cloud"
  local dir=$tf_root/$cloud
  [[ -f $dir/kubeconfig ]] || die "$dir/kubeconfig not found: run make cluster-up CLOUD=$cloud first"
  [[ -f $dir/pool-values.yaml ]] || die "$dir/pool-values.yaml not found: run make cluster-up CLOUD=$cloud again"
  [[ -d $chart ]] || die "chart $chart not found"
  [[ -x $helm ]] || die "$helm not found: run make tools"
  local values_args=(-f "$dir/pool-values.yaml")
  # The run folders' bucket and its workload identity binding (a stack applied before run_storage has none).
  [[ -f $dir/storage-values.yaml ]] && values_args+=(-f "$dir/storage-values.yaml")
  if [[ -n ${VALUES:-} ]]; then
    [[ -f $VALUES ]] || die "VALUES file $VALUES not found"
    values_args+=(-f "$VALUES")
  fi
  # The images `make push-images` pushed: registry and tag (a string: a sha of digits must stay a string).
  [[ -n ${IMAGE_REGISTRY:-} ]] && values_args+=(--set "image.registry=${IMAGE_REGISTRY%/}")
  [[ -n ${IMAGE_TAG:-} ]] && values_args+=(--set-string "image.tag=$IMAGE_TAG")
  # pool-values.yaml and storage-values.yaml first: the experiment's values may still override them.
  "$helm" upgrade --install "${RELEASE:-surreal}" "$chart" \
    --kubeconfig "$dir/kubeconfig" --namespace "${NAMESPACE:-surreal}" --create-namespace \
    "${values_args[@]}" --wait --timeout 15m
}

[[ $# -ge 1 ]] || usage
case "$1" in
  up | down)
    [[ $# -eq 2 ]] || usage
    check_cloud "$2"
    if [[ $1 == up ]]; then cluster_up "$2"; else cluster_down "$2"; fi
    ;;
  deploy) deploy "${2:-}" ;;
  *) usage ;;
esac
