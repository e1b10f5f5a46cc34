"""The chart's run folder in object storage (experiment.run_uri): the roles that mirror it (learner, replay shards,
evaluator) and only they get SURREAL_RUN_URI, runStorage's env and labels, and egress to the bucket; the URI names
the run by experiment.name or the release; without run_uri nothing of it renders; a URI that is no bucket's is
refused by the values schema."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from chart_pods import ClusterDNS, expand_pods  # infra/helm/chart_pods.py (pytest's pythonpath)
from conftest import wait_until
from surreal.launch.local import free_ports
from surreal.runstore import RemoteRun
from surreal.settings import Settings
from test_chart import (
    CHART,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    VALUES_DIR,
    WORKLOAD_KINDS,
    by_kind,
    env_of,
    render,
    run_helm,
)
from test_chart_wiring import local_command, stop

pytestmark = pytest.mark.infra  # needs helm, under .tools/

MIRRORING = {"learner", "replay", "evaluator"}
STORAGE_VALUES = """
experiment:
  run_uri: s3://team-bucket/runs/
  learner:
    eval_interval: 5000
runStorage:
  podLabels:
    azure.workload.identity/use: "true"
  env:
    - name: AZURE_STORAGE_ACCOUNT_NAME
      value: teamruns
"""


@pytest.fixture(scope="module")
def values(tmp_path_factory):
    path = tmp_path_factory.mktemp("values") / "storage.yaml"
    path.write_text(STORAGE_VALUES)
    return path


def workloads(docs):
    return {d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in docs if d["kind"] in WORKLOAD_KINDS}


def test_the_roles_that_mirror_the_run_folder_get_its_uri_labels_and_env_and_no_other_does(values):
    docs = render(values)
    found = workloads(docs)
    assert set(found) == MIRRORING | {"ps", "actor"}
    for component, doc in found.items():
        template = doc["spec"]["template"]
        env = env_of(template["spec"]["containers"][0])
        mirrors = component in MIRRORING
        assert ("SURREAL_RUN_URI" in env) == mirrors, component
        assert ("azure.workload.identity/use" in template["metadata"]["labels"]) == mirrors, component
        if mirrors:
            assert env["SURREAL_RUN_URI"] == f"s3://team-bucket/runs/{RELEASE}"
            assert env["AZURE_STORAGE_ACCOUNT_NAME"] == "teamruns"
            # What the role reads is what the chart wrote: the settings parse it (roles/*.py main).
            settings = Settings.from_env(env)
            assert settings.run_uri == f"s3://team-bucket/runs/{RELEASE}" and settings.run_dir.is_absolute()
    evaluator_env = env_of(found["evaluator"]["spec"]["template"]["spec"]["containers"][0])
    assert evaluator_env["SURREAL_RUN_DIR"].startswith("/tmp/"), "the evaluator's run folder is in its scratch space"


def test_the_run_is_named_by_the_experiment_else_the_release(values):
    docs = render(values, sets=("experiment.name=pend-seed1",))
    env = env_of(workloads(docs)["learner"]["spec"]["template"]["spec"]["containers"][0])
    assert env["SURREAL_RUN_URI"] == "s3://team-bucket/runs/pend-seed1"


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_only_the_mirroring_pods_may_reach_the_bucket_and_the_policies_validate(values, kube_version):
    docs = render(values)
    policies = {d["metadata"]["name"]: d for d in by_kind(docs, "NetworkPolicy")}
    storage = policies.pop(f"{RELEASE}-surreal-run-storage")
    (release_policy,) = policies.values()
    assert 443 not in {p["port"] for rule in release_policy["spec"]["egress"] for p in rule["ports"]}
    selector = storage["spec"]["podSelector"]
    assert selector["matchExpressions"] == [
        {
            "key": "app.kubernetes.io/component",
            "operator": "In",
            "values": sorted(MIRRORING, key=["learner", "replay", "evaluator"].index),
        }
    ]
    assert storage["spec"]["policyTypes"] == ["Egress"]
    assert {p["port"] for rule in storage["spec"]["egress"] for p in rule["ports"]} == {443, 80, 988}
    for doc in docs:
        kubernetes_validate.validate(doc, kube_version, strict=True)


def test_without_run_uri_nothing_of_it_renders(values):
    docs = render(values, sets=("experiment.run_uri=null",))
    assert len(by_kind(docs, "NetworkPolicy")) == 1
    for component, doc in workloads(docs).items():
        template = doc["spec"]["template"]
        assert "SURREAL_RUN_URI" not in env_of(template["spec"]["containers"][0]), component
        assert "azure.workload.identity/use" not in template["metadata"]["labels"], component


@pytest.mark.parametrize("uri", ["http://bucket/x", "runs/local", "s3://"])
def test_the_values_schema_refuses_a_uri_that_is_no_buckets(uri):
    done = run_helm("template", RELEASE, str(CHART), "--set", f"experiment.run_uri={uri}")
    assert done.returncode != 0 and "run_uri" in done.stderr, done.stderr


# -- the rendered chart run for real against a bucket (moto's S3 server) ----------------------------------------------

RELEASE_TIMEOUT_S = 600.0  # catches a hang only: the roles start and learn on a 2-core box that may be busy


def mirrored_updates(remote) -> int:
    files = remote.manifest("learner") or {}
    steps = [int(name[len("checkpoints/ckpt-") : -3]) for name in files if name.startswith("checkpoints/ckpt-")]
    return max(steps, default=-1)


def run_release(root: Path, values: Path, until) -> dict[str, Path]:
    """Every workload pod of the smoke release, rendered with `values`, as local processes with fresh volumes under
    `root` (a new cluster: nothing of an earlier release on disk) until `until()` holds; then SIGTERM as `helm
    uninstall` sends it. Returns each pod's log."""
    docs = render(VALUES_DIR / "smoke.yaml", values)
    configmaps = {d["metadata"]["name"]: d["data"] for d in by_kind(docs, "ConfigMap")}
    secrets = {d["metadata"]["name"]: d["data"] for d in by_kind(docs, "Secret")}  # the CURVE keys (a new release's)
    pods = expand_pods(docs, free_ports)
    dns = ClusterDNS(docs, pods, NAMESPACE)
    workloads = [p for p in pods if p.spec.get("restartPolicy") != "Never"]
    procs: list[subprocess.Popen[bytes]] = []
    logs: dict[str, Path] = {}
    try:
        for pod in workloads:
            argv, env, cwd = local_command(pod, dns, configmaps, root, secrets)
            logs[pod.name] = root / f"{pod.name}.log"
            with logs[pod.name].open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        argv, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )

        def ready() -> bool:
            crashed = {pod.name: proc.returncode for pod, proc in zip(workloads, procs, strict=True) if proc.poll()}
            assert not crashed, f"roles exited: {crashed}\n" + "\n".join(p.read_text()[-1500:] for p in logs.values())
            return bool(until())

        wait_until(ready, RELEASE_TIMEOUT_S, interval_s=0.5)
    finally:
        stop(procs)
    return logs


