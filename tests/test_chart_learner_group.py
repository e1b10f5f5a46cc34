"""The chart's learner group (learner.replicas > 1): an indexed StatefulSet whose pods get torchrun's variables (RANK
from the pod index, MASTER_ADDR pod 0's DNS name), the experiment's learner.replicas set from the chart, pod 0 as
the ps's and the probe's learner, a gang counting every rank, and a NetworkPolicy letting the ranks reach each other.
tests/test_chart_wiring.py runs such a rendering's pods for real."""

from __future__ import annotations

import kubernetes_validate
import pytest

from surreal.config import load_config
from surreal.roles.learner_group import GroupPlace
from test_chart import KUBE_VERSIONS, NAMESPACE, RELEASE, VALUES_DIR, experiment_of, find, render, run_helm

pytestmark = pytest.mark.infra  # needs helm, under .tools/

LEARNER = f"{RELEASE}-surreal-learner"
POD_0 = f"{LEARNER}-0.{LEARNER}.{NAMESPACE}.svc"


@pytest.fixture(scope="module")
def group_docs():
    return render(VALUES_DIR / "ppo.yaml", sets=("learner.replicas=2", "networkPolicy.enabled=true"))


def container_env(doc) -> dict[str, dict]:
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item for item in container["env"]}


def test_the_learner_renders_as_an_indexed_statefulset_with_torchruns_variables(group_docs):
    learner = find(group_docs, "StatefulSet", "learner")
    assert learner["spec"]["replicas"] == 2 and learner["spec"]["serviceName"] == LEARNER
    env = container_env(learner)
    assert env["RANK"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}
    values = {name: item["value"] for name, item in env.items() if "value" in item}
    assert (values["WORLD_SIZE"], values["LOCAL_RANK"], values["MASTER_ADDR"]) == ("2", "0", POD_0)
    (container,) = learner["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert str(ports["rendezvous"]) == values["MASTER_PORT"]
    service = find(group_docs, "Service", "learner")
    assert service["spec"]["clusterIP"] == "None", "headless: pod 0 has a DNS name of its own"
    assert "rendezvous" in {p["name"] for p in service["spec"]["ports"]}
    # What a rank reads from them is a place in a group of the experiment's size (pod 1's RANK, as the label says).
    place = GroupPlace.from_env({**values, "RANK": "1"}, experiment_of(group_docs)["learner"]["replicas"])
    assert (place.rank, place.size, place.master_addr) == (1, 2, POD_0)


def test_the_experiment_gets_learner_replicas_and_still_loads(group_docs):
    experiment = experiment_of(group_docs)
    assert experiment["learner"]["replicas"] == 2
    cfg = load_config([f"learner.replicas={experiment['learner']['replicas']}"])
    assert cfg.learner.replicas == 2
    alone = experiment_of(render(VALUES_DIR / "ppo.yaml"))
    assert "replicas" not in alone.get("learner", {}), "a single learner's ConfigMap is as before"


def test_the_ps_and_the_probe_follow_pod_0(group_docs):
    ps = find(group_docs, "Deployment", "ps")
    assert container_env(ps)["SURREAL_LEARNER_ADDR"]["value"].startswith(POD_0 + ":")
    (probe,) = [d for d in group_docs if d["kind"] == "Pod"]
    assert any(POD_0 in arg for arg in probe["spec"]["containers"][0].get("args", []))


def test_the_ranks_reach_each_other_only_among_themselves(group_docs):
    (policy,) = [d for d in group_docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-group")]
    learners = policy["spec"]["podSelector"]["matchLabels"]
    assert learners["app.kubernetes.io/component"] == "learner"
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": learners}}]}]
    assert policy["spec"]["egress"] == [{"to": [{"podSelector": {"matchLabels": learners}}]}]
    single = render(VALUES_DIR / "ppo.yaml", sets=("networkPolicy.enabled=true",))
    assert not [d for d in single if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-group")]


def test_a_gang_counts_every_rank():
    gang = ("scheduling.k8s.io/v1beta1/PodGroup",)
    members = []
    for replicas in (1, 2):
        sets = (f"learner.replicas={replicas}", "scheduling=gang")
        docs = render(VALUES_DIR / "ppo.yaml", sets=sets, api_versions=gang)
        (group,) = [d for d in docs if d["kind"] == "PodGroup"]
        members.append(group["spec"]["schedulingPolicy"]["gang"]["minCount"])
    assert members[1] == members[0] + 1


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_the_group_rendering_validates_against_kubernetes_schemas(group_docs, kube_version):
    for doc in group_docs:
        if doc["kind"] in ("ServiceMonitor", "PodGroup"):
            continue
        kubernetes_validate.validate(doc, kube_version, strict=True)


def test_experiment_learner_replicas_set_apart_from_learner_replicas_fails_the_render():
    done = run_helm(
        "template",
        RELEASE,
        "infra/helm/surreal-chart",
        "-f",
        str(VALUES_DIR / "ppo.yaml"),
        "--set",
        "experiment.learner.replicas=2",
    )
    assert done.returncode != 0 and "set learner.replicas" in done.stderr


def test_an_off_policy_groups_every_rank_can_sample_the_replay_with_rank_0s_keys():
    """Off-policy, every rank samples the replay itself: every pod of the StatefulSet gets the shards' addresses and
    the CURVE keys as rank 0 does (one pod template), and the release's NetworkPolicy lets every learner pod, not only
    pod 0, reach the replay's sample port."""
    docs = render(VALUES_DIR / "ddpg.yaml", sets=("learner.replicas=2", "networkPolicy.enabled=true"))
    experiment = experiment_of(docs)
    assert experiment["algo"] == "ddpg" and experiment["learner"]["replicas"] == 2
    learner = find(docs, "StatefulSet", "learner")
    env = container_env(learner)
    assert (
        env["SURREAL_REPLAY_ADDRS"]["value"]
        == container_env(find(docs, "StatefulSet", "actor"))["SURREAL_REPLAY_ADDRS"]["value"]
    )
    replay = find(docs, "StatefulSet", "replay")
    (replay_container,) = replay["spec"]["template"]["spec"]["containers"]
    sample_port = {p["name"]: p["containerPort"] for p in replay_container["ports"]}["sample"]
    assert all(f":{sample_port}" in addr for addr in env["SURREAL_REPLAY_ADDRS"]["value"].split(","))
    assert "SURREAL_CURVE_DIR" in env, "the experiment's CURVE keys (the chart's default), for every rank"
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy" and not d["metadata"]["name"].endswith("-group")]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    pod_labels = learner["spec"]["template"]["metadata"]["labels"]
    assert selected.items() <= pod_labels.items(), "the policy covers every learner pod"
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", []) if "to" in rule}
    assert sample_port in egress_ports
