"""The chart's `scheduling` modes (none, kueue, volcano, gang) offline: every mode's rendering validates (Kubernetes'
own kinds with kubernetes-validate, at the versions that serve them; Kueue's and Volcano's kinds against their
released CRDs' schemas in infra/helm/crds, derived by infra/helm/crd_schema.py); the gang holds exactly the learner,
the replay shards and the ps, counted as their controllers will create them, and no actor; every pod names the
queue and the priority class of its tier; `none` adds nothing; a mode whose API the cluster lacks fails in one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from test_chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    SCHEDULING_APIS,
    VALUES_FILES,
    WORKLOAD_KINDS,
    by_kind,
    find,
    render,
    run_helm,
    values_ids,
)

pytestmark = pytest.mark.infra  # needs helm, under .tools/

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "infra" / "helm" / "crds"
CLUSTER_QUEUE = REPO / "infra" / "kueue" / "cluster-queue.yaml"
KUEUE_API, VOLCANO_API = SCHEDULING_APIS["kueue"], SCHEDULING_APIS["volcano"]
# What a cluster running each mode serves (helm template has no cluster: it is told with --api-versions), and the
# Kubernetes versions whose schemas the built-in kinds are checked against: the chart's floor and a current release,
# and for `gang` the releases that serve its PodGroup (1.36: v1alpha2, 1.37: v1beta1).
MODES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "kueue": ((KUEUE_API,), ("1.30.0", "1.33.0")),
    "volcano": ((VOLCANO_API,), ("1.30.0", "1.33.0")),
    "gang-v1beta1": (("scheduling.k8s.io/v1beta1/PodGroup",), ("1.37.0",)),
    "gang-v1alpha2": (("scheduling.k8s.io/v1alpha2/PodGroup",), ("1.36.0",)),
}
CORE = ("learner", "replay", "ps")
ELASTIC = ("actor", "evaluator")
WITH_EVALUATOR = ("experiment.learner.eval_interval=20000",)
SCHEDULING_KEYS = ("kueue.x-k8s.io", "volcano.sh", "scheduling.k8s.io/group-name")


def scheduling_of(mode: str) -> str:
    return mode.split("-")[0]


def render_mode(mode: str, *values: Path, sets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    apis, _ = MODES[mode]
    return render(*values, sets=(f"scheduling={scheduling_of(mode)}", *sets), api_versions=apis)


def pod_templates(docs: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """component -> (workload, its pod template) for every Deployment and StatefulSet."""
    found = {}
    for doc in docs:
        if doc["kind"] in WORKLOAD_KINDS:
            found[doc["metadata"]["labels"]["app.kubernetes.io/component"]] = (doc, doc["spec"]["template"])
    return found


def created_pods(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(component, pod template) once per pod the controllers will create: `replicas` of each workload."""
    return [
        (component, template)
        for component, (workload, template) in pod_templates(docs).items()
        for _ in range(workload["spec"]["replicas"])
    ]


# -- validation ------------------------------------------------------------------------------------------------


def crd_schema_path(doc: dict[str, Any]) -> Path | None:
    """The committed CRD schema of a custom kind (Datree catalog layout: <group>/<kind>_<version>.json)."""
    group, _, version = doc["apiVersion"].rpartition("/")
    path = CRDS / group / f"{doc['kind'].lower()}_{version}.json"
    return path if group and path.exists() else None


def validate(doc: dict[str, Any], kube_version: str) -> str:
    """Validates one rendered object, custom kinds against their CRD's schema; says which schema judged it."""
    schema_path = crd_schema_path(doc)
    if schema_path is not None:
        jsonschema.Draft7Validator(json.loads(schema_path.read_text())).validate(doc)
        return str(schema_path.relative_to(REPO))
    kubernetes_validate.validate(doc, kube_version, strict=True)
    return f"kubernetes {kube_version}"


