"""Static checks of the Terraform under infra/terraform: every file parses (python-hcl2), variables are declared,
used, typed and described, providers and modules are pinned, the three stacks expose the same outputs, use the
shared contract module, and their examples and READMEs match their interfaces. Offline; no terraform binary."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import hcl2
import pytest

REPO = Path(__file__).resolve().parents[1]
TF_ROOT = REPO / "infra" / "terraform"
STACKS = ("gcp", "aws", "azure")
CONTRACT = TF_ROOT / "modules" / "contract"
ROOTS = {**{name: TF_ROOT / name for name in STACKS}, "contract": CONTRACT}
BACKENDS = {"gcp": "gcs", "aws": "s3", "azure": "azurerm"}
# Outputs the issue asks for on all three clouds (the stacks may add more, but the same more everywhere).
REQUIRED_OUTPUTS = {"cluster_name", "cluster_endpoint", "kubeconfig_command", "gpu_pool_labels", "gpu_pool_taints"}
# Provider each resource/data type prefix belongs to.
PROVIDER_OF_PREFIX = {"google": "google", "aws": "aws", "azurerm": "azurerm", "helm": "helm"}


def unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def strip_comments(node: Any) -> Any:
    """python-hcl2 keeps comments under __comments__; a variable named in a comment is not a use."""
    if isinstance(node, dict):
        return {k: strip_comments(v) for k, v in node.items() if not k.startswith("__")}
    if isinstance(node, list):
        return [strip_comments(v) for v in node]
    return node


def parse(path: Path) -> dict[str, Any]:
    with path.open() as handle:
        return strip_comments(hcl2.load(handle))


def tf_files(root: Path) -> list[Path]:
    return sorted(root.glob("*.tf"))


def blocks(root: Path, kind: str) -> dict[str, dict[str, Any]]:
    """Labelled top-level blocks of one kind (variable, output, module) across a root's .tf files, by name."""
    found: dict[str, dict[str, Any]] = {}
    for path in tf_files(root):
        for block in parse(path).get(kind, []):
            for name, body in block.items():
                assert unquote(name) not in found, f"{kind} {name} declared twice in {root}"
                found[unquote(name)] = body
    return found


def references(node: Any, prefix: str) -> set[str]:
    return set(re.findall(rf"\b{prefix}\.([A-Za-z_][A-Za-z0-9_-]*)", json.dumps(node)))


def all_tf_files() -> list[Path]:
    return sorted(p for p in TF_ROOT.rglob("*.tf") if ".terraform" not in p.parts)


def test_the_tree_has_the_three_stacks_and_the_contract_module() -> None:
    for root in ROOTS.values():
        for name in ("versions.tf", "variables.tf", "main.tf", "outputs.tf", "README.md"):
            assert (root / name).is_file(), f"{root / name} missing"
    for stack in STACKS:
        assert (TF_ROOT / stack / "terraform.tfvars.example").is_file()
    assert list((CONTRACT / "tests").glob("*.tftest.hcl")), "the contract module needs terraform tests"


@pytest.mark.parametrize("path", all_tf_files(), ids=lambda p: str(p.relative_to(TF_ROOT)))
def test_every_tf_file_parses(path: Path) -> None:
    assert isinstance(parse(path), dict)


@pytest.mark.parametrize("root", ROOTS.values(), ids=ROOTS.keys())
def test_every_referenced_variable_is_declared_and_every_declared_one_used(root: Path) -> None:
    declared = blocks(root, "variable")
    used: set[str] = set()
    for path in tf_files(root):
        tree = parse(path)
        for kind, items in tree.items():
            for item in items if isinstance(items, list) else [items]:
                if kind == "variable":
                    # A validation may name other variables (counts as their use), not its own.
                    for name, body in item.items():
                        used |= references(body, "var") - {unquote(name)}
                else:
                    used |= references(item, "var")
    assert used - declared.keys() == set(), f"undeclared variables referenced in {root}"
    assert declared.keys() - used == set(), f"variables declared but never used in {root}"


@pytest.mark.parametrize("root", ROOTS.values(), ids=ROOTS.keys())
def test_every_variable_has_a_type_and_a_description(root: Path) -> None:
    for name, body in blocks(root, "variable").items():
        assert "type" in body, f"variable {name} in {root} has no type"
        assert unquote(str(body.get("description", ""))).strip(), f"variable {name} in {root} has no description"


