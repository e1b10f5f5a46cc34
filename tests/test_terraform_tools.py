"""Terraform's own checks and checkov over infra/terraform: `terraform fmt -check -recursive`, `terraform test` of
the provider-free contract module (offline), and checkov with every suppression explained inline."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import checkov

pytestmark = pytest.mark.infra  # needs terraform and checkov

REPO = Path(__file__).resolve().parents[1]
TF_ROOT = REPO / "infra" / "terraform"
CONTRACT = TF_ROOT / "modules" / "contract"
TERRAFORM = shutil.which("terraform") or (
    "/usr/local/bin/terraform" if Path("/usr/local/bin/terraform").exists() else None
)
needs_terraform = pytest.mark.skipif(TERRAFORM is None, reason="no terraform binary on PATH or in /usr/local/bin")


def terraform_env(tmp_path: Path) -> dict[str, str]:
    """No update check over the network, no user CLI config (plugin caches, credentials) leaking in."""
    rc = tmp_path / "terraformrc"
    rc.write_text("")
    return {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_CLI_CONFIG_FILE": str(rc)}


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@needs_terraform
def test_terraform_fmt_check_recursive(tmp_path: Path) -> None:
    assert TERRAFORM is not None
    result = run([TERRAFORM, "fmt", "-check", "-recursive", "-diff", str(TF_ROOT)], REPO, terraform_env(tmp_path))
    assert result.returncode == 0, f"terraform fmt would change:\n{result.stdout}{result.stderr}"


@needs_terraform
def test_terraform_fmt_check_catches_a_misformatted_file(tmp_path: Path) -> None:
    """The check above can fail: fmt -check exits non-zero on badly formatted HCL."""
    assert TERRAFORM is not None
    (tmp_path / "bad.tf").write_text('variable "x" {\ntype=string\n    description="x"\n}\n')
    result = run([TERRAFORM, "fmt", "-check", "-recursive", str(tmp_path)], tmp_path, terraform_env(tmp_path))
    assert result.returncode != 0


@needs_terraform
def test_terraform_test_of_the_contract_module(tmp_path: Path) -> None:
    assert TERRAFORM is not None
    module = tmp_path / "contract"
    shutil.copytree(CONTRACT, module, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
    env = terraform_env(tmp_path)
    init = run([TERRAFORM, "init", "-input=false", "-backend=false", "-no-color"], module, env)
    assert init.returncode == 0, init.stdout + init.stderr
    result = run([TERRAFORM, "test", "-no-color"], module, env)
    assert result.returncode == 0, result.stdout + result.stderr
    runs = len(re.findall(r'^run "', (CONTRACT / "tests" / "contract.tftest.hcl").read_text(), re.M))
    assert f"Success! {runs} passed, 0 failed." in result.stdout, result.stdout


@needs_terraform
def test_terraform_test_fails_when_the_contract_drifts(tmp_path: Path) -> None:
    """Mutate the contract (the GPU taint's value) and the same tests must fail."""
    assert TERRAFORM is not None
    module = tmp_path / "contract"
    shutil.copytree(CONTRACT, module, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
    main = module / "main.tf"
    original = main.read_text()
    assert 'value = "present"' in original
    main.write_text(original.replace('value = "present"', 'value = "true"'))
    env = terraform_env(tmp_path)
    assert run([TERRAFORM, "init", "-input=false", "-backend=false"], module, env).returncode == 0
    result = run([TERRAFORM, "test", "-no-color"], module, env)
    assert result.returncode != 0
    assert "GPU nodes must carry exactly nvidia.com/gpu=present:NoSchedule" in result.stdout + result.stderr


def test_checkov_finds_no_failed_check() -> None:
    reports, failed, returncode = checkov("-d", str(TF_ROOT), "--framework", "terraform", "--quiet", cwd=REPO)
    assert failed == [], "checkov failed checks:\n" + "\n".join(failed)
    assert returncode == 0
    passed = sum(item["summary"]["passed"] for item in reports)
    assert passed >= 20, f"checkov scanned too little ({passed} passed checks): did it find the stacks?"
    assert sum(item["summary"]["parsing_errors"] for item in reports) == 0


def test_every_checkov_suppression_gives_a_reason() -> None:
    suppressions = []
    for path in TF_ROOT.rglob("*.tf"):
        for line in path.read_text().splitlines():
            if "checkov:skip" in line:
                match = re.search(r"#\s*checkov:skip=(CKV\w+):(.+)", line)
                assert match, f"{path}: malformed suppression {line.strip()!r}"
                assert len(match.group(2).split()) >= 8, f"{path}: {match.group(1)} needs a real reason"
                suppressions.append(match.group(1))
    assert suppressions, "expected the documented suppressions (CKV_TF_1 on registry modules, AKS ones)"