@pytest.mark.parametrize("values", [None, *VALUES_FILES], ids=lambda p: "defaults" if p is None else values_ids(p))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_mode_renders_manifests_that_validate(mode: str, values: Path | None) -> None:
    _, kube_versions = MODES[mode]
    sets = ("kueue.clusterQueue=surreal", *WITH_EVALUATOR) if mode == "kueue" else WITH_EVALUATOR
    docs = render_mode(mode, *([values] if values else []), sets=sets)
    judged = set()
    for kube_version in kube_versions:
        for doc in docs:
            try:
                judged.add((doc["kind"], validate(doc, kube_version)))
            except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as exc:
                pytest.fail(f"{mode}: {doc['kind']}/{doc['metadata']['name']} invalid ({kube_version}): {exc}")
    kinds = {kind for kind, _ in judged}
    expected = {
        "kueue": {"PriorityClass", "WorkloadPriorityClass", "LocalQueue"},
        "volcano": {"PriorityClass", "PodGroup"},
        "gang": {"PriorityClass", "PodGroup"},
    }[scheduling_of(mode)]
    assert kinds >= expected | {"StatefulSet", "Deployment"}
    crd_judged = {kind for kind, by in judged if by.startswith("infra/")}
    assert crd_judged == {"kueue": {"WorkloadPriorityClass", "LocalQueue"}, "volcano": {"PodGroup"}}.get(
        scheduling_of(mode), set()
    ), "Kubernetes' own PodGroup is judged by Kubernetes' schema, the others by their CRD's"


def test_a_misspelt_or_mistyped_custom_object_fails_its_crd_schema() -> None:
    """The CRD schemas can fail: they are closed (crd_schema.py) and typed."""
    docs = render_mode("volcano") + render_mode("kueue", sets=("kueue.clusterQueue=surreal",))
    (group,) = [d for d in docs if d["kind"] == "PodGroup"]
    (queue,) = by_kind(docs, "LocalQueue")
    priority = by_kind(docs, "WorkloadPriorityClass")[0]
    for doc, path, bad in (
        (group, ("spec", "minMembers"), 3),
        (group, ("spec", "minMember"), "three"),
        (queue, ("spec", "clusterQueu"), "surreal"),
        (priority, ("valu",), 100),
    ):
        broken = json.loads(json.dumps(doc))
        target = broken
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = bad
        with pytest.raises(jsonschema.ValidationError):
            validate(broken, "1.33.0")


def test_the_crd_schemas_name_their_source_and_are_closed() -> None:
    """Each committed schema says which released CRD it was derived from and rejects unknown top-level keys."""
    schemas = sorted(CRDS.glob("*/*.json"))
    assert {p.relative_to(CRDS).as_posix() for p in schemas} == {
        "kueue.x-k8s.io/workloadpriorityclass_v1beta2.json",
        "kueue.x-k8s.io/localqueue_v1beta2.json",
        "kueue.x-k8s.io/clusterqueue_v1beta2.json",
        "kueue.x-k8s.io/resourceflavor_v1beta2.json",
        "scheduling.volcano.sh/podgroup_v1beta1.json",
    }
    for path in schemas:
        schema = json.loads(path.read_text())
        jsonschema.Draft7Validator.check_schema(schema)
        assert schema["additionalProperties"] is False and "status" not in schema["properties"], path.name
        source = "kubernetes-sigs/kueue v0.19.2" if "kueue" in path.parent.name else "volcano-sh/volcano v1.15.1"
        assert source in schema["title"], path.name


def test_crd_schema_derives_a_closed_schema_without_status() -> None:
    import crd_schema  # infra/helm/crd_schema.py

    crd = {
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "metadata": {"type": "object"},
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "size": {"type": "integer"},
                                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                    },
                                },
                                "status": {"type": "object"},
                            },
                        }
                    },
                }
            ],
        }
    }
    relative, schema = crd_schema.schema_of(crd, "v1", "example/widgets v1.0.0 crd.yaml")
    assert relative == Path("example.com/widget_v1.json")
    assert "example/widgets v1.0.0 crd.yaml" in schema["title"]
    validator = jsonschema.Draft7Validator(schema)
    good = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {}, "spec": {"size": 1, "free": {"x": 1}}}
    assert validator.is_valid(good)
    for bad in (
        {**good, "status": {}},
        {**good, "spec": {"sise": 1}},
        {**good, "apiVersion": "example.com/v2"},
        {key: value for key, value in good.items() if key != "kind"},
    ):
        assert not validator.is_valid(bad), bad


# -- gang membership, queue and priority ----------------------------------------------------------------------

SIZES = ("replay.shards=4", "ps.replicas=2", "actors.replicas=8", *WITH_EVALUATOR)
GANG_SIZE = 1 + 4 + 2


def priority_classes(docs: list[dict[str, Any]], kind: str = "PriorityClass") -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in by_kind(docs, kind)}


