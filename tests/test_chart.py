"""The Helm chart (infra/helm/surreal-chart) offline: helm lint and template for every values file, the rendered
manifests against the Kubernetes JSON schemas (kubernetes-validate) and the ServiceMonitor CRD's, the values
schema (generated from the runtime config; bad values rejected with a clear message), every values file's
experiment accepted by `read_config`, the topology/placement/security/network contracts, and checkov.

The end-to-end wiring (the rendered commands and env run as local processes) is tests/test_chart_wiring.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from conftest import checkov
from surreal.config import load_config, read_config
from surreal.settings import Settings

pytestmark = pytest.mark.infra  # needs helm, under .tools/

REPO = Path(__file__).resolve().parents[1]
HELM = REPO / ".tools" / "bin" / "helm"
CHART = REPO / "infra" / "helm" / "surreal-chart"
VALUES_DIR = REPO / "infra" / "helm" / "values"
VALUES_FILES = sorted(VALUES_DIR.glob("*.yaml"))
SERVICEMONITOR_SCHEMA = REPO / "infra" / "helm" / "crds" / "servicemonitor-v1.schema.json"
SERVICEMONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
KUBE_VERSIONS = ("1.30.0", "1.33.0")  # the chart's kubeVersion floor and a current release
NAMESPACE = "surreal-test"
RELEASE = "exp1"
WORKLOAD_KINDS = ("StatefulSet", "Deployment")
ROLE_PORTS = {"experience", "sample", "paramsPub", "ps", "metrics"}
# What a cluster serves for each `scheduling` mode (helm template is told with --api-versions).
SCHEDULING_APIS = {
    "kueue": "kueue.x-k8s.io/v1beta2/WorkloadPriorityClass",
    "volcano": "scheduling.volcano.sh/v1beta1/PodGroup",
    "gang": "scheduling.k8s.io/v1beta1/PodGroup",
}

sys.path.insert(0, str(REPO / "infra" / "helm"))
import values_schema  # noqa: E402  (infra/helm/values_schema.py, the schema generator)


def helm() -> str:
    assert HELM.exists(), f"{HELM} is missing: run `make tools` (installs helm v4 under .tools/)"
    return str(HELM)


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def render(
    *values: Path | str, sets: tuple[str, ...] = (), api_versions: tuple[str, ...] = (), show_only: str | None = None
) -> list[dict[str, Any]]:
    """`helm template` of the chart as the documents it renders (None documents dropped)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for path in values:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    for api in api_versions:
        args += ["--api-versions", api]
    if show_only:
        args += ["--show-only", show_only]
    done = run_helm(*args)
    assert done.returncode == 0, f"helm template failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def find(docs: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    matches = [
        d for d in by_kind(docs, kind) if d["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    assert len(matches) == 1, f"expected one {kind} for {component}, found {len(matches)}"
    return matches[0]


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(name, pod spec) of every workload's pod template and of every bare Pod (the helm test)."""
    specs = [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in docs if d["kind"] in WORKLOAD_KINDS]
    specs += [(d["metadata"]["name"], d["spec"]) for d in by_kind(docs, "Pod")]
    return specs


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


def experiment_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (configmap,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-experiment")]
    return yaml.safe_load(configmap["data"]["experiment.yaml"])


def roles_of(docs: list[dict[str, Any]]) -> list[str]:
    """The roles a rendering should run: the four, and the evaluator when the experiment sets an eval interval below
    its budget."""
    experiment = experiment_of(docs)
    evaluator = 0 < experiment.get("learner", {}).get("eval_interval", 0) < experiment["total_env_steps"]
    return ["learner", "replay", "ps", "actor", *(["evaluator"] if evaluator else [])]


def values_ids(path: Path) -> str:
    return path.stem


@pytest.fixture(scope="module", params=VALUES_FILES, ids=values_ids)
def rendered(request: pytest.FixtureRequest) -> tuple[Path, list[dict[str, Any]]]:
    """Every values file rendered with the optional parts on (ServiceMonitor API present, dashboard)."""
    docs = render(
        request.param,
        sets=("serviceMonitor.enabled=true", "grafanaDashboard.enabled=true"),
        api_versions=(SERVICEMONITOR_API,),
    )
    return request.param, docs


def test_the_values_files_exist() -> None:
    assert {p.stem for p in VALUES_FILES} >= {"ppo", "ddpg", "es", "smoke"}


def test_helm_is_v4() -> None:
    done = run_helm("version", "--short")
    assert done.returncode == 0 and done.stdout.startswith("v4."), done.stdout + done.stderr


@pytest.mark.parametrize("values", [None, *VALUES_FILES], ids=lambda p: "defaults" if p is None else p.stem)
def test_helm_lint_strict(values: Path | None) -> None:
    done = run_helm("lint", "--strict", str(CHART), *(["-f", str(values)] if values else []))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_rendered_manifests_validate_against_kubernetes_schemas(rendered, kube_version: str) -> None:
    path, docs = rendered
    kinds = set()
    for doc in docs:
        kinds.add(doc["kind"])
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: kubernetes-validate has no schema for it (test below)
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{path.name}: {doc['kind']}/{doc['metadata']['name']} invalid for {kube_version}: {exc}")
    assert kinds >= {
        "ConfigMap",
        "ServiceAccount",
        "Service",
        "StatefulSet",
        "Deployment",
        "NetworkPolicy",
        "Pod",
        "ServiceMonitor",
    }


def test_a_broken_manifest_is_caught_by_kubernetes_validate(rendered) -> None:
    """The validation above can fail: a misspelt field in a rendered StatefulSet is rejected."""
    _, docs = rendered
    broken = json.loads(json.dumps(find(docs, "StatefulSet", "learner")))
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSIONS[0], strict=True)


def test_servicemonitor_validates_against_the_crd_schema(rendered) -> None:
    _, docs = rendered
    schema = json.loads(SERVICEMONITOR_SCHEMA.read_text())
    (monitor,) = by_kind(docs, "ServiceMonitor")
    jsonschema.validate(monitor, schema)
    # It selects exactly the release's Services that expose a metrics port.
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [s for s in by_kind(docs, "Service") if selector.items() <= s["metadata"]["labels"].items()]
    assert {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in selected} == set(roles_of(docs))
    for service in selected:
        assert "metrics" in {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    bad = json.loads(json.dumps(monitor))
    bad["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_servicemonitor_is_gated_on_the_api_being_served() -> None:
    enabled = ("serviceMonitor.enabled=true",)
    assert by_kind(render(sets=enabled), "ServiceMonitor") == []
    assert len(by_kind(render(sets=enabled, api_versions=(SERVICEMONITOR_API,)), "ServiceMonitor")) == 1
    assert by_kind(render(api_versions=(SERVICEMONITOR_API,)), "ServiceMonitor") == []
    notes = run_helm("install", RELEASE, str(CHART), "--dry-run=client", "--set", enabled[0])
    assert notes.returncode == 0, notes.stderr
    assert "no ServiceMonitor was created" in notes.stdout


# -- the values schema ------------------------------------------------------------------------------------


def test_values_schema_is_generated_from_the_runtime_config() -> None:
    committed = (CHART / "values.schema.json").read_text()
    assert committed == values_schema.render(), (
        "values.schema.json differs from what infra/helm/values_schema.py derives from surreal.config.schema: "
        "run `make helm-schema`"
    )


def test_values_schema_is_self_contained_and_closed() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    refs = re.findall(r'"\$ref":\s*"([^"]+)"', json.dumps(schema))
    assert refs and all(ref.startswith("#/") for ref in refs), f"non-local $ref: {refs}"
    assert schema["additionalProperties"] is False
    closed_keys = ("image", "ports", "learner", "replay", "ps", "actors", "experiment", "networkPolicy", "helmTest")
    for key in (*closed_keys, "priorityClasses", "kueue", "volcano", "gang"):
        assert schema["properties"][key].get("additionalProperties") is False, key
    jsonschema.Draft7Validator.check_schema(schema)


def test_default_values_and_every_values_file_pass_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)


BAD_VALUES = {
    "negative actors": ("actors:\n  replicas: -1\n", "at '/actors/replicas': minimum: got -1, want 1"),
    "zero shards": ("replay:\n  shards: 0\n", "at '/replay/shards': minimum: got 0, want 1"),
    "unknown algorithm": ("experiment:\n  algo: nope\n", "value must be one of 'ppo', 'ddpg', 'es', 'sac'"),
    "unknown algorithm in a mapping": ("experiment:\n  algo:\n    name: sacc\n", "value must be one of"),
    "misspelt role key": ("actors:\n  replica: 4\n", "additional properties 'replica' not allowed"),
    "misspelt top-level key": ("actor:\n  replicas: 4\n", "additional properties 'actor' not allowed"),
    "misspelt experiment key": ("experiment:\n  total_env_step: 10\n", "additional properties 'total_env_step'"),
    "misspelt env key": ("experiment:\n  env:\n    idd: Hopper-v5\n", "additional properties 'idd' not allowed"),
    "topology is the chart's": ("experiment:\n  topology:\n    actors: 4\n", "additional properties 'topology'"),
    "string for an integer": ("replay:\n  shards: two\n", "at '/replay/shards': got string, want integer"),
    "float for an integer": ("actors:\n  envsPerActor: 1.5\n", "at '/actors/envsPerActor': got number, want integer"),
    "string for a number": ("experiment:\n  algo:\n    name: ppo\n    lr: fast\n", "at '/experiment/algo/lr'"),
    "a PPO key under DDPG": (
        "experiment:\n  algo:\n    name: ddpg\n    clip_coef: 0.2\n",
        "additional properties 'clip_coef' not allowed",
    ),
    "algo.seed follows seed": ("experiment:\n  algo:\n    seed: 3\n", "additional properties 'seed' not allowed"),
    "unknown replay mode": ("experiment:\n  replay:\n    mode: lifo\n", "at '/experiment/replay/mode'"),
    "bad device": ("experiment:\n  device: gpu\n", "at '/experiment/device'"),
    "limits are required": (
        "learner:\n  resources:\n    requests:\n      cpu: '1'\n    limits: null\n",
        "at '/learner/resources'",
    ),
    "bad toleration effect": (
        "learner:\n  tolerations:\n    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedul}\n",
        "at '/learner/tolerations/0/effect'",
    ),
    "bad pull policy": ("image:\n  pullPolicy: Sometimes\n", "at '/image/pullPolicy'"),
    "bad port": ("ports:\n  metrics: 70000\n", "at '/ports/metrics': maximum"),
    "a numeric tag (use --set-string)": ("image:\n  tag: 1234567\n", "at '/image/tag': got number, want string"),
    "bad digest": ("image:\n  digest: latest\n", "at '/image/digest'"),
    "unknown actor pool": ("actors:\n  pool: spot\n", "at '/actors/pool'"),
    "misspelt chaos key": ("chaos:\n  imag: kubectl\n", "additional properties 'imag' not allowed"),
    "a chaos period that is no number": (
        "experiment:\n  chaos:\n    kill_every_s: fast\n",
        "at '/experiment/chaos/kill_every_s'",
    ),
    "unknown scheduling mode": ("scheduling: slurm\n", "at '/scheduling'"),
    "a priority only system classes may have": (
        "priorityClasses:\n  core:\n    value: 2000000001\n",
        "at '/priorityClasses/core/value'",
    ),
    "misspelt kueue key": ("kueue:\n  queue: team-a\n", "additional properties 'queue' not allowed"),
    "a queue name that is no object name": ("kueue:\n  queueName: Team_A\n", "at '/kueue/queueName'"),
    "a PodGroup version the chart cannot render": (
        "gang:\n  apiVersion: scheduling.k8s.io/v1alpha1\n",
        "at '/gang/apiVersion'",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_bad_values_are_rejected_with_a_clear_message(name: str, tmp_path: Path) -> None:
    text, message = BAD_VALUES[name]
    values = tmp_path / "bad.yaml"
    values.write_text(text)
    done = run_helm("template", RELEASE, str(CHART), "-f", str(values))
    assert done.returncode != 0, f"{name}: accepted\n{done.stdout[:500]}"
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert message in done.stderr, f"{name}: expected {message!r} in:\n{done.stderr}"
    lint = run_helm("lint", str(CHART), "-f", str(values))
    assert lint.returncode != 0 and message in lint.stdout + lint.stderr


# -- the experiment the pods read ---------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=values_ids)
def test_every_values_files_experiment_is_accepted_by_read_config(values: Path, tmp_path: Path) -> None:
    """What the ConfigMap holds is what SURREAL_CONFIG gives every role: `read_config` must accept it."""
    docs = render(values)
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment_of(docs)))
    cfg = read_config(path)
    chart = yaml.safe_load(values.read_text())
    expected_algo = chart["experiment"]["algo"]
    expected_algo = expected_algo if isinstance(expected_algo, str) else expected_algo["name"]
    assert cfg.algo.name == expected_algo
    assert cfg.env.id == chart["experiment"]["env"]["id"]
    assert cfg.topology.actors == chart["actors"]["replicas"]
    assert cfg.topology.replay_shards == chart["replay"]["shards"]
    assert cfg.topology.ps_replicas == chart["ps"]["replicas"]
    assert cfg.topology.envs_per_actor == chart["actors"]["envsPerActor"]


def test_ddpg_values_use_prioritized_replay_and_on_policy_ones_fifo(tmp_path: Path) -> None:
    modes = {}
    for name in ("ppo", "ddpg", "es"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(experiment_of(render(VALUES_DIR / f"{name}.yaml"))))
        modes[name] = read_config(path).replay.mode
    assert modes == {"ppo": "fifo", "ddpg": "prioritized", "es": "fifo"}


def test_robosuite_lift_values_run_the_lift_sac_preset(tmp_path: Path) -> None:
    """The chart's Lift experiment is `preset=lift-sac` (the chart takes a file, not Hydra overrides)."""
    pytest.importorskip("robosuite")
    path = tmp_path / "lift.yaml"
    path.write_text(yaml.safe_dump(experiment_of(render(VALUES_DIR / "robosuite-lift.yaml"))))
    chart, preset = read_config(path), load_config(["preset=lift-sac"])
    assert replace(chart.algo, seed=0) == replace(preset.algo, seed=0)
    assert (chart.env, chart.replay.capacity) == (preset.env, preset.replay.capacity)


def test_ppo_atari_values_run_the_ppo_atari_preset(tmp_path: Path) -> None:
    """The chart's Pong experiment is `preset=ppo-atari` (CleanRL's ppo_atari), 8 envs an actor as the preset's."""
    pytest.importorskip("ale_py")
    path = tmp_path / "pong.yaml"
    path.write_text(yaml.safe_dump(experiment_of(render(VALUES_DIR / "ppo-atari.yaml"))))
    chart, preset = read_config(path), load_config(["preset=ppo-atari", "env=ALE/Pong-v5"])
    assert replace(chart.algo, seed=0) == replace(preset.algo, seed=0)
    assert (chart.env, chart.actor.chunk_steps) == (preset.env, preset.actor.chunk_steps)
    assert chart.topology.envs_per_actor == preset.topology.envs_per_actor


def test_topology_and_workloads_follow_the_role_sizes() -> None:
    docs = render(sets=("actors.replicas=5", "actors.envsPerActor=3", "replay.shards=4", "ps.replicas=2"))
    assert experiment_of(docs)["topology"] == {"actors": 5, "envs_per_actor": 3, "replay_shards": 4, "ps_replicas": 2}
    assert find(docs, "StatefulSet", "actor")["spec"]["replicas"] == 5
    assert find(docs, "StatefulSet", "replay")["spec"]["replicas"] == 4
    assert find(docs, "Deployment", "ps")["spec"]["replicas"] == 2
    assert find(docs, "StatefulSet", "learner")["spec"]["replicas"] == 1
    replay = find(docs, "StatefulSet", "replay")["metadata"]["name"]
    headless = find(docs, "Service", "replay")
    assert headless["spec"]["clusterIP"] == "None"
    for component in ("actor", "learner"):
        kind = "StatefulSet"
        container = find(docs, kind, component)["spec"]["template"]["spec"]["containers"][0]
        entries = Settings.from_env(env_of(container)).replay
        assert [e.host for e in entries] == [
            f"{replay}-{i}.{headless['metadata']['name']}.{NAMESPACE}.svc" for i in range(4)
        ]
        assert {(e.experience_port, e.sample_port) for e in entries} == {(7001, 7002)}


def test_an_actor_takes_its_index_from_its_statefulset_ordinal() -> None:
    """Exploration depends on the actor index: pod <name>-i must be actor i (surreal.settings reads HOSTNAME)."""
    actors = find(render(sets=("actors.replicas=3",)), "StatefulSet", "actor")
    container = actors["spec"]["template"]["spec"]["containers"][0]
    env = env_of(container)
    assert "SURREAL_INDEX" not in env, "a fixed SURREAL_INDEX would give every actor the same index"
    for ordinal in range(3):
        pod_env = {**env, "HOSTNAME": f"{actors['metadata']['name']}-{ordinal}"}
        assert Settings.from_env(pod_env).index == ordinal


def test_pods_restart_when_the_experiment_changes() -> None:
    first = find(render(), "StatefulSet", "learner")["spec"]["template"]["metadata"]["annotations"]
    second = find(render(sets=("experiment.seed=7",)), "StatefulSet", "learner")["spec"]["template"]["metadata"]
    assert first["checksum/experiment"] != second["annotations"]["checksum/experiment"]


# -- placement: the node-pool contract ---------------------------------------------------------------------

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_default_values_carry_the_agreed_pool_contract() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["learner"]["nodeSelector"] == {"surreal.dev/pool": "gpu"}
    assert values["learner"]["tolerations"] == [GPU_TOLERATION]
    assert values["learner"]["resources"]["limits"]["nvidia.com/gpu"] == 1
    for role in ("replay", "ps"):
        assert values[role]["nodeSelector"] == {"surreal.dev/pool": "cpu"}, role
        assert values[role]["tolerations"] == [], role
    # The actors' placement comes from actors.pool (tests/test_pool_contract.py schedules it on the contract's pools).
    assert values["actors"]["pool"] == "auto"
    assert (values["actors"]["nodeSelector"], values["actors"]["tolerations"], values["actors"]["affinity"]) == (
        {},
        [],
        {},
    )


def test_gpu_placement_is_rendered_explicitly() -> None:
    """GKE adds the GPU toleration by itself, AKS and EKS do not: the chart must render it."""
    docs = render()
    learner = find(docs, "StatefulSet", "learner")["spec"]["template"]["spec"]
    assert learner["nodeSelector"] == {"surreal.dev/pool": "gpu"}
    assert learner["tolerations"] == [GPU_TOLERATION]
    assert learner["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    for kind, component in (("StatefulSet", "actor"), ("StatefulSet", "replay"), ("Deployment", "ps")):
        spec = find(docs, kind, component)["spec"]["template"]["spec"]
        assert GPU_TOLERATION not in spec.get("tolerations", []), component
        assert "nvidia.com/gpu" not in spec["containers"][0]["resources"]["limits"], component
        if component != "actor":
            assert spec["nodeSelector"] == {"surreal.dev/pool": "cpu"}, component
            assert "tolerations" not in spec, component


# Taints of preemptible nodes: the actor pool's own (every cloud) and the clouds' spot taints.
SPOT_TAINT_KEYS = ("surreal.dev/pool", "kubernetes.azure.com/scalesetpriority", "cloud.google.com/gke-spot")
ACTOR_POOL_TOLERATIONS = [{"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in SPOT_TAINT_KEYS]
CHAOS_ON = ("experiment.chaos.kill_every_s=30",)


def test_only_actors_tolerate_spot_and_actor_pool_nodes(rendered) -> None:
    """Replay keeps experience, ps and the learner the parameters: none of them may be preempted, in any values
    file, with any actors.pool."""
    path, docs = rendered
    extra = ("actors.pool=actor", *CHAOS_ON)
    for where, rendering in ((path.name, docs), (f"{path.name} + {extra}", render(path, sets=extra))):
        others = [d for d in rendering if d["kind"] in (*WORKLOAD_KINDS, "Pod", "Job")]
        assert {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in others} >= {"replay", "ps", "learner"}
        for doc in others:
            spec = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
            component = doc["metadata"]["labels"]["app.kubernetes.io/component"]
            if component == "actor":
                continue
            tolerated = {t.get("key") for t in spec.get("tolerations", [])}
            assert None not in tolerated and "" not in tolerated, f"{where}: {component} tolerates every taint"
            assert not tolerated & set(SPOT_TAINT_KEYS), f"{where}: {component} tolerates {tolerated}"
            assert spec.get("nodeSelector", {}).get("surreal.dev/pool") != "actor", f"{where}: {component}"
            assert "actor" not in json.dumps(spec.get("affinity", {})), f"{where}: {component}"


def actor_placement(*sets: str) -> dict[str, Any]:
    spec = find(render(sets=sets), "StatefulSet", "actor")["spec"]["template"]["spec"]
    return {key: spec.get(key) for key in ("nodeSelector", "tolerations", "affinity")}


def test_actors_pool_auto_prefers_the_actor_pool_and_falls_back_to_cpu() -> None:
    placement = actor_placement()
    assert placement["nodeSelector"] is None
    assert placement["tolerations"] == ACTOR_POOL_TOLERATIONS
    node = placement["affinity"]["nodeAffinity"]
    (term,) = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "surreal.dev/pool", "operator": "In", "values": ["actor", "cpu"]}]}
    (preferred,) = node["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["preference"]["matchExpressions"] == [
        {"key": "surreal.dev/pool", "operator": "In", "values": ["actor"]}
    ]
    assert preferred["weight"] == 100


def test_actors_pool_actor_and_cpu_pin_the_actors_and_none_places_nothing() -> None:
    assert actor_placement("actors.pool=actor") == {
        "nodeSelector": {"surreal.dev/pool": "actor"},
        "tolerations": ACTOR_POOL_TOLERATIONS,
        "affinity": None,
    }
    assert actor_placement("actors.pool=cpu") == {
        "nodeSelector": {"surreal.dev/pool": "cpu"},
        "tolerations": None,
        "affinity": None,
    }
    # kind and clusters without the contract's labels: the actors block's own keys only.
    assert actor_placement("actors.pool=none") == {"nodeSelector": None, "tolerations": None, "affinity": None}


def test_the_actors_own_placement_comes_on_top_of_the_pools(tmp_path: Path) -> None:
    extra = {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}
    anti = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    own = {
        "pool": "actor",
        "nodeSelector": {"example.com/zone": "a"},
        "tolerations": [ACTOR_POOL_TOLERATIONS[0], extra],
    }
    values = tmp_path / "own.yaml"
    values.write_text(yaml.safe_dump({"actors": {**own, "affinity": anti}}))
    spec = find(render(values), "StatefulSet", "actor")["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"example.com/zone": "a", "surreal.dev/pool": "actor"}
    assert spec["tolerations"] == [*ACTOR_POOL_TOLERATIONS, extra], "the pool's first, no duplicates"
    assert spec["affinity"] == anti
    mine = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": []}]}}
    values.write_text(yaml.safe_dump({"actors": {"affinity": {"nodeAffinity": mine}}}))
    spec = find(render(values), "StatefulSet", "actor")["spec"]["template"]["spec"]
    assert spec["affinity"] == {"nodeAffinity": mine}, "a nodeAffinity of yours replaces the pool's"


def test_actors_grace_fits_the_shortest_preemption_notice() -> None:
    """GKE gives pods 15 s of a Spot VM's 30 s notice; Azure Spot 30 s; AWS Spot 2 minutes."""
    spec = find(render(), "StatefulSet", "actor")["spec"]["template"]["spec"]
    assert 0 < spec["terminationGracePeriodSeconds"] <= 15


def test_es_and_smoke_learners_ask_for_no_gpu() -> None:
    for name, pool in (("es", {"surreal.dev/pool": "cpu"}), ("smoke", None)):
        learner = find(render(VALUES_DIR / f"{name}.yaml"), "StatefulSet", "learner")["spec"]["template"]["spec"]
        assert "nvidia.com/gpu" not in learner["containers"][0]["resources"]["limits"], name
        assert "tolerations" not in learner, name
        assert learner.get("nodeSelector") == pool, name


# -- security and workload shape ---------------------------------------------------------------------------


def test_every_pod_runs_restricted(rendered) -> None:
    path, docs = rendered
    for name, spec in pod_specs(docs):
        where = f"{path.name}: {name}"
        assert spec["automountServiceAccountToken"] is False, where
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert spec["serviceAccountName"] == f"{RELEASE}-surreal", where
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] >= 10000, where
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound]), f"{where}: {bound}"
            mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
            assert "emptyDir" in volumes[mounts["/tmp"]["name"]], f"{where}: /tmp must be a writable emptyDir"
            assert container["workingDir"] == "/tmp", where
            for path_mount, mount in mounts.items():
                if "configMap" in volumes.get(mount["name"], {}):
                    assert mount.get("readOnly") is True, f"{where}: {path_mount}"
    (account,) = by_kind(docs, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False


def test_the_learner_keeps_its_run_folder_on_a_volume_and_resumes() -> None:
    learner = find(render(), "StatefulSet", "learner")
    container = learner["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["surreal", "role", "learner"] and container["args"] == ["--resume"]
    (claim,) = learner["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    run_dir = env_of(container)["SURREAL_RUN_DIR"]
    assert run_dir.startswith(mounts[claim["metadata"]["name"]] + "/")
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"


def test_replay_shards_keep_snapshots_on_a_volume_and_get_the_time_to_write_a_last_one() -> None:
    replay = find(render(), "StatefulSet", "replay")
    spec = replay["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (claim,) = replay["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env_of(container)["SURREAL_RUN_DIR"].startswith(mounts[claim["metadata"]["name"]] + "/")
    assert claim["spec"]["resources"]["requests"]["storage"] == "16Gi" and "storageClassName" not in claim["spec"]
    # SIGTERM may find a periodic snapshot in flight: it finishes that one, then writes the last one.
    bench = json.loads((REPO / "bench" / "results" / "replay_snapshot.2core.json").read_text())
    rows = [bench[kind] for kind in ("uniform", "prioritized")]
    worst_s = max(row["periodic_snapshot_s"] + row["final_write_s"] for row in rows)
    assert spec["terminationGracePeriodSeconds"] >= 10 * worst_s, "a margin for slower disks and bigger shards"

    named = find(render(sets=("replay.persistence.storageClassName=fast",)), "StatefulSet", "replay")
    assert named["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "fast"
    ephemeral = find(render(sets=("replay.persistence.enabled=false",)), "StatefulSet", "replay")
    assert "volumeClaimTemplates" not in ephemeral["spec"]
    volumes = {v["name"]: v for v in ephemeral["spec"]["template"]["spec"]["volumes"]}
    assert volumes["snapshots"] == {"name": "snapshots", "emptyDir": {"sizeLimit": "16Gi"}}


def test_finished_learner_and_actors_hold_instead_of_exiting_into_a_restart_loop() -> None:
    """StatefulSets restart every container that exits; the roles that finish must idle until the release goes."""
    docs = render()
    for role in ("learner", "actor"):
        (container,) = find(docs, "StatefulSet", role)["spec"]["template"]["spec"]["containers"]
        assert Settings.from_env(env_of(container)).hold_when_done, role


def test_every_role_runs_its_surreal_role_command_with_the_config_mounted(rendered) -> None:
    path, docs = rendered
    commands = {}
    for doc in docs:
        if doc["kind"] not in WORKLOAD_KINDS:
            continue
        spec = doc["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        commands[doc["metadata"]["labels"]["app.kubernetes.io/component"]] = container["command"]
        env = env_of(container)
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        config_volume = next(v for v in spec["volumes"] if "configMap" in v)
        assert env["SURREAL_CONFIG"] == f"{mounts[config_volume['name']]}/experiment.yaml", path.name
        assert env["SURREAL_BIND_HOST"] == "0.0.0.0"
        Settings.from_env(env)  # every SURREAL_* value parses
    assert commands == {role: ["surreal", "role", role] for role in roles_of(docs)}


def test_an_evaluator_pod_runs_only_when_an_eval_interval_is_set() -> None:
    """experiment.learner.eval_interval > 0 adds one evaluator on the actor image, asking the ps for parameters,
    holding once training is done (a Deployment restarts what exits), on the stable CPU pool."""
    assert not [d for d in render() if d["metadata"]["labels"].get("app.kubernetes.io/component") == "evaluator"]
    docs = render(sets=("experiment.learner.eval_interval=20000", "image.tag=abc"))
    deployment = find(docs, "Deployment", "evaluator")
    find(docs, "Service", "evaluator")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "surreal-actor:abc"
    settings = Settings.from_env(env_of(container))
    assert settings.hold_when_done and settings.ps_addrs == (f"tcp://{RELEASE}-surreal-ps.{NAMESPACE}.svc:7004",)
    assert pod["nodeSelector"] == {"surreal.dev/pool": "cpu"} and "tolerations" not in pod
    assert experiment_of(docs)["learner"]["eval_interval"] == 20000
    beyond = render(sets=("experiment.learner.eval_interval=20000", "experiment.total_env_steps=20000"))
    assert not [d for d in beyond if d["metadata"]["labels"].get("app.kubernetes.io/component") == "evaluator"]


def test_network_policy_admits_only_the_release_and_metrics_scrapers() -> None:
    docs = render(VALUES_DIR / "ppo.yaml")
    (policy,) = by_kind(docs, "NetworkPolicy")
    release = {"app.kubernetes.io/name": "surreal", "app.kubernetes.io/instance": RELEASE}
    assert policy["spec"]["podSelector"] == {"matchLabels": release}
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    own, scrape = policy["spec"]["ingress"]
    assert own["from"] == [{"podSelector": {"matchLabels": release}}]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    ports = {values["ports"][k] for k in ROLE_PORTS}
    assert {p["port"] for p in own["ports"]} == ports
    assert [p["port"] for p in scrape["ports"]] == [values["ports"]["metrics"]]
    assert scrape["from"] == values["networkPolicy"]["metricsFrom"]
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == ports | {53}
    # Every pod of the release (the helm test's too) is selected, and every port a pod opens is admitted.
    for doc in docs:
        labels = (
            doc["spec"]["template"]["metadata"]["labels"]
            if doc["kind"] in WORKLOAD_KINDS
            else doc["metadata"]["labels"]
        )
        if doc["kind"] in (*WORKLOAD_KINDS, "Pod"):
            assert release.items() <= labels.items(), doc["metadata"]["name"]
        if doc["kind"] in WORKLOAD_KINDS:
            opened = {p["containerPort"] for p in doc["spec"]["template"]["spec"]["containers"][0]["ports"]}
            assert opened <= ports, doc["metadata"]["name"]
    # With no scrapers configured only the release itself gets in.
    (closed,) = by_kind(render(sets=("networkPolicy.metricsFrom=null",)), "NetworkPolicy")
    assert len(closed["spec"]["ingress"]) == 1


def test_disruption_budgets_cover_learner_and_replay() -> None:
    budgets = {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d for d in by_kind(render(), "PodDisruptionBudget")
    }
    assert set(budgets) == {"learner", "replay"}
    assert budgets["learner"]["spec"]["maxUnavailable"] == 0
    assert budgets["replay"]["spec"]["maxUnavailable"] == 1
    docs = render()
    for component, budget in budgets.items():
        workload = find(docs, "StatefulSet", component)
        assert budget["spec"]["selector"] == workload["spec"]["selector"]


def test_helm_test_hook_probes_the_learners_metrics_through_its_service() -> None:
    docs = render()
    (pod,) = by_kind(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["surreal", "probe", "progress"]
    assert container["image"].startswith("surreal-replay:"), "the probe needs no torch: the small replay image"
    args = container["args"]
    learner_service = find(docs, "Service", "learner")
    metrics_port = next(p["port"] for p in learner_service["spec"]["ports"] if p["name"] == "metrics")
    url = args[args.index("--url") + 1]
    assert url == f"http://{learner_service['metadata']['name']}.{NAMESPACE}.svc:{metrics_port}/metrics"
    assert args[args.index("--min-updates") + 1] == "1"


def test_images_follow_values() -> None:
    docs = render(sets=("image.registry=ghcr.io/org/", "image.tag=abc1234", "learner.image.repository=custom-learner"))
    images = {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]["template"]["spec"]["containers"][0]["image"]
        for d in docs
        if d["kind"] in WORKLOAD_KINDS
    }
    assert images == {
        "learner": "ghcr.io/org/custom-learner:abc1234",
        "actor": "ghcr.io/org/surreal-actor:abc1234",
        "replay": "ghcr.io/org/surreal-replay:abc1234",
        "ps": "ghcr.io/org/surreal-replay:abc1234",
    }
    digest = "sha256:" + "a" * 64
    pinned = find(render(sets=(f"image.digest={digest}",)), "StatefulSet", "actor")
    assert pinned["spec"]["template"]["spec"]["containers"][0]["image"] == f"surreal-actor@{digest}"


def test_notes_tell_how_to_watch_the_run() -> None:
    done = run_helm(
        "install", RELEASE, str(CHART), "--dry-run=client", "-n", NAMESPACE, "-f", str(VALUES_DIR / "ddpg.yaml")
    )
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    assert "ddpg on HalfCheetah-v5" in notes
    assert f"helm test {RELEASE} -n {NAMESPACE}" in notes
    assert f"logs -f statefulset/{RELEASE}-surreal-learner" in notes
    # The trained policy's artifact is on the learner's volume: the notes say how to copy it out.
    assert f"cp {RELEASE}-surreal-learner-0:/data/run/policy/policy.safetensors" in notes


def test_dashboard_queries_only_metrics_the_roles_export() -> None:
    dashboard = json.loads((CHART / "dashboards" / "surreal.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {m for expr in exprs for m in re.findall(r"\b(surreal_[a-z_]+)\b", expr)}
    package = REPO / "src" / "surreal"
    source = "\n".join(p.read_text() for p in [*package.glob("roles/*.py"), *package.glob("runtime/*.py")])
    # Registered directly, or through roles/common.py's count_errors (its name and its timeouts counter).
    names = re.findall(r'\.(?:counter|gauge)\(\s*"([a-z_]+)"', source)
    names += re.findall(r'count_errors\(\s*metrics,\s*"([a-z_]+)"', source)
    names += re.findall(r'timeouts="([a-z_]+)"', source)
    exported = {f"surreal_{name}" for name in names}
    assert used, "the dashboard queries nothing"
    assert used <= exported, f"dashboard uses metrics no role exports: {sorted(used - exported)}"
    (configmap,) = [
        d for d in render(sets=("grafanaDashboard.enabled=true",)) if d["metadata"]["name"].endswith("-dashboard")
    ]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["surreal.json"]) == dashboard


# -- the chaos Job -------------------------------------------------------------------------------------------

CHAOS_KINDS = ("Job", "Role", "RoleBinding")


def chaos_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "chaos"]


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("experiment.chaos.alive=1",),  # a window of no length
        ("experiment.chaos.window_s=60",),  # a window that keeps nobody down
        ("experiment.chaos.kill_every_s=0", "experiment.chaos.restart=false"),
    ],
    ids=["defaults", "alive-without-window", "window-without-alive", "no-kills"],
)
def test_no_chaos_unless_its_schedule_is_active(sets: tuple[str, ...]) -> None:
    for values in (None, *VALUES_FILES):
        docs = render(*([values] if values else []), sets=sets)
        assert chaos_objects(docs) == [] and not [d for d in docs if d["kind"] in CHAOS_KINDS], values


def chaos_on(*sets: str, values: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The chaos objects of a rendering with chaos on, by kind, and the actors' StatefulSet and ps Deployment."""
    docs = render(*values, sets=("actors.replicas=3", *sets))
    objects = {d["kind"]: d for d in chaos_objects(docs)}
    assert len(objects) == len(chaos_objects(docs)), "one object of each kind"
    return {**objects, "actors": find(docs, "StatefulSet", "actor"), "ps": find(docs, "Deployment", "ps"), "docs": docs}


@pytest.mark.parametrize(
    "sets",
    [CHAOS_ON, ("experiment.chaos.alive=0", "experiment.chaos.window_s=60")],
    ids=["kill_every_s", "alive-window"],
)
def test_chaos_renders_a_job_with_a_role_limited_to_the_actors(sets: tuple[str, ...]) -> None:
    got = chaos_on(*sets)
    assert set(got) - {"actors", "ps", "docs"} == {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "NetworkPolicy",
        "Job",
    }
    actors = got["actors"]["metadata"]["name"]
    assert got["Role"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": [f"{actors}-{i}" for i in range(3)],
            "verbs": ["get", "delete"],
        },
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "resourceNames": [actors], "verbs": ["get"]},
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets/scale"],
            "resourceNames": [actors],
            "verbs": ["get", "patch"],
        },
    ]
    account = got["ServiceAccount"]["metadata"]["name"]
    binding = got["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": got["Role"]["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    job = got["Job"]["spec"]
    pod = job["template"]["spec"]
    assert job["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    # Its own account, the only pod of the release with a token; restricted like every other pod.
    assert pod["serviceAccountName"] == account and pod["automountServiceAccountToken"] is True
    assert got["ServiceAccount"]["automountServiceAccountToken"] is False
    assert [
        d
        for d in got["docs"]
        if d.get("spec", {}).get("template", {}).get("spec", {}).get("automountServiceAccountToken")
    ] == [got["Job"]]
    assert (
        pod["securityContext"]["runAsNonRoot"] is True
        and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    )
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["securityContext"]["runAsUser"] == 10001
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    # On the stable pool with ps, never on the actors' preemptible nodes.
    assert pod.get("nodeSelector") == got["ps"]["spec"]["template"]["spec"]["nodeSelector"]
    assert "tolerations" not in pod
    # The script comes from its ConfigMap; the actors it targets are the chart's own.
    (script,) = [v for v in pod["volumes"] if "configMap" in v]
    assert script["configMap"]["name"] == got["ConfigMap"]["metadata"]["name"]
    assert container["command"] == ["/bin/sh", "/etc/surreal-chaos/chaos.sh"]
    assert "chaos.sh" in got["ConfigMap"]["data"]
    env = env_of(container)
    assert env["STATEFULSET"] == actors and env["REPLICAS"] == "3"
    assert env["GRACE"] == str(got["actors"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])
    selector = dict(pair.split("=") for pair in env["SELECTOR"].split(","))
    assert selector == got["actors"]["spec"]["selector"]["matchLabels"]
    # The release's NetworkPolicy admits DNS and the release only; this one adds the API server's ports.
    policy = got["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= got["Job"]["spec"]["template"]["metadata"]["labels"].items()
    assert policy["policyTypes"] == ["Egress"]
    assert policy["egress"] == [{"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}]


def test_chaos_settings_follow_the_schedule(tmp_path: Path) -> None:
    schedule = {"seed": 7, "kill_every_s": 2.5, "restart": False, "alive": 1, "window_start_s": 60, "window_s": 119.2}
    values = tmp_path / "chaos.yaml"
    values.write_text(yaml.safe_dump({"experiment": {"chaos": schedule}}))
    job = chaos_on("actors.terminationGracePeriodSeconds=10", values=(values,))["Job"]
    env = env_of(job["spec"]["template"]["spec"]["containers"][0])
    assert {k: env[k] for k in ("SEED", "KILL_EVERY", "RESTART", "ALIVE", "WINDOW_START", "WINDOW", "GRACE")} == {
        "SEED": "7",
        "KILL_EVERY": "3",  # whole seconds, rounded up
        "RESTART": "false",
        "ALIVE": "1",
        "WINDOW_START": "60",
        "WINDOW": "120",
        "GRACE": "10",
    }
    assert env_of(chaos_on(*CHAOS_ON)["Job"]["spec"]["template"]["spec"]["containers"][0])["RESTART"] == "true"


def test_notes_say_when_chaos_is_on() -> None:
    for sets, on in (((), False), (CHAOS_ON, True)):
        args = ["install", RELEASE, str(CHART), "--dry-run=client", "-n", NAMESPACE]
        done = run_helm(*args, *(arg for item in sets for arg in ("--set", item)))
        assert done.returncode == 0, done.stderr
        notes = done.stdout.split("NOTES:", 1)[1]
        assert ("Chaos is on" in notes) == on
        assert ("app.kubernetes.io/component=chaos" in notes) == on


def test_a_changed_schedule_replaces_the_chaos_job() -> None:
    """A Job's pod template is immutable: its name carries a hash, so helm upgrade replaces it."""
    name = lambda *sets: chaos_on(*sets)["Job"]["metadata"]["name"]  # noqa: E731
    assert name(*CHAOS_ON) == name(*CHAOS_ON)
    assert name(*CHAOS_ON) != name("experiment.chaos.kill_every_s=60")
    assert name(*CHAOS_ON) != name(*CHAOS_ON, "chaos.image=registry.k8s.io/kubectl:v1.35.0")


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_chaos_manifests_validate_against_kubernetes_schemas(kube_version: str) -> None:
    docs = chaos_on("experiment.chaos.alive=1", "experiment.chaos.window_s=60", *CHAOS_ON)["docs"]
    for doc in chaos_objects(docs):
        kubernetes_validate.validate(doc, kube_version, strict=True)


FAKE_KUBECTL = """#!/bin/sh
echo "$*" >> "$KUBECTL_LOG"
if [ "$1" = get ]; then
  printf '%s-0   <none>\\n%s-1   2026-01-01T00:00:00Z\\n%s-2   <none>\\n' "$STATEFULSET" "$STATEFULSET" "$STATEFULSET"
fi
"""


def run_chaos_script(tmp_path: Path, timeout: float, *sets: str) -> tuple[list[str], str]:
    """The rendered script with the Job's env, against a kubectl that logs its arguments (actor 1 terminating)."""
    got = chaos_on(*sets)
    script = tmp_path / "chaos.sh"
    script.write_text(got["ConfigMap"]["data"]["chaos.sh"])
    kubectl = tmp_path / "bin" / "kubectl"
    kubectl.parent.mkdir()
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(0o755)
    log = tmp_path / "kubectl.log"
    env = {
        **env_of(got["Job"]["spec"]["template"]["spec"]["containers"][0]),
        "HOME": str(tmp_path),
        "PATH": f"{kubectl.parent}:/usr/bin:/bin",
        "KUBECTL_LOG": str(log),
    }
    try:
        done = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=timeout)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode()
    calls = log.read_text().splitlines() if log.exists() else []
    return calls, output


def test_chaos_without_restart_scales_the_actors_down_to_the_last_one_and_ends(tmp_path: Path) -> None:
    calls, output = run_chaos_script(
        tmp_path, 20, "experiment.chaos.kill_every_s=1", "experiment.chaos.restart=false", "actors.replicas=3"
    )
    actors = f"{RELEASE}-surreal-actor"
    assert calls == [f"scale statefulset {actors} --replicas=2", f"scale statefulset {actors} --replicas=1"], output
    assert output.rstrip().endswith("done")


def test_chaos_window_holds_the_fleet_down_then_restores_it(tmp_path: Path) -> None:
    calls, output = run_chaos_script(
        tmp_path, 20, "experiment.chaos.alive=1", "experiment.chaos.window_start_s=1", "experiment.chaos.window_s=1"
    )
    actors = f"{RELEASE}-surreal-actor"
    assert calls == [f"scale statefulset {actors} --replicas=1", f"scale statefulset {actors} --replicas=3"], output
    assert "window opens" in output and "window closes" in output


def test_chaos_with_restart_deletes_live_actors_with_the_grace_of_a_preemption(tmp_path: Path) -> None:
    calls, output = run_chaos_script(tmp_path, 3.5, "experiment.chaos.kill_every_s=1", "experiment.chaos.seed=3")
    actors = f"{RELEASE}-surreal-actor"
    deletes = [c for c in calls if c.startswith("delete ")]
    assert len(deletes) >= 2, output
    for call in deletes:
        assert re.fullmatch(rf"delete pod {actors}-[02] --grace-period=15 --wait=false", call), call
    lists = [c for c in calls if c.startswith("get ")]
    assert lists and all("-l app.kubernetes.io/component=actor," in c for c in lists)


# -- checkov ------------------------------------------------------------------------------------------------


def skipped_of(reports: list[dict[str, Any]], check: str) -> list[dict[str, Any]]:
    return [s for report in reports for s in report["results"]["skipped_checks"] if s["check_id"] == check]


def test_checkov_finds_no_failed_check_in_any_rendering(tmp_path: Path) -> None:
    for values in VALUES_FILES:
        docs = render(
            values,
            sets=("serviceMonitor.enabled=true", "grafanaDashboard.enabled=true"),
            api_versions=(SERVICEMONITOR_API,),
        )
        (tmp_path / values.name).write_text(yaml.safe_dump_all(docs))
    # The chaos Job, its RBAC and NetworkPolicy (off in every values file).
    chaos = chaos_objects(render(sets=("experiment.chaos.alive=1", "experiment.chaos.window_s=60", *CHAOS_ON)))
    (tmp_path / "chaos.yaml").write_text(yaml.safe_dump_all(chaos))
    # Central inference's workers (tests/test_chart_inference.py; off in every values file).
    (tmp_path / "inference.yaml").write_text(yaml.safe_dump_all(render(sets=("inference.replicas=2",))))
    # The scheduling modes (tests/test_chart_scheduling.py), each with the API it needs.
    for mode, api in SCHEDULING_APIS.items():
        docs = render(sets=(f"scheduling={mode}", "kueue.clusterQueue=surreal"), api_versions=(api,))
        (tmp_path / f"scheduling-{mode}.yaml").write_text(yaml.safe_dump_all(docs))
    reports, failed, returncode = checkov("-d", str(tmp_path), "--framework", "kubernetes", "--skip-download")
    assert failed == [], "checkov failed checks:\n" + "\n".join(failed)
    assert returncode == 0
    assert sum(r["summary"]["passed"] for r in reports) >= 500, "checkov scanned too little"
    # Every skip is one of the documented ones and carries its reason (docs/kubernetes.md, "Checkov").
    skipped = {
        (s["check_id"], s["check_result"].get("suppress_comment", ""))
        for report in reports
        for s in report["results"]["skipped_checks"]
    }
    assert {check for check, _ in skipped} == {"CKV_K8S_43", "CKV_K8S_15", "CKV_K8S_8", "CKV_K8S_9", "CKV_K8S_38"}
    assert {s["resource"] for s in skipped_of(reports, "CKV_K8S_38")} == {
        f"Job.{NAMESPACE}.{d['metadata']['name']}" for d in chaos if d["kind"] == "Job"
    }, "only the chaos Job may mount an API token"
    for check, reason in skipped:
        assert len(reason.split()) >= 8, f"{check} is skipped without a real reason: {reason!r}"


def test_checkov_suppressions_in_the_chart_all_give_reasons() -> None:
    found = []
    for path in (p for p in (CHART / "templates").rglob("*") if p.is_file()):
        for line in path.read_text().splitlines():
            if "checkov.io/skip" in line:
                match = re.search(r'checkov\.io/skip\d+: "(CKV_K8S_\d+)=(.+)"', line)
                assert match, f"{path.name}: malformed suppression {line.strip()!r}"
                assert len(match.group(2).split()) >= 8, f"{path.name}: {match.group(1)} needs a real reason"
                found.append(match.group(1))
    assert sorted(set(found)) == ["CKV_K8S_15", "CKV_K8S_38", "CKV_K8S_43", "CKV_K8S_8", "CKV_K8S_9"]
