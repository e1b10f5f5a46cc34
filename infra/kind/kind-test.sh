#!/usr/bin/env bash
# make local-kind-test: the chart end to end on kind. Creates a cluster, builds the actor and replay images
# (values/smoke.yaml runs the learner on the CPU actor image: kind has no GPU), loads them into the cluster,
# helm installs the smoke experiment, waits for `helm test` (the learner makes progress), prints the
# learner's progress and deletes the cluster, also when a step fails. Before the cluster goes, pass or fail, it
# writes what a reader of a CI run needs into KIND_ARTIFACTS (default: kind-artifacts/, ignored by git):
# helm-test.log, pods.txt, describe-pods.txt, events.txt, logs/<pod>.log (and <pod>.previous.log for a
# restarted container) and learner-metrics.jsonl.
#
# Needs Docker (a running daemon) and kind on PATH; helm and kubectl come from `make tools`.
# Environment: HELM, KUBECTL, DOCKER, KIND (binaries), IMAGE_TAG (default: git short sha),
# KIND_CLUSTER (default: surreal-smoke), KIND_NODE_IMAGE (optional kindest/node image), KEEP_CLUSTER=1 (keep it),
# KIND_ARTIFACTS (folder for the logs above).
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
artifacts=${KIND_ARTIFACTS:-$repo_root/kind-artifacts}

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
cluster_created=0

# The release's state, every pod's logs and the learner's metrics, into $artifacts (each step best effort: a
# half-created release still leaves what it has).
collect_artifacts() {
  mkdir -p "$artifacts/logs"
  "$kubectl" -n "$namespace" get pods -o wide >"$artifacts/pods.txt" 2>&1 || true
  "$kubectl" -n "$namespace" describe pods >"$artifacts/describe-pods.txt" 2>&1 || true
  "$kubectl" -n "$namespace" get events --sort-by=.lastTimestamp >"$artifacts/events.txt" 2>&1 || true
  local pod
  for pod in $("$kubectl" -n "$namespace" get pods -o name 2>/dev/null); do
    pod=${pod#pod/}
    "$kubectl" -n "$namespace" logs "$pod" --all-containers --prefix >"$artifacts/logs/$pod.log" 2>&1 || true
    "$kubectl" -n "$namespace" logs "$pod" --all-containers --prefix --previous >"$artifacts/logs/$pod.previous.log" 2>/dev/null ||
      rm -f "$artifacts/logs/$pod.previous.log"
  done
  "$kubectl" -n "$namespace" exec "statefulset/$release-surreal-learner" -- cat /data/run/metrics.jsonl \
    >"$artifacts/learner-metrics.jsonl" 2>/dev/null || rm -f "$artifacts/learner-metrics.jsonl"
  echo "local-kind-test: logs and helm test output in $artifacts"
}

cleanup() {
  local rc=$?
  if [[ $cluster_created == 1 ]]; then
    collect_artifacts
  fi
  if [[ $rc -ne 0 ]]; then
    echo "== failed (exit $rc): state of the release (all of it in $artifacts)" >&2
    cat "$artifacts/pods.txt" >&2 2>/dev/null || true
    for log in "$artifacts"/logs/*-surreal-learner-*.log "$artifacts"/logs/*-surreal-replay-*.log; do
      [[ -f $log ]] || continue
      echo "== $(basename "$log")" >&2
      tail -n 40 "$log" >&2
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
# Only this script's own files are cleared: KIND_ARTIFACTS may name a folder that holds other things.
rm -rf "$artifacts/logs"
rm -f "$artifacts"/{helm-test.log,pods.txt,describe-pods.txt,events.txt,learner-metrics.jsonl}
cluster_created=1
"$kind" "${create_args[@]}"

for role in "${images[@]}"; do
  echo "== build surreal-$role:$tag"
  DOCKER_BUILDKIT=1 "$docker" build -f "$repo_root/images/Dockerfile" --target "$role" -t "surreal-$role:$tag" "$repo_root"
  "$kind" load docker-image "surreal-$role:$tag" --name "$cluster"
done

echo "== helm install $release ($values)"
"$helm" install "$release" "$chart" -f "$values" --namespace "$namespace" --create-namespace \
  --set-string image.tag="$tag" --set image.pullPolicy=Never --wait --timeout 10m

echo "== helm test $release (passes once the learner reports progress)"
mkdir -p "$artifacts"
"$helm" test "$release" --namespace "$namespace" --logs --timeout 15m 2>&1 | tee "$artifacts/helm-test.log"

echo "== learner progress"
"$kubectl" -n "$namespace" logs "statefulset/$release-surreal-learner" --tail=20
"$kubectl" -n "$namespace" exec "statefulset/$release-surreal-learner" -- \
  python -c "import json,sys; rows=[json.loads(l) for l in open('/data/run/metrics.jsonl')]; r=rows[-1]; print(f\"{len(rows)} updates logged; last: env_steps={r.get('env_steps')} updates={r.get('updates')} train_return_mean={r.get('train_return_mean')}\")"
echo "local-kind-test: passed"
