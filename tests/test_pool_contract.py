"""The node-pool contract against the chart: evaluate the real contract module (terraform apply of a root that
calls it, no providers, local state in a temp dir) for default inputs on each cloud, with and without the actor
pool, compare its Helm values with the nodeSelectors and tolerations in infra/helm/surreal-chart/values.yaml,
and schedule the chart's rendered pods on the contract's pools (labels, taints) to see where each role can land."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from test_chart import find, render

pytestmark = pytest.mark.infra  # needs terraform and helm

REPO = Path(__file__).resolve().parents[1]
CONTRACT = REPO / "infra" / "terraform" / "modules" / "contract"
CHART_VALUES = REPO / "infra" / "helm" / "surreal-chart" / "values.yaml"
TERRAFORM = shutil.which("terraform") or (
    "/usr/local/bin/terraform" if Path("/usr/local/bin/terraform").exists() else None
)
CLOUDS = ("gcp", "aws", "azure")
ROLES = {"learner": "gpu", "actors": "cpu", "replay": "cpu", "ps": "cpu"}

# Default inputs: each stack's default machine types, no spot (the contract's defaults for everything else).
ROOT_MODULE = """
module "gcp" {
  source   = "./contract"
  cloud    = "gcp"
  cpu_pool = { machine_type = "n2-standard-8" }
  gpu_pool = { machine_type = "g2-standard-8", accelerator_type = "nvidia-l4" }
}
module "aws" {
  source   = "./contract"
  cloud    = "aws"
  cpu_pool = { machine_type = "m6i.2xlarge" }
  gpu_pool = { machine_type = "g6.2xlarge" }
}
module "azure" {
  source   = "./contract"
  cloud    = "azure"
  cpu_pool = { machine_type = "Standard_D8s_v5" }
  gpu_pool = { machine_type = "Standard_NC8as_T4_v3" }
}
module "gcp_actor" {
  source     = "./contract"
  cloud      = "gcp"
  cpu_pool   = { machine_type = "n2-standard-8" }
  gpu_pool   = { machine_type = "g2-standard-8", accelerator_type = "nvidia-l4" }
  actor_pool = { enabled = true, machine_type = "n2-standard-8" }
}
module "aws_actor" {
  source     = "./contract"
  cloud      = "aws"
  cpu_pool   = { machine_type = "m6i.2xlarge" }
  gpu_pool   = { machine_type = "g6.2xlarge" }
  actor_pool = { enabled = true, machine_type = "m6i.2xlarge" }
}
module "azure_actor" {
  source     = "./contract"
  cloud      = "azure"
  cpu_pool   = { machine_type = "Standard_D8s_v5" }
  gpu_pool   = { machine_type = "Standard_NC8as_T4_v3" }
  actor_pool = { enabled = true, machine_type = "Standard_D8s_v5" }
}
output "with_actor_pool" {
  value = {
    for cloud, contract in { gcp = module.gcp_actor, aws = module.aws_actor, azure = module.azure_actor } : cloud => {
      helm_values      = contract.helm_values
      helm_values_yaml = contract.helm_values_yaml
      node_labels      = contract.node_labels
      node_taints      = contract.node_taints
    }
  }
}
output "helm_values_yaml" {
  value = {
    gcp = module.gcp.helm_values_yaml, aws = module.aws.helm_values_yaml, azure = module.azure.helm_values_yaml
  }
}
output "helm_values" {
  value = { gcp = module.gcp.helm_values, aws = module.aws.helm_values, azure = module.azure.helm_values }
}
output "node_labels" {
  value = { gcp = module.gcp.node_labels, aws = module.aws.node_labels, azure = module.azure.node_labels }
}
output "node_taints" {
  value = { gcp = module.gcp.node_taints, aws = module.aws.node_taints, azure = module.azure.node_taints }
}
"""


@pytest.fixture(scope="module")
def contract_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if TERRAFORM is None:
        pytest.skip("no terraform binary on PATH or in /usr/local/bin: cannot evaluate the contract module")
    work = tmp_path_factory.mktemp("pool-contract")
    shutil.copytree(CONTRACT, work / "contract", ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "tests"))
    (work / "main.tf").write_text(ROOT_MODULE)
    rc = work / "terraformrc"
    rc.write_text("")
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_CLI_CONFIG_FILE": str(rc)}
    for args in (["init", "-input=false"], ["apply", "-auto-approve", "-input=false", "-no-color"]):
        done = subprocess.run([TERRAFORM, *args], cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"terraform {args[0]} failed:\n{done.stdout}{done.stderr}"
    shown = subprocess.run(
        [TERRAFORM, "output", "-json"], cwd=work, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return {name: output["value"] for name, output in json.loads(shown.stdout).items()}


def load_chart_values() -> dict[str, Any]:
    assert CHART_VALUES.is_file(), f"{CHART_VALUES} does not exist (the Helm chart's default values)"
    values = yaml.safe_load(CHART_VALUES.read_text())
    assert isinstance(values, dict)
    return values


def test_contract_defaults_are_the_agreed_labels_and_taints(contract_outputs: dict[str, Any]) -> None:
    for cloud in CLOUDS:
        assert contract_outputs["node_labels"][cloud] == {
            "cpu": {"surreal.dev/pool": "cpu"},
            "gpu": {"surreal.dev/pool": "gpu"},
        }
        assert contract_outputs["node_taints"][cloud] == {
            "cpu": [],
            "gpu": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        }


def test_contract_gives_the_same_chart_values_on_every_cloud(contract_outputs: dict[str, Any]) -> None:
    helm = contract_outputs["helm_values"]
    assert helm["gcp"] == helm["aws"] == helm["azure"]
    assert set(helm["gcp"]) == set(ROLES)


@pytest.mark.parametrize("cloud", CLOUDS)
@pytest.mark.parametrize("role", sorted(set(ROLES) - {"actors"}))
def test_chart_defaults_match_the_contract(contract_outputs: dict[str, Any], cloud: str, role: str) -> None:
    expected = contract_outputs["helm_values"][cloud][role]
    block = load_chart_values().get(role)
    assert isinstance(block, dict), f"values.yaml has no {role} block"
    assert block.get("nodeSelector") == expected["nodeSelector"], f"{role}.nodeSelector differs from the contract"
    assert (block.get("tolerations") or []) == expected["tolerations"], f"{role}.tolerations differ from the contract"


def test_the_contract_names_the_actors_pool_for_the_chart(contract_outputs: dict[str, Any]) -> None:
    """actors.pool in pool-values.yaml: cpu without an actor pool, actor with one (the chart's own default is auto)."""
    assert load_chart_values()["actors"]["pool"] == "auto"
    for cloud in CLOUDS:
        assert contract_outputs["helm_values"][cloud]["actors"]["pool"] == "cpu"
        assert contract_outputs["with_actor_pool"][cloud]["helm_values"]["actors"]["pool"] == "actor"
        assert contract_outputs["with_actor_pool"][cloud]["node_labels"]["actor"]["surreal.dev/pool"] == "actor"


# -- scheduling the rendered pods on the contract's pools ---------------------------------------------------


def matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    return {
        "In": key in labels and labels[key] in values,
        "NotIn": key not in labels or labels[key] not in values,
        "Exists": key in labels,
        "DoesNotExist": key not in labels,
    }[operator]


def tolerates(toleration: dict[str, Any], taint: dict[str, str]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if not toleration.get("key"):
        return toleration.get("operator") == "Exists"
    if toleration["key"] != taint["key"]:
        return False
    return toleration.get("operator", "Equal") == "Exists" or toleration.get("value", "") == taint["value"]


def schedulable(spec: dict[str, Any], labels: dict[str, str], taints: list[dict[str, str]]) -> bool:
    """Whether the scheduler may put a pod with this spec on a node with these labels and taints."""
    if not (spec.get("nodeSelector") or {}).items() <= labels.items():
        return False
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required and not any(
        all(matches(e, labels) for e in term.get("matchExpressions", [])) for term in required["nodeSelectorTerms"]
    ):
        return False
    tolerations = spec.get("tolerations") or []
    return all(
        any(tolerates(t, taint) for t in tolerations)
        for taint in taints
        if taint["effect"] in ("NoSchedule", "NoExecute")
    )


def test_the_scheduling_model_can_say_no() -> None:
    """The checks below can fail: a taint nobody tolerates, a selector nobody carries, an affinity unmet."""
    taint = {"key": "surreal.dev/pool", "value": "actor", "effect": "NoSchedule"}
    assert schedulable({}, {"surreal.dev/pool": "actor"}, []) and not schedulable({}, {}, [taint])
    assert not schedulable({"nodeSelector": {"surreal.dev/pool": "cpu"}}, {"surreal.dev/pool": "gpu"}, [])
    assert schedulable({"tolerations": [{"key": "surreal.dev/pool", "operator": "Exists"}]}, {}, [taint])
    assert not schedulable({"tolerations": [{"key": "surreal.dev/pool", "value": "gpu"}]}, {}, [taint])
    term = {"matchExpressions": [{"key": "surreal.dev/pool", "operator": "In", "values": ["actor", "cpu"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    assert not schedulable({"affinity": affinity}, {"surreal.dev/pool": "gpu"}, [])


COMPONENTS = {"learner": ("StatefulSet", "learner"), "replay": ("StatefulSet", "replay"), "ps": ("Deployment", "ps")}
COMPONENTS["actors"] = ("StatefulSet", "actor")


def landing_pools(docs: list[dict[str, Any]], contract: dict[str, Any]) -> dict[str, set[str]]:
    """For every role, the contract pools its rendered pod may be scheduled on."""
    pools = contract["node_labels"]
    return {
        role: {
            pool
            for pool in pools
            if schedulable(
                find(docs, kind, component)["spec"]["template"]["spec"], pools[pool], contract["node_taints"][pool]
            )
        }
        for role, (kind, component) in COMPONENTS.items()
    }


@pytest.mark.parametrize("cloud", CLOUDS)
@pytest.mark.parametrize("actor_pool", [False, True], ids=["no-actor-pool", "actor-pool"])
@pytest.mark.parametrize("values", ["chart-defaults", "pool-values"])
def test_every_role_lands_only_on_its_pools(
    contract_outputs: dict[str, Any], tmp_path: Path, cloud: str, actor_pool: bool, values: str
) -> None:
    """helm install with the chart's defaults, or with the stack's pool-values.yaml (what make deploy passes):
    replay, ps and the learner never land on the actor pool; the actors land only there once the stack has
    one and pool-values.yaml says so, on the actor or the CPU pool with the chart's own `auto`."""
    if actor_pool:
        contract = contract_outputs["with_actor_pool"][cloud]
    else:
        contract = {key: contract_outputs[key][cloud] for key in ("node_labels", "node_taints", "helm_values_yaml")}
    files = ()
    if values == "pool-values":
        files = (tmp_path / "pool-values.yaml",)
        files[0].write_text(contract["helm_values_yaml"])
    landed = landing_pools(render(*files), contract)
    actors = {"actor"} if values == "pool-values" else {"actor", "cpu"}
    assert landed == {
        "learner": {"gpu"},
        "replay": {"cpu"},
        "ps": {"cpu"},
        "actors": actors if actor_pool else {"cpu"},
    }


@pytest.mark.parametrize("cloud", CLOUDS)
def test_auto_prefers_the_actor_pool(contract_outputs: dict[str, Any], cloud: str) -> None:
    labels = contract_outputs["with_actor_pool"][cloud]["node_labels"]
    spec = find(render(), "StatefulSet", "actor")["spec"]["template"]["spec"]
    (preferred,) = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    favoured = {
        pool for pool in labels if all(matches(e, labels[pool]) for e in preferred["preference"]["matchExpressions"])
    }
    assert favoured == {"actor"}
