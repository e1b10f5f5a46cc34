#!/usr/bin/env bash
# make local-kind-test: the chart end to end on kind. Creates a cluster, builds the actor and replay images
# (values/smoke.yaml runs the learner on the CPU actor image: kind has no GPU), loads them into the cluster,
# helm installs the smoke experiment, waits for `helm test` (the learner makes progress), prints the
# learner's progress and deletes the cluster, also when a step fails.
#
# Needs Docker (a running daemon) and kind on PATH; helm and kubectl come from `make tools`.
# Environment: HELM, KUBECTL, DOCKER, KIND (binaries), IMAGE_TAG (default: git short sha),
# KIND_CLUSTER (default: surreal-smoke), KIND_NODE_IMAGE (optional kindest/node image), KEEP_CLUSTER=1 (keep it).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
helm=${HELM:-$repo_root/.tools/bin/helm}
kubectl=${KUBECTL:-$repo_root/.tools/bin/kubectl}
docker=${DOCKER:-docker}
kind=${KIND:-kind}
cluster=${KIND_CLUSTER:-surreal-smoke}
tag=${IMAGE_TAG:-$(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo dev)}
release=smoke
namespace=surreal-smoke
values=$repo_root/infra/helm/values/smoke.yaml
chart=$repo_root/infra/helm/surreal-chart
images=(actor replay)

die() {
  echo "local-kind-test: $*" >&2
  exit 1
}

# Everything this test needs, checked before anything is created.
command -v "$docker" >/dev/null 2>&1 || die "docker not found on PATH: install Docker (https://docs.docker.com/get-docker/); this test cannot run without it"
"$docker" info >/dev/null 2>&1 || die "docker is installed but its daemon is not reachable ('$docker info' failed): start Docker"
command -v "$kind" >/dev/null 2>&1 || die "kind not found on PATH: install kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
[[ -x $helm ]] || die "$helm not found: run make tools"
[[ -x $kubectl ]] || die "$kubectl not found: run make tools"

kubeconfig=$(mktemp)
export KUBECONFIG=$kubeconfig
cleanup() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "== failed (exit $rc): state of the release" >&2
    "$kubectl" -n "$namespace" get pods -o wide >&2 || true
    "$kubectl" -n "$namespace" describe pods >&2 || true
    for workload in statefulset/$release-surreal-learner statefulset/$release-surreal-replay deployment/$release-surreal-ps statefulset/$release-surreal-actor; do
      echo "== logs $workload" >&2
      "$kubectl" -n "$namespace" logs "$workload" --tail=40 >&2 || true
    done
  fi
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    echo "KEEP_CLUSTER=1: cluster $cluster kept (kind delete cluster --name $cluster)"
  else
    "$kind" delete cluster --name "$cluster" || true
  fi
  rm -f "$kubeconfig"
  exit "$rc"
}
trap cleanup EXIT

echo "== kind cluster $cluster"
create_args=(create cluster --name "$cluster" --config "$repo_root/infra/kind/kind-config.yaml" --kubeconfig "$kubeconfig" --wait 120s)
[[ -n ${KIND_NODE_IMAGE:-} ]] && create_args+=(--image "$KIND_NODE_IMAGE")
"$kind" "${create_args[@]}"

for role in "${images[@]}"; do
  echo "== build surreal-$role:$tag"
  DOCKER_BUILDKIT=1 "$docker" build -f "$repo_root/images/$role/Dockerfile" -t "surreal-$role:$tag" "$repo_root"
  "$kind" load docker-image "surreal-$role:$tag" --name "$cluster"
done

echo "== helm install $release ($values)"
"$helm" install "$release" "$chart" -f "$values" --namespace "$namespace" --create-namespace \
  --set-string image.tag="$tag" --set image.pullPolicy=Never --wait --timeout 10m

echo "== helm test $release (passes once the learner reports progress)"
"$helm" test "$release" --namespace "$namespace" --logs --timeout 15m

echo "== learner progress"
"$kubectl" -n "$namespace" logs "statefulset/$release-surreal-learner" --tail=20
"$kubectl" -n "$namespace" exec "statefulset/$release-surreal-learner" -- \
  python -c "import json,sys; rows=[json.loads(l) for l in open('/data/run/metrics.jsonl')]; r=rows[-1]; print(f\"{len(rows)} updates logged; last: env_steps={r.get('env_steps')} updates={r.get('updates')} train_return_mean={r.get('train_return_mean')}\")"
echo "local-kind-test: passed"