@pytest.mark.parametrize("root", ROOTS.values(), ids=ROOTS.keys())
def test_every_output_has_a_description(root: Path) -> None:
    for name, body in blocks(root, "output").items():
        assert unquote(str(body.get("description", ""))).strip(), f"output {name} in {root} has no description"


def terraform_settings(root: Path) -> dict[str, Any]:
    settings = [block for path in tf_files(root) for block in parse(path).get("terraform", [])]
    assert len(settings) == 1, f"{root} must have exactly one terraform block (versions.tf)"
    return settings[0]


@pytest.mark.parametrize("stack", STACKS)
def test_providers_are_pinned_and_every_used_provider_is_required(stack: str) -> None:
    root = TF_ROOT / stack
    settings = terraform_settings(root)
    assert re.fullmatch(r">= 1\.\d+, < 2\.0", unquote(settings["required_version"]))
    required = {}
    for block in settings["required_providers"]:
        for name, spec in block.items():
            required[unquote(name)] = spec
    for name, spec in required.items():
        assert unquote(spec["source"]) == f"hashicorp/{name}", name
        # ~> MAJOR.MINOR: minor and patch upgrades inside one major version only, never a new major.
        assert re.fullmatch(r"~> \d+\.\d+", unquote(spec["version"])), f"{stack}: provider {name} is not pinned"
    used = set()
    for path in tf_files(root):
        tree = parse(path)
        for kind in ("resource", "data"):
            for block in tree.get(kind, []):
                for rtype in block:
                    used.add(PROVIDER_OF_PREFIX[unquote(rtype).split("_")[0]])
        for block in tree.get("provider", []):
            used |= {unquote(name) for name in block}
    assert used <= required.keys(), f"{stack} uses providers it does not require: {used - required.keys()}"
    assert required.keys() <= used, f"{stack} requires providers it never uses: {required.keys() - used}"


@pytest.mark.parametrize("stack", STACKS)
def test_modules_are_pinned_to_exact_versions_and_the_contract_is_used(stack: str) -> None:
    modules = blocks(TF_ROOT / stack, "module")
    registry = {name: body for name, body in modules.items() if not unquote(body["source"]).startswith("./")}
    registry.pop("contract")
    # Azure's AKS module is being retired (its AVM successor is pre-1.0): azure/ uses plain azurerm resources.
    assert bool(registry) == (stack != "azure"), f"{stack}: unexpected community modules {sorted(registry)}"
    for name, body in registry.items():
        source = unquote(body["source"])
        assert re.fullmatch(r"[\w-]+/[\w-]+/[\w-]+(//[\w/-]+)?", source), (
            f"{stack}: module {name} not from the registry"
        )
        assert re.fullmatch(r"\d+\.\d+\.\d+", unquote(str(body.get("version", "")))), f"{stack}: {name} not exact"
    contract = modules["contract"]
    assert unquote(contract["source"]) == "../modules/contract"
    assert "version" not in contract
    assert unquote(contract["cloud"]) == stack
    for pool in ("cpu_pool", "gpu_pool", "actor_pool"):
        assert contract[pool] == f"${{var.{pool}}}", f"{stack}: the contract must get {pool} as the stack's input"


@pytest.mark.parametrize("stack", STACKS)
def test_node_pools_take_labels_and_taints_from_the_contract(stack: str) -> None:
    code = re.sub(r"#.*", "", (TF_ROOT / stack / "main.tf").read_text())
    text = " ".join(code.split())
    labels_from_contract = {
        "gcp": ["node_pools_labels = merge({ all = {} }, { for name, pool in local.pools : name => pool.labels })"],
        "aws": ["labels = pool.labels"],
        "azure": ["node_labels = each.value.labels"],
    }[stack]
    taints_from_contract = {
        "gcp": [
            "node_pools_taints = merge({ all = [] }, "
            "{ for name, pool in local.pools : name => pool.declared_taints_enum })"
        ],
        "aws": ["taints = { for taint in pool.declared_taints_enum : taint.key => taint }"],
        "azure": ["node_taints = each.value.declared_taints_aks"],
    }[stack]
    for snippet in labels_from_contract + taints_from_contract:
        assert snippet in text, f"{stack}/main.tf does not set {snippet!r}"
    assert "nvidia.com/gpu" not in text.replace("nvidia.com/gpu=present:NoSchedule", ""), (
        f"{stack} hard-codes the GPU taint instead of taking it from the contract"
    )
    for own in ("surreal.dev/pool", "scalesetpriority"):
        assert own not in text, f"{stack} hard-codes {own} instead of taking it from the contract"


