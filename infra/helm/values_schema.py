"""Write infra/helm/surreal-chart/values.schema.json: the chart's own keys by hand, `experiment` from the runtime.

The `experiment` part is derived from the typed config the roles read (surreal.config.schema: the
ExperimentConfig dataclass tree and the ALGORITHMS registry, walked by surreal.config.reference as `surreal config`
walks it), so the chart's schema and `read_config` agree on every key and type, and each key's description is its
doc in the schema; tests/test_chart.py fails when the committed file differs from what this script writes
(`make helm-schema` rewrites it). The schema is self-contained (no remote `$ref`: Helm 4 would fetch it at lint
time) and closed (`additionalProperties: false`) wherever the keys are ours; Kubernetes-owned objects
(affinity, security contexts) are only typed, since the API server checks them.

    python infra/helm/values_schema.py [--check]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from surreal.config.reference import ALGO_EXCLUDED, walk_fields
from surreal.config.schema import ALGORITHMS, REPLAY_MODES, RUN_NAME, ExperimentConfig

SCHEMA_PATH = Path(__file__).resolve().parent / "surreal-chart" / "values.schema.json"

# Keys of ExperimentConfig the chart owns: `topology` comes from actors/replay/ps/inference (see values.yaml).
CHART_OWNED = frozenset({"topology"})
# Value rules that are plain JSON Schema (validate() in surreal.config.schema has the full set).
EXTRA: dict[str, dict[str, Any]] = {
    "name": {"pattern": f"^{RUN_NAME.pattern}$"},
    "device": {"pattern": r"^(auto|cpu|cuda(:[0-9]+)?)$"},
    "replay.mode": {"enum": ["auto", *REPLAY_MODES]},
    "seed": {"minimum": 0},
    "total_env_steps": {"minimum": 1},
    "env.id": {"minLength": 1},
    "run_uri": {"pattern": r"^(s3|gs|gcs|az|abfs|abfss)://[^/]+"},
}
_EXTRA_USED: set[str] = set()


def type_schema(hint: Any, path: str) -> dict[str, Any]:
    """JSON Schema of one dataclass field's type hint."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(hint))
        assert len(args) == 1, f"{path}: unions other than X | None are not supported"
        inner = type_schema(args[0], path)
        if nullable:
            kinds = inner["type"] if isinstance(inner["type"], list) else [inner["type"]]
            inner["type"] = [*kinds, "null"]
        return inner
    if origin is list:
        (item,) = typing.get_args(hint)
        return {"type": "array", "items": type_schema(item, f"{path}[]")}
    if origin is dict or hint is dict:
        return {"type": "object"}  # free-form (env.kwargs goes to gymnasium.make)
    if dataclasses.is_dataclass(hint):
        return object_schema(hint, f"{path}.")
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    assert hint in simple, f"{path}: no JSON Schema for {hint!r}"
    return {"type": simple[hint]}


