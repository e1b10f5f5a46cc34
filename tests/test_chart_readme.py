"""The chart as a user gets it: a README that `helm show readme` prints, with a values table generated from the
annotated values.yaml and the schema (the same table in docs/kubernetes.md), comments that name every algorithm,
and a package `helm package` makes. The table fails the suite when it drifts from the chart."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

import chart_readme  # infra/helm/chart_readme.py (pythonpath in pyproject.toml)
from conftest import make
from surreal.config.schema import ALGORITHMS

pytestmark = pytest.mark.infra  # needs helm, under .tools/

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "infra" / "helm" / "surreal-chart"
HELM = REPO / ".tools" / "bin" / "helm"
KUBERNETES_PAGE = REPO / "docs" / "kubernetes.md"


def values_text() -> str:
    return (CHART / "values.yaml").read_text()


def schema() -> dict:
    return json.loads((CHART / "values.schema.json").read_text())


def test_both_tables_are_what_the_generator_writes_and_cover_every_value() -> None:
    done = subprocess.run(
        [sys.executable, "infra/helm/chart_readme.py", "--check"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    table = chart_readme.table(values_text(), schema())
    for target in (CHART / "README.md", KUBERNETES_PAGE):
        assert f"{chart_readme.BEGIN}\n\n{table}\n\n{chart_readme.END}" in target.read_text(), target


def test_rows_take_their_type_from_the_schema_and_their_default_from_values_yaml() -> None:
    rows = {row.key: row for row in chart_readme.rows(values_text(), schema())}
    assert (rows["actors.replicas"].type, rows["actors.replicas"].default) == ("int", "`2`")
    assert (rows["image.tag"].type, rows["image.tag"].default) == ("string", '`""`')
    assert rows["replay.persistence.size"].type == "string or float", "a Kubernetes quantity"
    assert rows["experiment"].type == "object" and '"id":"HalfCheetah-v5"' in rows["experiment"].default
    assert "One of `Always`, `IfNotPresent`, `Never`." in rows["image.pullPolicy"].description
    assert rows["learner.terminationGracePeriodSeconds"].description.startswith("SIGTERM -> the learner finishes")
    assert not any(key.startswith("learner.tolerations.") for key in rows), "list items are not keys"


def test_an_undocumented_value_or_a_stale_table_fails_the_check(tmp_path: Path) -> None:
    text = values_text().replace("  shards: 1\n", "  shards: 1\n  newKnob: 3\n", 1)
    found = chart_readme.problems(text, schema())
    assert "replay.newKnob has no `# --` comment (on itself or a parent) in values.yaml" in found
    dropped = values_text().replace(
        "  # -- Parameter-server replicas: a Deployment behind a Service (each actor's connection lands on one).\n", ""
    )
    assert dropped != values_text()
    assert "ps.replicas has no `# --` comment (on itself or a parent) in values.yaml" in chart_readme.problems(
        dropped, schema()
    )
    gone = values_text().replace('  tag: ""\n', "", 1)
    assert "image.tag is in values.schema.json but not in values.yaml" in chart_readme.problems(gone, schema())
    readme = (CHART / "README.md").read_text()
    stale = readme.replace("| actors.replicas | int | `2` |", "| actors.replicas | int | `3` |")
    assert stale != readme
    assert chart_readme.with_table(stale, chart_readme.table(values_text(), schema()), tmp_path) == readme


def test_the_comments_name_every_algorithm_the_registry_has() -> None:
    experiment_comment = chart_readme.documented_keys(values_text())[("experiment",)]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for name in ALGORITHMS:
        assert name in experiment_comment, f"values.yaml's experiment comment does not name {name}"
        assert re.search(rf"\b{name.upper()}\b", chart["description"]), f"Chart.yaml's description does not name {name}"
    assert "crossq" in chart["keywords"] and "CrossQ" in experiment_comment


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM.exists(), f"{HELM} is missing: run `make tools`"
    return subprocess.run([str(HELM), *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def test_helm_package_carries_the_readme_helm_show_readme_prints(tmp_path: Path) -> None:
    done = make("-s", "helm-package", f"CHART_OUT={tmp_path}")
    assert done.returncode == 0, done.stderr
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    package = tmp_path / f"surreal-chart-{version}.tgz"
    with tarfile.open(package) as tar:
        names = set(tar.getnames())
    assert {"surreal-chart/README.md", "surreal-chart/values.schema.json", "surreal-chart/values.yaml"} <= names
    shown = helm("show", "readme", str(package))
    assert shown.returncode == 0 and "| Key | Type | Default | Description |" in shown.stdout
    assert "| actors.replicas | int | `2` |" in shown.stdout


@pytest.mark.parametrize(
    "setting",
    ["actors.replicas=-1", "experiment.algo=nope"],
)
def test_the_schema_errors_the_docs_quote_are_what_helm_says(setting: str) -> None:
    page = KUBERNETES_PAGE.read_text()
    key = "/" + setting.split("=")[0].replace(".", "/")
    (quote,) = re.findall(rf"`(at '{re.escape(key)}': [^`]+)`", page)
    done = helm("template", "exp1", str(CHART), "--set", setting)
    assert done.returncode != 0 and quote in done.stderr, done.stderr