@pytest.mark.parametrize("stack", STACKS)
def test_the_actor_pool_is_created_only_from_the_contracts_actor_entry(stack: str) -> None:
    """Off by default (the contract has no actor entry then), spot by default, the same bounds everywhere."""
    text = " ".join(re.sub(r"#.*", "", (TF_ROOT / stack / "main.tf").read_text()).split())
    # gcp lists its pools by hand and adds the actor pool from the contract; aws and azure loop over every pool.
    creates = {
        "gcp": 'if name == "actor" ]',
        "aws": "eks_managed_node_groups = { for name, pool in local.pools : name =>",
        "azure": "for_each = local.pools",
    }[stack]
    assert creates in text, f"{stack}/main.tf does not create its pools from the contract's pools"
    assert 'capacity_type = pool.spot ? "SPOT" : "ON_DEMAND"' in text or stack != "aws"
    assert 'priority = each.value.spot ? "Spot" : "Regular"' in text or stack != "azure"
    assert "spot = pool.spot" in text or stack != "gcp"
    actor = blocks(TF_ROOT / stack, "variable")["actor_pool"]
    assert actor["default"] == {}, f"{stack}: actor_pool must be off unless set"
    fields = re.findall(r"(\w+) = optional\((\w+), ([^)]*)\)", actor["type"])
    defaults = {name: value for name, _, value in fields}
    assert defaults["enabled"] == "false" and defaults["spot"] == "true", defaults
    assert (defaults["min_nodes"], defaults["max_nodes"]) == ("0", "20"), defaults


def test_the_three_stacks_expose_the_same_outputs() -> None:
    names = {stack: set(blocks(TF_ROOT / stack, "output")) for stack in STACKS}
    assert names["gcp"] == names["aws"] == names["azure"], names
    assert names["gcp"] >= REQUIRED_OUTPUTS
    for stack in STACKS:
        assert blocks(TF_ROOT / stack, "output")["cluster_endpoint"].get("sensitive") is True


def test_the_three_stacks_share_their_common_inputs() -> None:
    common = {"name", "control_plane_authorized_cidrs", "cpu_pool", "gpu_pool", "actor_pool", "kueue"}
    for stack in STACKS:
        variables = blocks(TF_ROOT / stack, "variable")
        assert common <= variables.keys(), f"{stack} lacks {common - variables.keys()}"
        assert "default" in variables["control_plane_authorized_cidrs"]
        assert variables["control_plane_authorized_cidrs"]["default"] == [], "the public API must be closed by default"


def resources(root: Path, rtype: str) -> dict[str, dict[str, Any]]:
    """A root's resources of one type, by name."""
    found: dict[str, dict[str, Any]] = {}
    for path in tf_files(root):
        for block in parse(path).get("resource", []):
            for kind, named in block.items():
                if unquote(kind) == rtype:
                    found.update({unquote(name): body for name, body in named.items()})
    return found


KUEUE_CHART_REPOSITORY = "oci://registry.k8s.io/kueue/charts"


def kueue_default_version(stack: str) -> str:
    fields = re.findall(r"(\w+) = optional\((\w+), ([^)]*)\)", blocks(TF_ROOT / stack, "variable")["kueue"]["type"])
    return unquote({name: value for name, _, value in fields}["chart_version"])


