"""Write images/requirements/{base,rl}.txt: every package an image installs, pinned to one version.

Resolves the project's own dependency sets with pip (`pip install --dry-run --report`, nothing installed):
`base` is pyproject.toml's `[tool.surreal] torch-free-dependencies` (the replay/ps image: numpy, pyzmq, msgpack,
prometheus-client and the config loader), `rl` is `surreal-rl` (the learner) without torch, which each image
installs from its own index (CPU build for the actor, CUDA build for the learner) at the version pyproject.toml
pins, and `robosuite` is `surreal-rl[robosuite]` without torch (the actor: robosuite tasks step there). Each set
also holds the `cloud` extra (run folders in a bucket). Rerun after
changing pyproject.toml's dependencies (`make images-lock`); tests/test_images.py checks the pins still satisfy it.

    python images/lock.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "images" / "requirements"
INSTALLED_SEPARATELY = {"surreal-rl", "torch"}


def torch_free_requirements() -> list[str]:
    """pyproject.toml's `dependencies` that `[tool.surreal] torch-free-dependencies` names: the replay image's."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    names = {canonicalize_name(n) for n in pyproject["tool"]["surreal"]["torch-free-dependencies"]}
    return [r for r in pyproject["project"]["dependencies"] if canonicalize_name(Requirement(r).name) in names]


def cloud_requirements() -> list[str]:
    """pyproject.toml's `cloud` extra (fsspec, s3fs, gcsfs, adlfs): every image holds it, since the learner, the
    replay shards and the evaluator all sync the run folder with a bucket when the chart sets `runStorage.uri`."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(pyproject["project"]["optional-dependencies"]["cloud"])


SETS = {
    "base": torch_free_requirements() + cloud_requirements(),
    "rl": [f"{REPO}[cloud]"],
    "robosuite": [f"{REPO}[robosuite,cloud]"],
}
LABELS = {
    "base": "surreal-rl's torch-free-dependencies and its cloud extra",
    "rl": "surreal-rl[cloud] without torch",
    "robosuite": "surreal-rl[robosuite,cloud] without torch",
}
HEADER = "# Pinned by images/lock.py from pyproject.toml ({target}); do not edit by hand: rerun `make images-lock`.\n"


def resolve(targets: list[str]) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
            + ["--report", str(report), *targets],
            check=True,
        )
        items = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"]: i["metadata"]["version"].split("+")[0] for i in items}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, targets in SETS.items():
        pins = resolve(targets)
        lines = [f"{pkg}=={version}" for pkg, version in sorted(pins.items(), key=lambda kv: kv[0].lower())]
        lines = [line for line in lines if canonicalize_name(line.split("==")[0]) not in INSTALLED_SEPARATELY]
        (OUT / f"{name}.txt").write_text(HEADER.format(target=LABELS[name]) + "\n".join(lines) + "\n")
        print(f"wrote {OUT / f'{name}.txt'} ({len(lines)} packages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