def test_kueue_admits_learner_replay_and_ps_as_one_pod_group_and_each_actor_alone() -> None:
    docs = render_mode("kueue", sets=SIZES)
    gang = f"{RELEASE}-surreal-core"
    core_class, actors_class = f"{RELEASE}-surreal-core", f"{RELEASE}-surreal-actors"
    members = []
    for component, template in created_pods(docs):
        labels, annotations = template["metadata"]["labels"], template["metadata"]["annotations"]
        # Every pod names the queue and its tier's WorkloadPriorityClass (and the same PriorityClass).
        assert labels["kueue.x-k8s.io/queue-name"] == "surreal", component
        tier_class = core_class if component in CORE else actors_class
        assert labels["kueue.x-k8s.io/priority-class"] == tier_class, component
        assert template["spec"]["priorityClassName"] == tier_class, component
        if component in CORE:
            members.append(component)
            assert labels["kueue.x-k8s.io/pod-group-name"] == gang
            assert annotations["kueue.x-k8s.io/pod-group-total-count"] == str(GANG_SIZE)
            # A serving group never finishes: a restarted learner or shard rejoins it instead of ending it.
            assert annotations["kueue.x-k8s.io/pod-group-serving"] == "true"
        else:
            assert component in ELASTIC
            assert not {k for k in (*labels, *annotations) if k.startswith("kueue.x-k8s.io/pod-group")}, component
    # The group's declared size is the number of pods carrying its name, as the controllers create them.
    assert sorted(members) == sorted(["learner"] + ["replay"] * 4 + ["ps"] * 2)
    assert len(members) == GANG_SIZE
    # The workloads themselves carry no queue: Kueue's statefulset and deployment integrations would then admit
    # each one on its own (a StatefulSet all-or-nothing, a Deployment pod by pod), splitting the gang.
    for workload, _ in pod_templates(docs).values():
        assert not any(k.startswith("kueue.x-k8s.io/") for k in workload["metadata"].get("labels", {}))
        assert not any(k.startswith("kueue.x-k8s.io/") for k in workload["metadata"].get("annotations", {}))
    # The WorkloadPriorityClasses the labels name exist, with the PriorityClasses' values.
    workload_classes = priority_classes(docs, "WorkloadPriorityClass")
    classes = priority_classes(docs)
    assert set(workload_classes) == set(classes) == {core_class, actors_class}
    for name in classes:
        assert workload_classes[name]["value"] == classes[name]["value"]
    # Without a clusterQueue the LocalQueue is the admin's: the chart makes none.
    assert by_kind(docs, "LocalQueue") == []


