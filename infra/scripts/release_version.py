"""Check a release tag against the versions it publishes, and print `version=X.Y.Z`.

A `v*` tag publishes the package (pyproject.toml's `version`), the chart (Chart.yaml's `version`) and the images,
which are tagged with the chart's `appVersion` because that is the chart's default image tag
(templates/_helpers.tpl, "surreal.image"). All four must say the same, or the chart would install images that were
never pushed. Standard library only: the release workflow runs it before any virtualenv exists.

    python infra/scripts/release_version.py v0.1.0      # -> version=0.1.0, or one line saying what differs (exit 1)
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "infra" / "helm" / "surreal-chart" / "Chart.yaml"


def chart_field(text: str, key: str) -> str:
    match = re.search(rf"^{key}:\s*\"?([^\"\s]+)\"?\s*$", text, re.M)
    if not match:
        raise SystemExit(f"error: {CHART.relative_to(REPO)} has no {key}")
    return match.group(1)


def main(argv: list[str]) -> int:
    tag = argv[1] if len(argv) > 1 else ""
    if not re.fullmatch(r"v\d+\.\d+\.\d+([-+.][0-9A-Za-z.-]+)?", tag):
        print(f"error: RELEASE_TAG={tag!r} is not a version tag such as v1.2.3", file=sys.stderr)
        return 1
    chart = CHART.read_text()
    versions = {
        "the tag": tag[1:],
        "pyproject.toml's version": tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"],
        "Chart.yaml's version": chart_field(chart, "version"),
        "Chart.yaml's appVersion (the images' tag)": chart_field(chart, "appVersion"),
    }
    if len(set(versions.values())) != 1:
        said = ", ".join(f"{where} {version}" for where, version in versions.items())
        print(f"error: the release's versions differ: {said}", file=sys.stderr)
        return 1
    print(f"version={tag[1:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
