"""The chart's run folder in object storage (experiment.run_uri): the roles that mirror it (learner, replay shards,
evaluator) and only they get SURREAL_RUN_URI, runStorage's env and labels, and egress to the bucket; the URI names
the run by experiment.name or the release; without run_uri nothing of it renders; a URI that is no bucket's is
refused by the values schema."""

from __future__ import annotations

import kubernetes_validate
import pytest

from surreal.settings import Settings
from test_chart import CHART, KUBE_VERSIONS, RELEASE, WORKLOAD_KINDS, by_kind, env_of, render, run_helm

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