def test_kueue_creates_the_local_queue_when_given_the_cluster_queue() -> None:
    docs = render_mode("kueue", sets=("kueue.clusterQueue=team-a", "kueue.queueName=rl"))
    (queue,) = by_kind(docs, "LocalQueue")
    assert queue["metadata"] == {**queue["metadata"], "name": "rl", "namespace": NAMESPACE}
    assert queue["spec"] == {"clusterQueue": "team-a"}
    for _, template in created_pods(docs):
        assert template["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "rl"


def test_volcano_puts_the_core_in_one_pod_group_and_leaves_the_actors_elastic() -> None:
    docs = render_mode("volcano", sets=(*SIZES, "volcano.queue=team-a", "priorityClasses.core.name=rl-core"))
    gang = f"{RELEASE}-surreal-core"
    (group,) = [d for d in docs if d["kind"] == "PodGroup"]
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1" and group["metadata"]["name"] == gang
    assert group["spec"] == {"minMember": GANG_SIZE, "queue": "team-a", "priorityClassName": "rl-core"}
    members = []
    for component, template in created_pods(docs):
        annotations, spec = template["metadata"]["annotations"], template["spec"]
        assert spec["schedulerName"] == "volcano", component
        assert annotations["scheduling.volcano.sh/queue-name"] == "team-a", component
        core = component in CORE
        assert spec["priorityClassName"] == ("rl-core" if core else f"{RELEASE}-surreal-actors"), component
        assert annotations["volcano.sh/preemptable"] == ("false" if core else "true"), component
        if core:
            members.append(component)
            assert annotations["scheduling.k8s.io/group-name"] == gang
        else:
            # Volcano makes each actor workload a PodGroup of its own with minMember 1: admitted pod by pod.
            assert "scheduling.k8s.io/group-name" not in annotations, component
    assert len(members) == group["spec"]["minMember"]


@pytest.mark.parametrize("mode", ["gang-v1beta1", "gang-v1alpha2"])
def test_kubernetes_gang_names_its_pod_group_in_the_core_pods_only(mode: str) -> None:
    docs = render_mode(mode, sets=SIZES)
    gang = f"{RELEASE}-surreal-core"
    (group,) = [d for d in docs if d["kind"] == "PodGroup"]
    assert group["apiVersion"] == mode.replace("gang-", "scheduling.k8s.io/")
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": GANG_SIZE}}}
    members = []
    for component, template in created_pods(docs):
        spec = template["spec"]
        assert "schedulerName" not in spec, "kube-scheduler's own GangScheduling plugin"
        if component in CORE:
            members.append(component)
            assert spec["schedulingGroup"] == {"podGroupName": gang}
            assert spec["priorityClassName"] == f"{RELEASE}-surreal-core"
        else:
            assert "schedulingGroup" not in spec and spec["priorityClassName"] == f"{RELEASE}-surreal-actors"
    assert len(members) == GANG_SIZE


def test_gang_takes_the_newest_pod_group_version_the_cluster_serves_or_the_one_set() -> None:
    def version(*apis: str, sets: tuple[str, ...] = ()) -> str:
        docs = render(sets=("scheduling=gang", *sets), api_versions=apis)
        (group,) = [d for d in docs if d["kind"] == "PodGroup"]
        return group["apiVersion"]

    both = ("scheduling.k8s.io/v1alpha2/PodGroup", "scheduling.k8s.io/v1beta1/PodGroup")
    assert version(*both) == "scheduling.k8s.io/v1beta1"
    assert version(both[0]) == "scheduling.k8s.io/v1alpha2"
    assert version(sets=("gang.apiVersion=scheduling.k8s.io/v1alpha2",)) == "scheduling.k8s.io/v1alpha2"


@pytest.mark.parametrize("mode", sorted(MODES))
def test_priority_classes_keep_the_core_above_the_preemptible_actors(mode: str) -> None:
    docs = render_mode(mode)
    classes = priority_classes(docs)
    core, actors = classes[f"{RELEASE}-surreal-core"], classes[f"{RELEASE}-surreal-actors"]
    assert core["value"] > actors["value"] > 0
    assert core["preemptionPolicy"] == "PreemptLowerPriority", "the core may take room from lower priorities"
    assert actors["preemptionPolicy"] == "Never", "actors only take room nobody needs"
    assert not core["globalDefault"] and not actors["globalDefault"]
    for component, template in created_pods(docs):
        expected = core if component in CORE else actors
        assert template["spec"]["priorityClassName"] == expected["metadata"]["name"], component
    # The helm test pod and the chaos Job are tools, not the experiment: no queue, no priority, no gang.
    chaos = render_mode(mode, sets=("experiment.chaos.kill_every_s=60",))
    for doc in [*by_kind(chaos, "Pod"), *by_kind(chaos, "Job")]:
        spec = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
        assert not {"priorityClassName", "schedulerName", "schedulingGroup"} & set(spec), doc["kind"]


def test_existing_priority_classes_are_referenced_by_name_and_none_is_created() -> None:
    sets = (
        "priorityClasses.create=false",
        "priorityClasses.core.name=rl-core",
        "priorityClasses.actors.name=spot-filler",
    )
    docs = render_mode("kueue", sets=sets)
    assert by_kind(docs, "PriorityClass") == [] and by_kind(docs, "WorkloadPriorityClass") == []
    for component, template in created_pods(docs):
        expected = "rl-core" if component in CORE else "spot-filler"
        assert template["spec"]["priorityClassName"] == expected, component
        assert template["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == expected, component
    # Named classes with create=true are created under those names.
    named = priority_classes(render_mode("volcano", sets=("priorityClasses.core.name=rl-core",)))
    assert set(named) == {"rl-core", f"{RELEASE}-surreal-actors"}


def helm_error(*sets: str, api_versions: tuple[str, ...] = ()) -> str:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for item in sets:
        args += ["--set", item]
    for api in api_versions:
        args += ["--api-versions", api]
    done = run_helm(*args)
    assert done.returncode != 0, f"{sets} rendered:\n{done.stdout[:300]}"
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    return line


def test_a_mode_the_cluster_cannot_serve_or_classes_without_names_fail_in_one_line() -> None:
    assert "scheduling=kueue: the cluster serves no kueue.x-k8s.io/v1beta2" in helm_error("scheduling=kueue")
    assert "scheduling=volcano: the cluster serves no scheduling.volcano.sh/v1beta1" in helm_error("scheduling=volcano")
    assert "scheduling=gang: the cluster serves no PodGroup" in helm_error("scheduling=gang")
    # Volcano installed but Kueue asked for, and the reverse: the check is per mode.
    assert "kueue" in helm_error("scheduling=kueue", api_versions=(VOLCANO_API,))
    message = helm_error("scheduling=volcano", "priorityClasses.create=false", api_versions=(VOLCANO_API,))
    assert "priorityClasses.create is false: set priorityClasses.core.name" in message


@pytest.mark.parametrize("values", [None, *VALUES_FILES], ids=lambda p: "defaults" if p is None else values_ids(p))
def test_none_adds_no_scheduling_key_anywhere(values: Path | None) -> None:
    """`scheduling: none` (the default) renders the plain workloads: no priority, queue, gang or scheduler."""
    docs = render(*([values] if values else []), sets=WITH_EVALUATOR)
    assert not [d for d in docs if d["kind"] in ("PriorityClass", "PodGroup", "WorkloadPriorityClass", "LocalQueue")]
    text = yaml.safe_dump_all(docs)
    assert not [key for key in SCHEDULING_KEYS if key in text]
    for _, template in created_pods(docs):
        assert not {"priorityClassName", "schedulerName", "schedulingGroup"} & set(template["spec"])
    again = render(*([values] if values else []), sets=("scheduling=none", *WITH_EVALUATOR))
    assert without_curve_keys(again) == without_curve_keys(docs)


def without_curve_keys(node: Any) -> Any:
    """`node` less what two renders of one release draw at random: the CURVE keys a new release gets (its Secret's
    data) and the workloads' checksum of them."""
    if isinstance(node, list):
        return [without_curve_keys(item) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("kind") == "Secret":
        node = {**node, "data": dict.fromkeys(node.get("data", {}), "")}
    return {key: without_curve_keys(value) for key, value in node.items() if key != "checksum/curve"}


def test_notes_say_how_the_gang_is_admitted() -> None:
    done = run_helm(
        "install", RELEASE, str(CHART), "--dry-run=client", "-n", NAMESPACE,
        "--set", "scheduling=gang", "--set", "gang.apiVersion=scheduling.k8s.io/v1beta1", "--set", "replay.shards=2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    assert f"are admitted together as {RELEASE}-surreal-core" in notes and "(4 pods)" in notes
    assert f"get podgroups.scheduling.k8s.io {RELEASE}-surreal-core" in notes
    plain = run_helm("install", RELEASE, str(CHART), "--dry-run=client", "-n", NAMESPACE)
    assert "Scheduling (" not in plain.stdout.split("NOTES:", 1)[1]


# -- the admin's ClusterQueue ----------------------------------------------------------------------------------


def test_the_example_cluster_queue_validates_and_covers_every_resource_the_pods_request() -> None:
    """infra/kueue/cluster-queue.yaml, the admin's side of `scheduling: kueue`: Kueue admits no pod asking for a
    resource its ClusterQueue does not cover, so it must cover what every values file's pods request."""
    objects = [doc for doc in yaml.safe_load_all(CLUSTER_QUEUE.read_text()) if doc]
    assert sorted(d["kind"] for d in objects) == ["ClusterQueue", "ResourceFlavor"]
    for doc in objects:
        assert crd_schema_path(doc) is not None, doc["kind"]
        validate(doc, "1.33.0")
    (queue,) = [d for d in objects if d["kind"] == "ClusterQueue"]
    (flavor,) = [d for d in objects if d["kind"] == "ResourceFlavor"]
    (group,) = queue["spec"]["resourceGroups"]
    assert [f["name"] for f in group["flavors"]] == [flavor["metadata"]["name"]]
    assert queue["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority", "a core gang may evict actors"
    requested = set()
    for values in VALUES_FILES:
        for _, template in created_pods(render_mode("kueue", values, sets=WITH_EVALUATOR)):
            for container in template["spec"]["containers"]:
                for bound in ("requests", "limits"):
                    requested |= set(container["resources"].get(bound, {}))
    assert requested <= set(group["coveredResources"]), requested - set(group["coveredResources"])
    # The chart's LocalQueue points at it under the name the docs give.
    docs = render_mode("kueue", sets=(f"kueue.clusterQueue={queue['metadata']['name']}",))
    assert by_kind(docs, "LocalQueue")[0]["spec"]["clusterQueue"] == queue["metadata"]["name"]


def test_the_modes_change_pods_not_the_workloads_names_or_selectors() -> None:
    """The modes change pods, not the workloads' identity: selectors and names are those of `none`."""
    plain = render()
    for mode in MODES:
        docs = render_mode(mode)
        for kind, component in (("StatefulSet", "learner"), ("StatefulSet", "replay"), ("Deployment", "ps")):
            ours, theirs = find(docs, kind, component), find(plain, kind, component)
            assert ours["metadata"] == theirs["metadata"], (mode, component)
            assert ours["spec"]["selector"] == theirs["spec"]["selector"], (mode, component)
