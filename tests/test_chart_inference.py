"""The chart's inference workers (inference.replicas > 0: topology.inference=central): a StatefulSet behind a headless
Service, so each worker has a DNS name the actors list in SURREAL_INFERENCE_ADDRS; the workers follow the ps and mount
the CURVE keys like every role; they are elastic like the actors (never in the core's gang); the experiment the pods
read says central with that many workers; the NetworkPolicy opens their port. With inference.replicas=0 (the default)
nothing of it is rendered and the experiment says nothing of inference. tests/test_chart_wiring.py runs a central
rendering's pods for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from surreal.config import read_config
from surreal.settings import DEFAULT_INFERENCE_PORT, Settings
from test_chart import (
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    SCHEDULING_APIS,
    VALUES_DIR,
    by_kind,
    experiment_of,
    find,
    render,
    run_helm,
)

pytestmark = pytest.mark.infra  # needs helm, under .tools/

WORKERS = 3
INFERENCE = f"{RELEASE}-surreal-inference"
PS = f"{RELEASE}-surreal-ps.{NAMESPACE}.svc"
ON = (f"inference.replicas={WORKERS}", "networkPolicy.enabled=true")


@pytest.fixture(scope="module")
def central() -> list[dict[str, Any]]:
    return render(VALUES_DIR / "ppo.yaml", sets=ON)


def container_of(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def env_values(workload: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container_of(workload)["env"] if "value" in item}


def pod_template(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]


def test_workers_are_a_statefulset_behind_a_headless_service(central):
    workers = find(central, "StatefulSet", "inference")
    service = find(central, "Service", "inference")
    assert workers["metadata"]["name"] == INFERENCE and workers["spec"]["replicas"] == WORKERS
    assert workers["spec"]["serviceName"] == service["metadata"]["name"] == INFERENCE
    assert service["spec"]["clusterIP"] == "None", "headless: each worker has a DNS name of its own"
    assert service["spec"]["selector"].items() <= pod_template(workers)["metadata"]["labels"].items()
    container = container_of(workers)
    assert container["command"] == ["surreal", "role", "inference"]
    assert container["image"].split(":")[0] == "surreal-actor", "the policy needs the actor image's torch"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {
        "inference": "inference",
        "metrics": "metrics",
    }
    assert {"startupProbe", "readinessProbe", "livenessProbe"} <= container.keys()
    assert container["livenessProbe"]["httpGet"]["port"] == "metrics"
    # What the worker reads: its ROUTER on the port the Service names, the ps to follow.
    settings = Settings.from_env(env_values(workers))
    assert settings.inference_port == ports["inference"] == DEFAULT_INFERENCE_PORT
    assert settings.ps_addrs == (f"tcp://{PS}:7004",)
    assert settings.bind_host == "0.0.0.0" and settings.metrics_port == ports["metrics"]


def test_actors_name_every_worker_by_its_pod_dns_name(central):
    actors = find(central, "StatefulSet", "actor")
    settings = Settings.from_env(env_values(actors))
    pods = [f"{INFERENCE}-{i}.{INFERENCE}.{NAMESPACE}.svc" for i in range(WORKERS)]
    assert settings.inference_addrs == tuple(f"tcp://{pod}:{DEFAULT_INFERENCE_PORT}" for pod in pods)
    assert settings.ps_addrs == (f"tcp://{PS}:7004",), "actors still follow the ps for their flow control"


def test_the_experiment_says_central_with_the_workers_and_read_config_accepts_it(central, tmp_path: Path):
    experiment = experiment_of(central)
    assert experiment["topology"]["inference"] == "central"
    assert experiment["topology"]["inference_workers"] == WORKERS
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    cfg = read_config(path)
    assert (cfg.topology.inference, cfg.topology.inference_workers) == ("central", WORKERS)
    assert cfg.topology.actors == find(central, "StatefulSet", "actor")["spec"]["replicas"]


def test_workers_mount_the_curve_keys_and_restart_with_them(central):
    workers, actors = find(central, "StatefulSet", "inference"), find(central, "StatefulSet", "actor")
    assert env_values(workers)["SURREAL_CURVE_DIR"] == "/etc/surreal-curve"
    mounts = {m["name"]: m for m in container_of(workers)["volumeMounts"]}
    assert mounts["curve"]["mountPath"] == "/etc/surreal-curve" and mounts["curve"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod_template(workers)["spec"]["volumes"]}
    assert volumes["curve"]["secret"]["secretName"] == f"{RELEASE}-surreal-curve"
    annotations, actor_annotations = (pod_template(w)["metadata"]["annotations"] for w in (workers, actors))
    assert annotations["checksum/curve"] == actor_annotations["checksum/curve"]
    assert annotations["checksum/experiment"] == actor_annotations["checksum/experiment"]
    plain = find(render(sets=("inference.replicas=1", "curve.enabled=false")), "StatefulSet", "inference")
    assert (
        "SURREAL_CURVE_DIR" not in env_values(plain)
        and "checksum/curve" not in pod_template(plain)["metadata"]["annotations"]
    )


def test_the_network_policy_opens_the_workers_port_only_when_they_run(central):
    (policy,) = [d for d in by_kind(central, "NetworkPolicy") if d["metadata"]["name"] == f"{RELEASE}-surreal"]
    ingress = {p["port"] for p in policy["spec"]["ingress"][0]["ports"]}
    egress = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert DEFAULT_INFERENCE_PORT in ingress and DEFAULT_INFERENCE_PORT in egress, "actors reach the workers"
    assert 7004 in egress, "workers reach the ps"
    release = policy["spec"]["podSelector"]["matchLabels"]
    assert release.items() <= pod_template(find(central, "StatefulSet", "inference"))["metadata"]["labels"].items()
    (off,) = [
        d
        for d in by_kind(render(VALUES_DIR / "ppo.yaml"), "NetworkPolicy")
        if d["metadata"]["name"] == f"{RELEASE}-surreal"
    ]
    assert DEFAULT_INFERENCE_PORT not in {p["port"] for rule in off["spec"]["egress"] for p in rule["ports"]}


def test_the_default_rendering_has_no_workers_and_no_inference_in_the_experiment():
    docs = render(VALUES_DIR / "ppo.yaml")
    components = {d["metadata"]["labels"].get("app.kubernetes.io/component") for d in docs}
    assert "inference" not in components
    assert "SURREAL_INFERENCE_ADDRS" not in env_values(find(docs, "StatefulSet", "actor"))
    topology = experiment_of(docs)["topology"]
    assert "inference" not in topology and "inference_workers" not in topology


def test_workers_are_elastic_like_the_actors_not_in_the_gang():
    api = (SCHEDULING_APIS["kueue"],)
    docs = render(sets=("inference.replicas=2", "scheduling=kueue"), api_versions=api)
    workers = pod_template(find(docs, "StatefulSet", "inference"))["metadata"]
    actors = pod_template(find(docs, "StatefulSet", "actor"))["metadata"]
    assert "kueue.x-k8s.io/pod-group-name" not in workers["labels"]
    assert workers["labels"]["kueue.x-k8s.io/priority-class"] == actors["labels"]["kueue.x-k8s.io/priority-class"]
    learner = pod_template(find(docs, "StatefulSet", "learner"))["metadata"]["annotations"]
    alone = render(sets=("scheduling=kueue",), api_versions=api)
    learner_alone = pod_template(find(alone, "StatefulSet", "learner"))["metadata"]["annotations"]
    count = "kueue.x-k8s.io/pod-group-total-count"
    assert learner[count] == learner_alone[count], "the core's gang does not wait for workers"
    volcano = render(sets=("inference.replicas=1", "scheduling=volcano"), api_versions=(SCHEDULING_APIS["volcano"],))
    annotations = pod_template(find(volcano, "StatefulSet", "inference"))["metadata"]["annotations"]
    assert annotations["volcano.sh/preemptable"] == "true" and "scheduling.k8s.io/group-name" not in annotations


def test_the_workers_values_place_and_size_them():
    sets = (
        "inference.replicas=1",
        "inference.nodeSelector.surreal\\.dev/pool=gpu",
        "inference.tolerations[0].key=nvidia.com/gpu",
        "inference.tolerations[0].operator=Exists",
        "inference.tolerations[0].effect=NoSchedule",
        "inference.resources.limits.cpu=4",
        "inference.podAnnotations.team=rl",
    )
    workers = find(render(sets=sets), "StatefulSet", "inference")
    spec = pod_template(workers)["spec"]
    assert spec["nodeSelector"] == {"surreal.dev/pool": "gpu"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert container_of(workers)["resources"]["limits"]["cpu"] == 4
    assert pod_template(workers)["metadata"]["annotations"]["team"] == "rl"
    default = pod_template(find(render(sets=("inference.replicas=1",)), "StatefulSet", "inference"))["spec"]
    assert default["nodeSelector"] == {"surreal.dev/pool": "cpu"} and "tolerations" not in default


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_the_central_rendering_validates_against_kubernetes_schemas(central, kube_version):
    for doc in central:
        if doc["kind"] in ("ServiceMonitor", "PodGroup"):
            continue
        kubernetes_validate.validate(doc, kube_version, strict=True)


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("-f", str(VALUES_DIR / "ddpg.yaml")), "PPO's MLP policy only (got algo ddpg)"),
        (("--set", "experiment.algo.name=ppo", "--set", "experiment.algo.recurrent=lstm"), "with algo.recurrent"),
        (("--set", "experiment.deterministic=true"), "needs experiment.deterministic false"),
        (("--set", "inference.replicas=-1"), "minimum"),
    ],
    ids=["ddpg", "recurrent", "deterministic", "negative"],
)
def test_what_central_inference_cannot_run_fails_the_render(sets: tuple[str, ...], message: str):
    args = ("--set", "inference.replicas=1") if "inference.replicas=-1" not in sets else ()
    done = run_helm("template", RELEASE, "infra/helm/surreal-chart", *args, *sets)
    assert done.returncode != 0 and message in done.stderr, done.stderr
