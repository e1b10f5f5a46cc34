"""Write the JSON Schema of one version of a CustomResourceDefinition to infra/helm/crds/<group>/<kind>_<version>.json.

kubernetes-validate has schemas for Kubernetes' own kinds only. The chart's custom kinds (Kueue's
WorkloadPriorityClass and LocalQueue, Volcano's PodGroup) and infra/kueue/cluster-queue.yaml's (ClusterQueue,
ResourceFlavor) are validated by tests/test_chart_scheduling.py against these files, which this script derives from
the projects' released CRDs: the version's openAPIV3Schema without `status` (nothing we write sets it), closed
(`additionalProperties: false` on every object that lists its properties and does not keep unknown fields), so a
misspelt key fails as kubeconform -strict and the API server's field validation would reject it. The path layout is
Datree's CRDs catalog's, which `make kubeconform` reads after the catalog. The source is recorded in the title.

    python infra/helm/crd_schema.py CRD.yaml VERSION --source 'kubernetes-sigs/kueue v0.19.2 config/.../x.yaml'
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parent / "crds"


def closed(node: Any) -> Any:
    """The schema with every listed-properties object closed (x-kubernetes-preserve-unknown-fields ones stay open)."""
    if isinstance(node, list):
        return [closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: closed(value) for key, value in node.items()}
    keeps_unknown = out.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in out and "additionalProperties" not in out and not keeps_unknown:
        out["additionalProperties"] = False
    return out


def schema_of(crd: dict[str, Any], version: str, source: str) -> tuple[Path, dict[str, Any]]:
    """(where it goes under CRDS, the schema) of `version` of the CRD."""
    spec = crd["spec"]
    (entry,) = [v for v in spec["versions"] if v["name"] == version]
    body = dict(entry["schema"]["openAPIV3Schema"])
    properties = {k: v for k, v in body["properties"].items() if k != "status"}
    group, kind = spec["group"], spec["names"]["kind"]
    body["properties"] = {
        **properties,
        "apiVersion": {"const": f"{group}/{version}"},
        "kind": {"const": kind},
    }
    body["required"] = sorted({*body.get("required", []), "apiVersion", "kind", "metadata"})
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": f"{group}/{version} {kind}: openAPIV3Schema of {source}, without status, closed (crd_schema.py)",
        **closed(body),
    }
    return Path(group) / f"{kind.lower()}_{version}.json", schema


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("crd", type=Path, help="the CustomResourceDefinition (YAML)")
    parser.add_argument("version", help="the served version to take, e.g. v1beta2")
    parser.add_argument("--source", required=True, help="where the CRD comes from: repository, tag, path")
    args = parser.parse_args()
    relative, schema = schema_of(yaml.safe_load(args.crd.read_text()), args.version, args.source)
    target = CRDS / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(schema, indent=1) + "\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
