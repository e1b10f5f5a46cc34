"""infra/scripts/cluster.sh (make cluster-up / cluster-down / deploy) with stub terraform, cloud CLIs and helm on
PATH: clear errors for a missing CLI, login, tfvars or backend file, the init/plan/apply order, the confirmation
prompt, and where the kubeconfig and pool values land."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from conftest import make

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "infra" / "scripts" / "cluster.sh"

# Logs its arguments; answers `output -raw` like an applied stack would.
FAKE_TERRAFORM = """#!/usr/bin/env bash
echo "terraform $*" >> "$CALLS"
case "$*" in
  *"output -raw kubeconfig_command"*) printf '%s' "$KUBECONFIG_COMMAND" ;;
  *"output -raw helm_pool_values"*) printf 'learner:\\n  nodeSelector:\\n    surreal.dev/pool: gpu\\n' ;;
  *"output -raw helm_storage_values"*) printf 'experiment:\\n  run_uri: s3://b/runs\\n' ;;
esac
"""
# A cloud CLI whose login check passes unless FAIL_LOGIN=1; records the KUBECONFIG it was given.
FAKE_CLI = """#!/usr/bin/env bash
echo "$(basename "$0") $* KUBECONFIG=${KUBECONFIG:-}" >> "$CALLS"
[[ ${FAIL_LOGIN:-0} == 1 ]] && exit 1
exit 0
"""


def write_tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Only what the script needs from the system, so a real gcloud/aws/az on this machine cannot leak in.
    for tool in ("bash", "env", "cat", "rm", "dirname", "realpath", "basename", "printf"):
        target = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        if target.startswith("/"):
            (bin_dir / tool).symlink_to(target)
    write_tool(bin_dir, "terraform", FAKE_TERRAFORM)
    tf_root = tmp_path / "terraform"
    for cloud in ("gcp", "aws", "azure"):
        (tf_root / cloud).mkdir(parents=True)
    return {"bin": bin_dir, "tf_root": tf_root, "calls": tmp_path / "calls.log", "tmp": tmp_path}


def run_script(sandbox: dict[str, Path], *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": str(sandbox["bin"]),
        "HOME": str(sandbox["tmp"]),
        "SURREAL_TF_ROOT": str(sandbox["tf_root"]),
        "CALLS": str(sandbox["calls"]),
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=environment,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=sandbox["tmp"],
    )


def calls(sandbox: dict[str, Path]) -> list[str]:
    return sandbox["calls"].read_text().splitlines() if sandbox["calls"].exists() else []


@pytest.mark.parametrize(("cloud", "message"), [("", "CLOUD is not set"), ("openstack", "unknown CLOUD 'openstack'")])
def test_a_bad_cloud_is_named(sandbox: dict[str, Path], cloud: str, message: str) -> None:
    result = run_script(sandbox, "up", cloud)
    assert result.returncode != 0
    assert message in result.stderr
    assert calls(sandbox) == []


@pytest.mark.parametrize(
    ("cloud", "missing", "hint"),
    [
        ("gcp", "gcloud", "install the Google Cloud CLI"),
        ("aws", "aws", "install the AWS CLI"),
        ("azure", "az", "install the Azure CLI"),
    ],
)
def test_a_missing_cloud_cli_is_reported_before_terraform_runs(
    sandbox: dict[str, Path], cloud: str, missing: str, hint: str
) -> None:
    result = run_script(sandbox, "up", cloud)
    assert result.returncode != 0
    assert f"{missing} not found on PATH" in result.stderr and hint in result.stderr
    assert calls(sandbox) == [], "terraform must not run without the cloud CLI"


def test_gke_needs_the_auth_plugin(sandbox: dict[str, Path]) -> None:
    write_tool(sandbox["bin"], "gcloud", FAKE_CLI)
    result = run_script(sandbox, "up", "gcp")
    assert result.returncode != 0
    assert "gke-gcloud-auth-plugin not found" in result.stderr


@pytest.mark.parametrize(
    ("cloud", "tools", "hint"),
    [
        ("gcp", ["gcloud", "gke-gcloud-auth-plugin"], "gcloud auth application-default login"),
        ("aws", ["aws"], "aws configure"),
        ("azure", ["az", "kubelogin"], "az login"),
    ],
)
def test_missing_credentials_are_reported(sandbox: dict[str, Path], cloud: str, tools: list[str], hint: str) -> None:
    for tool in tools:
        write_tool(sandbox["bin"], tool, FAKE_CLI)
    result = run_script(sandbox, "up", cloud, FAIL_LOGIN="1")
    assert result.returncode != 0
    assert hint in result.stderr
    assert not any(call.startswith("terraform") for call in calls(sandbox))


def test_gcp_without_tfvars_says_what_to_copy(sandbox: dict[str, Path]) -> None:
    for tool in ("gcloud", "gke-gcloud-auth-plugin"):
        write_tool(sandbox["bin"], tool, FAKE_CLI)
    result = run_script(sandbox, "up", "gcp")
    assert result.returncode != 0
    assert "terraform.tfvars not found: cp" in result.stderr and "terraform.tfvars.example" in result.stderr


def test_cluster_up_inits_plans_applies_and_writes_kubeconfig_and_pool_values(sandbox: dict[str, Path]) -> None:
    write_tool(sandbox["bin"], "aws", FAKE_CLI)
    result = run_script(
        sandbox, "up", "aws", AUTO_APPROVE="1", KUBECONFIG_COMMAND="aws eks update-kubeconfig --name s --region r"
    )
    assert result.returncode == 0, result.stderr
    stack = sandbox["tf_root"] / "aws"
    terraform_calls = [call for call in calls(sandbox) if call.startswith("terraform")]
    assert terraform_calls == [
        f"terraform -chdir={stack} init -input=false",
        f"terraform -chdir={stack} plan -input=false -out=cluster.tfplan",
        f"terraform -chdir={stack} apply -input=false cluster.tfplan",
        f"terraform -chdir={stack} output -raw kubeconfig_command",
        f"terraform -chdir={stack} output -raw helm_pool_values",
        f"terraform -chdir={stack} output -raw helm_storage_values",
    ]
    # The kubeconfig command ran with KUBECONFIG pointing next to the stack, not at ~/.kube/config.
    assert f"aws eks update-kubeconfig --name s --region r KUBECONFIG={stack}/kubeconfig" in calls(sandbox)
    assert "surreal.dev/pool: gpu" in (stack / "pool-values.yaml").read_text()
    assert "run_uri: s3://b/runs" in (stack / "storage-values.yaml").read_text()


def test_cluster_up_asks_before_applying(sandbox: dict[str, Path]) -> None:
    write_tool(sandbox["bin"], "aws", FAKE_CLI)
    result = run_script(sandbox, "up", "aws", stdin="n\n")
    assert result.returncode != 0
    assert "not applied" in result.stderr
    assert not any(" apply " in call for call in calls(sandbox))
    assert any(" plan " in call for call in calls(sandbox))

    sandbox["calls"].unlink()
    result = run_script(sandbox, "up", "aws", stdin="y\n", KUBECONFIG_COMMAND="true")
    assert result.returncode == 0, result.stderr
    assert any(" apply " in call for call in calls(sandbox))


def test_backend_config_needs_backend_tf_and_is_passed_to_init(sandbox: dict[str, Path]) -> None:
    write_tool(sandbox["bin"], "aws", FAKE_CLI)
    backend = sandbox["tmp"] / "backend.hcl"
    backend.write_text('bucket = "b"\n')
    result = run_script(sandbox, "up", "aws", AUTO_APPROVE="1", BACKEND_CONFIG=str(backend))
    assert result.returncode != 0
    assert "backend.tf does not exist" in result.stderr

    (sandbox["tf_root"] / "aws" / "backend.tf").write_text('terraform {\n  backend "s3" {}\n}\n')
    result = run_script(sandbox, "up", "aws", AUTO_APPROVE="1", BACKEND_CONFIG=str(backend), KUBECONFIG_COMMAND="true")
    assert result.returncode == 0, result.stderr
    inits = [call for call in calls(sandbox) if " init " in call]
    assert inits == [f"terraform -chdir={sandbox['tf_root'] / 'aws'} init -input=false -backend-config={backend}"]


def test_cluster_down_destroys_and_removes_the_kubeconfig(sandbox: dict[str, Path]) -> None:
    write_tool(sandbox["bin"], "aws", FAKE_CLI)
    stack = sandbox["tf_root"] / "aws"
    (stack / "kubeconfig").write_text("x")
    (stack / "pool-values.yaml").write_text("x")
    (stack / "storage-values.yaml").write_text("x")
    result = run_script(sandbox, "down", "aws", AUTO_APPROVE="1")
    assert result.returncode == 0, result.stderr
    assert f"terraform -chdir={stack} destroy -input=false -auto-approve" in calls(sandbox)
    assert not any((stack / name).exists() for name in ("kubeconfig", "pool-values.yaml", "storage-values.yaml"))


def test_deploy_needs_a_cluster_first(sandbox: dict[str, Path]) -> None:
    result = run_script(sandbox, "deploy", "")
    assert result.returncode != 0
    assert "run make cluster-up" in result.stderr


def deploy_to_a_cluster(sandbox: dict[str, Path], cloud: str, **env: str) -> tuple[Path, Path, str]:
    """`cluster.sh deploy` after a (stand-in) cluster-up on `cloud`, helm recording its call: the stack folder,
    the chart and the one helm command line."""
    write_tool(sandbox["bin"], "helm", '#!/usr/bin/env bash\necho "helm $*" >> "$CALLS"\n')
    stack = sandbox["tf_root"] / cloud
    (stack / "kubeconfig").write_text("x")
    (stack / "pool-values.yaml").write_text("x")
    chart = sandbox["tmp"] / "chart"
    chart.mkdir()
    result = run_script(sandbox, "deploy", "", HELM=str(sandbox["bin"] / "helm"), SURREAL_CHART=str(chart), **env)
    assert result.returncode == 0, result.stderr
    (call,) = calls(sandbox)
    return stack, chart, call


def test_deploy_runs_helm_with_the_pool_values_before_the_experiment_values(sandbox: dict[str, Path]) -> None:
    experiment = sandbox["tmp"] / "ppo.yaml"
    experiment.write_text("x")
    stack, chart, call = deploy_to_a_cluster(sandbox, "gcp", VALUES=str(experiment))
    assert call == (
        f"helm upgrade --install surreal {chart} --kubeconfig {stack}/kubeconfig --namespace surreal "
        f"--create-namespace -f {stack}/pool-values.yaml -f {experiment} --wait --timeout 15m"
    )


def test_deploy_passes_the_run_storage_values_between_the_pools_and_the_experiments(sandbox: dict[str, Path]) -> None:
    experiment = sandbox["tmp"] / "ppo.yaml"
    experiment.write_text("x")
    (sandbox["tf_root"] / "aws" / "storage-values.yaml").write_text("experiment:\n  run_uri: s3://b/runs\n")
    stack, _, call = deploy_to_a_cluster(sandbox, "aws", VALUES=str(experiment))
    assert f"-f {stack}/pool-values.yaml -f {stack}/storage-values.yaml -f {experiment} --wait" in call


def test_deploy_sets_the_pushed_images_registry_and_tag_as_a_string(sandbox: dict[str, Path]) -> None:
    stack, _, call = deploy_to_a_cluster(sandbox, "aws", IMAGE_REGISTRY="ghcr.io/org/", IMAGE_TAG="0123456")
    assert call.endswith(
        f"-f {stack}/pool-values.yaml --set image.registry=ghcr.io/org --set-string image.tag=0123456 "
        "--wait --timeout 15m"
    )


def test_the_makefile_targets_call_the_script() -> None:
    makefile = (REPO / "Makefile").read_text()
    block = makefile.split("# ---- Provisioner: Terraform ----", 1)[1]
    for target in (
        "cluster-up",
        "cluster-down",
        "deploy",
        "tf-fmt",
        "tf-test",
        "tf-validate",
        "tflint",
        "checkov-terraform",
        "terraform-test",
    ):
        assert f"\n{target}:" in block, f"Makefile lacks the {target} target"
    dry = make("-n", "cluster-up", "CLOUD=aws", "AUTO_APPROVE=1")
    assert dry.returncode == 0, dry.stderr
    assert 'AUTO_APPROVE="1"' in dry.stdout and 'infra/scripts/cluster.sh up "aws"' in dry.stdout
