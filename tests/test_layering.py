"""The package's layering, as docs/architecture.md states it: imports run downwards, and no role asks which
algorithm it runs (the algorithm's config names its flow-control rule instead)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "surreal"
UPPER = ("algos", "roles", "launch")


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("package", ["proto", "replay", "runtime"])
def test_lower_layers_never_import_algorithms_roles_or_the_launcher(package):
    for path in sorted((SRC / package).rglob("*.py")):
        upward = {m for m in imported_modules(path) if m.split(".")[:2] in (["surreal", p] for p in UPPER)}
        assert not upward, f"{path.relative_to(SRC)} imports {sorted(upward)}"


def test_roles_never_name_an_algorithms_config_class():
    for path in sorted((SRC / "roles").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for name in ("PPOConfig", "DDPGConfig", "ESConfig", "OffPolicyConfig"):
            assert name not in text, f"roles/{path.name} names {name}: use the flow-control rule instead"