@pytest.mark.parametrize("stack", STACKS)
def test_kueue_is_installed_only_when_enabled_from_its_pinned_chart_on_the_cpu_pool(stack: str) -> None:
    """The chart's `scheduling: kueue` needs Kueue; the stacks install it only when asked (off by default)."""
    kueue = blocks(TF_ROOT / stack, "variable")["kueue"]
    assert kueue["default"] == {}, f"{stack}: kueue must be off unless set"
    assert "enabled = optional(bool, false)" in kueue["type"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", kueue_default_version(stack)), f"{stack}: pin an exact Kueue version"
    release = resources(TF_ROOT / stack, "helm_release")["kueue"]
    assert release["count"] == "${var.kueue.enabled ? 1 : 0}"
    assert unquote(release["repository"]) == KUEUE_CHART_REPOSITORY and unquote(release["chart"]) == "kueue"
    assert release["version"] == "${var.kueue.chart_version}"
    assert unquote(release["namespace"]) == "kueue-system" and release["create_namespace"] is True
    (values,) = release["values"]
    for placement in ("nodeSelector = local.pools.cpu.node_selector", "tolerations = local.pools.cpu.tolerations"):
        assert placement in values, f"{stack}: Kueue belongs on the stable CPU pool"
    assert release["depends_on"], f"{stack}: Kueue's pods need the node pools first"


def test_the_stacks_install_the_kueue_release_the_chart_and_its_crd_schemas_follow() -> None:
    """One Kueue version everywhere: the stacks' default, docs/kubernetes.md, and the CRD schemas the chart's Kueue
    objects are validated against (infra/helm/crds/kueue.x-k8s.io, tests/test_chart_scheduling.py)."""
    (version,) = {kueue_default_version(stack) for stack in STACKS}
    assert f"Kueue v{version}" in (REPO / "docs" / "kubernetes.md").read_text()
    schemas = sorted((REPO / "infra" / "helm" / "crds" / "kueue.x-k8s.io").glob("*.json"))
    assert schemas
    for schema in schemas:
        assert f"kubernetes-sigs/kueue v{version} " in json.loads(schema.read_text())["title"], schema.name


def test_the_contract_module_is_provider_free() -> None:
    for path in tf_files(CONTRACT):
        tree = parse(path)
        assert not {"provider", "resource", "data", "module"} & tree.keys(), f"{path} needs a provider"
    assert "required_providers" not in terraform_settings(CONTRACT)


@pytest.mark.parametrize("stack", STACKS)
def test_tfvars_example_sets_only_declared_variables_and_all_required_ones(stack: str) -> None:
    root = TF_ROOT / stack
    variables = blocks(root, "variable")
    example = parse(root / "terraform.tfvars.example")
    assert example.keys() <= variables.keys(), f"unknown variables in {stack}/terraform.tfvars.example"
    required = {name for name, body in variables.items() if "default" not in body}
    assert required <= example.keys(), f"{stack}/terraform.tfvars.example lacks required {required - example.keys()}"


@pytest.mark.parametrize("stack", STACKS)
def test_remote_state_examples_name_the_cloud_backend(stack: str) -> None:
    root = TF_ROOT / stack
    assert not (root / "backend.tf").exists(), "state must be local by default: backend.tf is the user's copy"
    backend = parse(root / "backend.tf.example")["terraform"][0]["backend"][0]
    assert [unquote(k) for k in backend] == [BACKENDS[stack]]
    config = parse(root / "backend.hcl.example")
    assert config, f"{stack}/backend.hcl.example is empty"
    if stack == "aws":
        assert config["use_lockfile"] is True, "S3 state must be locked"


@pytest.mark.parametrize("root", ROOTS.values(), ids=ROOTS.keys())
def test_readme_reference_is_generated_from_the_current_code(root: Path) -> None:
    sys.path.insert(0, str(REPO / "infra" / "scripts"))
    try:
        import tf_docs
    finally:
        sys.path.pop(0)
    readme = root / "README.md"
    assert tf_docs.update(readme, tf_docs.render(root)) == readme.read_text(), (
        f"{readme} is out of date: python infra/scripts/tf_docs.py {root.relative_to(REPO)}"
    )
    reference = readme.read_text().split("<!-- BEGIN_TF_DOCS -->", 1)[1]
    for name in blocks(root, "variable"):
        assert f"| {name} |" in reference.split("## Outputs")[0], f"input {name} undocumented"
    for name in blocks(root, "output"):
        assert f"| {name} |" in reference.split("## Outputs")[1], f"output {name} undocumented"
