"""The package as a user installs it: `pip install .` into a fresh virtualenv with the CPU torch (installed as the
Makefile installs it: pip's own configuration, `TORCH_INDEX_URL` added as an extra index where set) brings what
`surreal run env=Pendulum-v1 algo=sac steps=2000` needs, and none of the test, docs or infra tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# What the core must not bring: the test, docs and infra extras' tools, and robosuite (its own extra).
DEV_TOOLS = (
    "pytest",
    "mypy",
    "ruff",
    "hypothesis",
    "mkdocs",
    "material",
    "twine",
    "build",
    "kubernetes_validate",
    "hcl2",
    "jsonschema",
    "robosuite",
)


def run(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    done = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.slow
def test_pip_install_dot_runs_sac_on_pendulum_with_no_dev_tool(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv), cwd=tmp_path)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    index = os.environ.get("TORCH_INDEX_URL")
    run(*pip, *(["--extra-index-url", index] if index else []), "torch==2.13.0", cwd=tmp_path)
    run(*pip, str(REPO), cwd=tmp_path)  # a copy is built: nothing points back at the checkout

    python = str(venv / "bin" / "python")
    found = run(
        python, "-c", f"import importlib.util as u; print([m for m in {DEV_TOOLS!r} if u.find_spec(m)])", cwd=tmp_path
    )
    assert found.strip() == "[]", f"the core install brings dev tools: {found}"
    torch = run(python, "-c", "import torch; print(torch.__version__, torch.version.cuda)", cwd=tmp_path).split()
    assert torch[0].startswith("2.13.0") and torch[1] == "None", f"not the CPU torch: {torch}"
    origin = run(python, "-c", "import surreal; print(surreal.__file__)", cwd=tmp_path)
    assert origin.startswith(str(venv)), f"surreal imported from {origin}, not the installed package"

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    run("surreal", "run", "env=Pendulum-v1", "algo=sac", "steps=2000", "name=first", "--no-progress", cwd=work, env=env)
    result = json.loads((work / "runs" / "first" / "eval.json").read_text())
    assert result["env_steps"] >= 2000 and result["eval_episodes"] == 10, result
    reproduce = json.loads((work / "runs" / "first" / "reproduce.json").read_text())
    assert reproduce["packages"]["surreal-rl"], "the installed distribution is surreal-rl"