@pytest.mark.slow
def test_a_new_release_on_a_new_cluster_resumes_from_the_bucket(tmp_path, s3_bucket, s3_endpoint):
    """The rendered chart's pods, their S3 settings from runStorage.env (as for any S3-compatible store), mirror
    the run to the bucket; stopped as `helm uninstall` stops them, the learner's last checkpoint goes there; a new
    release of the same name with nothing on disk resumes from exactly that checkpoint."""
    values = tmp_path / "bucket.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "experiment": {"run_uri": f"{s3_bucket}/runs"},
                "runStorage": {
                    "env": [
                        {"name": "AWS_ENDPOINT_URL", "value": s3_endpoint},
                        {"name": "AWS_ACCESS_KEY_ID", "value": "testing"},
                        {"name": "AWS_SECRET_ACCESS_KEY", "value": "testing"},
                        {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"},
                    ]
                },
            }
        )
    )
    remote = RemoteRun(f"{s3_bucket}/runs/{RELEASE}")
    run_release(tmp_path / "cluster-1", values, lambda: mirrored_updates(remote) >= 5)
    stopped_at = mirrored_updates(remote)  # the checkpoint the learner wrote on SIGTERM, mirrored on its way out
    learner = f"{RELEASE}-surreal-learner-0"
    first_log = (tmp_path / "cluster-1" / f"{learner}.log").read_text()
    assert f"checkpoint at update {stopped_at} written" in first_log, first_log[-2000:]

    logs = run_release(tmp_path / "cluster-2", values, lambda: mirrored_updates(remote) > stopped_at)
    second_log = logs[learner].read_text()
    assert f"resumed at update {stopped_at}," in second_log, second_log[-2000:]
    assert "pulled" in second_log, "the learner's run folder came from the bucket"
