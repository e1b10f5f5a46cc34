"""The node-pool contract against the chart: evaluate the real contract module (terraform apply of a root that
calls it, no providers, local state in a temp dir) for default inputs on each cloud, and compare its Helm values
with the nodeSelectors and tolerations in infra/helm/surreal-chart/values.yaml."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

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
@pytest.mark.parametrize("role", sorted(ROLES))
def test_chart_defaults_match_the_contract(contract_outputs: dict[str, Any], cloud: str, role: str) -> None:
    expected = contract_outputs["helm_values"][cloud][role]
    block = load_chart_values().get(role)
    assert isinstance(block, dict), f"values.yaml has no {role} block"
    assert block.get("nodeSelector") == expected["nodeSelector"], f"{role}.nodeSelector differs from the contract"
    assert (block.get("tolerations") or []) == expected["tolerations"], f"{role}.tolerations differ from the contract"