def object_schema(cls: Any, prefix: str, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for f in walk_fields(cls, skip):
        path = f"{prefix}{f.name}"
        described = {"description": f.doc} if f.doc else {}
        properties[f.name] = {**described, **type_schema(f.hint, path), **EXTRA.get(path, {})}
        _EXTRA_USED.add(path)
    return {"type": "object", "additionalProperties": False, "properties": properties}


def algo_schema() -> dict[str, Any]:
    """`experiment.algo`: a name, or a mapping typed by the algorithm its `name` picks (ppo when absent)."""
    names = list(ALGORITHMS)
    per_algo = {}
    for name, cls in ALGORITHMS.items():
        fields = object_schema(cls, "algo.", skip=ALGO_EXCLUDED)
        fields["properties"]["name"] = {"type": "string", "enum": names}
        per_algo[name] = fields
    # if name == ddpg then ddpg's keys else if name == es then es's keys ... else ppo's (read_config's default).
    chain: dict[str, Any] = per_algo["ppo"]
    for name in reversed([n for n in names if n != "ppo"]):
        chain = {
            "if": {"required": ["name"], "properties": {"name": {"const": name}}},
            "then": per_algo[name],
            "else": chain,
        }
    return {
        "description": f"the algorithm: a name ({', '.join(names)}) or a mapping with `name` and its hyperparameters",
        "type": ["string", "object"],
        "if": {"type": "string"},
        "then": {"enum": names},
        "else": {"properties": {"name": {"type": "string", "enum": names}}, **chain},
    }


def experiment_schema() -> dict[str, Any]:
    schema = object_schema(ExperimentConfig, "", skip=CHART_OWNED)
    schema["properties"]["algo"] = algo_schema()
    unused = set(EXTRA) - _EXTRA_USED
    assert not unused, f"EXTRA names keys the config does not have: {sorted(unused)}"
    schema["description"] = (
        "the experiment config as `surreal run` takes it (partial: missing keys get the algorithm's defaults); "
        "topology is not set here but from actors.replicas, actors.envsPerActor, replay.shards, ps.replicas and "
        "inference.replicas"
    )
    return schema


def closed(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, **extra}


# values.yaml `scheduling` (templates/scheduling.yaml) and the PodGroup versions `gang` renders against.
SCHEDULING_MODES = ("none", "kueue", "volcano", "gang")
GANG_API_VERSIONS = ("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha2")
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

# An all-digit git sha given with --set arrives as a number (and one with a leading 0 loses it): refuse numbers.
TAG_NOTE = "an image tag, a string: pass git shas with --set-string image.tag=<sha>"


def chart_definitions() -> dict[str, Any]:
    tag = {"type": "string", "description": TAG_NOTE}
    quantity = {
        "description": "a Kubernetes quantity, e.g. 500m, 2, 4Gi",
        "type": ["string", "number"],
        "pattern": r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$",
    }
    return {
        "quantity": quantity,
        "resources": closed(
            {
                "requests": {"type": "object", "additionalProperties": {"$ref": "#/definitions/quantity"}},
                "limits": {"type": "object", "additionalProperties": {"$ref": "#/definitions/quantity"}},
            },
            required=["requests", "limits"],
            description="requests and limits (both required: every container is bounded)",
        ),
        "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
        "tolerations": {
            "type": "array",
            "items": closed(
                {
                    "key": {"type": "string"},
                    "operator": {"enum": ["Exists", "Equal"]},
                    "value": {"type": "string"},
                    "effect": {"enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]},
                    "tolerationSeconds": {"type": "integer"},
                }
            ),
        },
        "imageOverride": closed(
            {
                "repository": {"type": "string", "minLength": 1},
                "tag": tag,
                "digest": {"type": "string", "pattern": "^(sha256:[a-f0-9]{64})?$"},
            },
            description="overrides image.<kind> / image.tag / image.digest for this role",
        ),
        "k8sObject": {"type": "object", "description": "a Kubernetes object (checked by the API server)"},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "pdb": closed(
            {"enabled": {"type": "boolean"}, "maxUnavailable": {"type": ["integer", "string"], "minimum": 0}},
            required=["enabled", "maxUnavailable"],
        ),
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
        # A Kubernetes object name (DNS subdomain): queues, PriorityClasses, scheduler names.
        "objectName": {"type": "string", "minLength": 1, "maxLength": 253, "pattern": DNS_SUBDOMAIN},
        "priorityClass": closed(
            {
                "name": {"anyOf": [{"const": ""}, {"$ref": "#/definitions/objectName"}]},
                # Classes users may create: at most one billion (above is for system-node/cluster-critical).
                "value": {"type": "integer", "minimum": -2147483648, "maximum": 1000000000},
            },
            required=["name", "value"],
        ),
        "grace": {"type": "integer", "minimum": 0},
    }


def role(count_key: str | None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A role's values block (KubeRay style: the same keys for every role)."""
    properties: dict[str, Any] = {
        "image": {"$ref": "#/definitions/imageOverride"},
        "nodeSelector": {"$ref": "#/definitions/nodeSelector"},
        "tolerations": {"$ref": "#/definitions/tolerations"},
        "affinity": {"$ref": "#/definitions/k8sObject"},
        "resources": {"$ref": "#/definitions/resources"},
        "podSecurityContext": {"$ref": "#/definitions/k8sObject"},
        "securityContext": {"$ref": "#/definitions/k8sObject"},
        "podAnnotations": {"$ref": "#/definitions/annotations"},
        "terminationGracePeriodSeconds": {"$ref": "#/definitions/grace"},
    }
    if count_key is not None:
        properties[count_key] = {"type": "integer", "minimum": 1, "maximum": 10000}
    properties.update(extra or {})
    return closed(properties)


def values_schema() -> dict[str, Any]:
    ref = lambda name: {"$ref": f"#/definitions/{name}"}  # noqa: E731
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Values of the Surreal chart (generated by infra/helm/values_schema.py: do not edit by hand)",
        "type": "object",
        "additionalProperties": False,
        "definitions": chart_definitions(),
        "properties": {
            "experiment": experiment_schema(),
            "image": closed(
                {
                    "registry": {"type": "string"},
                    "tag": {"type": "string", "description": TAG_NOTE},
                    "digest": {"type": "string", "pattern": "^(sha256:[a-f0-9]{64})?$"},
                    "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                    "pullSecrets": {"type": "array", "items": {"type": "string", "minLength": 1}},
                    "actor": {"type": "string", "minLength": 1},
                    "learner": {"type": "string", "minLength": 1},
                    "replay": {"type": "string", "minLength": 1},
                }
            ),
            "ports": closed(
                {
                    k: ref("port")
                    for k in ("experience", "sample", "paramsPub", "ps", "inference", "metrics", "rendezvous")
                }
            ),
            "podSecurityContext": ref("k8sObject"),
            "securityContext": ref("k8sObject"),
            "tmpSizeLimit": ref("quantity"),
            "learner": role(
                "replicas",
                {
                    "checkpoints": closed(
                        {"size": ref("quantity"), "storageClassName": {"type": "string"}}, required=["size"]
                    ),
                    "pdb": ref("pdb"),
                },
            ),
            "replay": role(
                "shards",
                {
                    "pdb": ref("pdb"),
                    "persistence": closed(
                        {
                            "enabled": {"type": "boolean"},
                            "size": ref("quantity"),
                            "storageClassName": {"type": "string"},
                        },
                        required=["enabled", "size"],
                        description="the volume of the shards' snapshots: a PVC per shard, or an emptyDir",
                    ),
                },
            ),
            "ps": role("replicas"),
            "actors": role(
                "replicas",
                {
                    "envsPerActor": {"type": "integer", "minimum": 1, "maximum": 1024},
                    "pool": {
                        "description": "auto (the actor pool if the cluster has one, else cpu), actor, cpu or none",
                        "enum": ["auto", "actor", "cpu", "none"],
                    },
                },
            ),
            # 0: per-actor inference (no workers); N: topology.inference=central with N workers.
            "inference": role(None, {"replicas": {"type": "integer", "minimum": 0, "maximum": 10000}}),
            "evaluator": role(None),  # rendered only when experiment.learner.eval_interval > 0
            "scheduling": {
                "description": "how a shared cluster admits the release: none, kueue, volcano or gang",
                "enum": list(SCHEDULING_MODES),
            },
            "priorityClasses": closed(
                {
                    "create": {"type": "boolean"},
                    "core": ref("priorityClass"),
                    "actors": ref("priorityClass"),
                },
                required=["create", "core", "actors"],
            ),
            "kueue": closed(
                {"queueName": ref("objectName"), "clusterQueue": {"anyOf": [{"const": ""}, ref("objectName")]}},
                required=["queueName"],
            ),
            "volcano": closed({"queue": ref("objectName"), "schedulerName": ref("objectName")}),
            "gang": closed({"apiVersion": {"enum": ["", *GANG_API_VERSIONS]}}),
            "serviceAccount": closed(
                {"create": {"type": "boolean"}, "name": {"type": "string"}, "annotations": ref("annotations")}
            ),
            "runStorage": closed(
                {
                    "env": {"type": "array", "items": ref("k8sObject")},
                    "podLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "egress": {"type": "array", "items": ref("k8sObject")},
                },
                description="the pods that mirror the run folder to experiment.run_uri (learner, replay, evaluator)",
            ),
            "networkPolicy": closed(
                {
                    "enabled": {"type": "boolean"},
                    "metricsFrom": {"type": "array", "items": ref("k8sObject")},
                    "extraEgress": {"type": "array", "items": ref("k8sObject")},
                }
            ),
            "curve": closed(
                {
                    "enabled": {"type": "boolean"},
                    "existingSecret": {
                        "type": "string",
                        "maxLength": 253,
                        "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$",
                        "description": "a Secret's name (a DNS subdomain), or \"\" for the chart's own",
                    },
                },
                required=["enabled", "existingSecret"],
                description="ZeroMQ CURVE on every connection between roles, with keys from a Secret",
            ),
            "chaos": closed(
                {
                    "image": {"type": "string", "minLength": 1},
                    "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                    "apiServerPorts": {"type": "array", "items": ref("port"), "minItems": 1},
                    "resources": ref("resources"),
                },
                description="the chaos Job that runs experiment.chaos in the cluster (rendered only when it is active)",
            ),
            "serviceMonitor": closed(
                {
                    "enabled": {"type": "boolean"},
                    "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                }
            ),
            "grafanaDashboard": closed(
                {
                    "enabled": {"type": "boolean"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                }
            ),
            "helmTest": closed(
                {
                    "minUpdates": {"type": "integer", "minimum": 1},
                    "timeoutSeconds": {"type": "integer", "minimum": 1},
                    "resources": ref("resources"),
                }
            ),
            "global": {"type": "object"},  # Helm passes a parent chart's globals to every subchart
        },
    }


def render() -> str:
    return json.dumps(values_schema(), indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed schema is out of date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if SCHEMA_PATH.read_text() != text:
            print(f"{SCHEMA_PATH} is out of date: run make helm-schema", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text)
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
