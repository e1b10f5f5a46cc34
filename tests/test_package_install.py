"""The package as a user installs it: `pip install .` into a fresh virtualenv with the CPU torch (installed as the
Makefile installs it: pip's own configuration, `TORCH_INDEX_URL` added as an extra index where set) brings what
`surreal run env=Pendulum-v1 algo=sac steps=2000` needs, and none of the test, docs or infra tools; the extras
install together in any order (`surreal export` and a robosuite env both work after either order); `make run`
installs only what running needs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
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
    """`args` run to success; by default without the caller's PYTHONPATH or virtualenv, which would point a fresh
    venv's Python back at a checkout."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
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


def requirement(extra: str, name: str) -> Requirement:
    (found,) = [Requirement(r) for r in EXTRAS[extra] if Requirement(r).name.replace("_", "-") == name]
    return found


def test_the_extras_pins_agree_on_numpy() -> None:
    """robosuite (its dependency mink) holds NumPy below 2, and onnx imports ml_dtypes, whose 0.6 and later need NumPy
    2: `[export]` caps ml_dtypes at a release that runs on both, so neither install order breaks the other (pip does
    not re-resolve what an earlier install put there). The robosuite image's lock agrees."""
    numpy = requirement("robosuite", "numpy").specifier
    assert not numpy.contains("2.0.0") and numpy.contains("1.26.4")
    ml_dtypes = requirement("export", "ml-dtypes").specifier
    assert ml_dtypes.contains("0.5.4") and not ml_dtypes.contains("0.6.0") and not ml_dtypes.contains("0.7.0")
    lock = (REPO / "images" / "requirements" / "robosuite.txt").read_text()
    assert numpy.contains(re.search(r"^numpy==(\S+)", lock, re.M).group(1))


def test_make_run_installs_what_running_needs_and_make_test_the_toolchain(tmp_path: Path) -> None:
    """`make run` once built the whole developer toolchain (pytest, mypy, hadolint, moto) to train PPO."""
    venv = tmp_path / "venv"

    def planned(target: str) -> list[str]:
        done = subprocess.run(
            ["make", "-n", target, f"VENV={venv}"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if "pip install" in line and "torch" not in line]

    run = planned("run")
    assert run and all("[" not in line for line in run if "-e" in line), run
    assert any(line.rstrip().endswith("-e .") for line in run), run
    test = planned("test")
    toolchain = [line for line in test if "-e" in line and "[" in line]
    assert toolchain and all(extra in toolchain[0] for extra in ("test", "infra", "export", "video", "robosuite"))


def fresh_venv(where: Path) -> Path:
    run(sys.executable, "-m", "venv", str(where), cwd=where.parent)
    index = os.environ.get("TORCH_INDEX_URL")
    pip = [str(where / "bin" / "python"), "-m", "pip", "install", "-q"]
    run(*pip, *(["--extra-index-url", index] if index else []), "torch==2.13.0", cwd=where.parent)
    return where / "bin" / "python"


STEP_ROBOSUITE = """
from surreal.envs import make_env
env = make_env("robosuite:Lift", 0, {})
env.step(env.action_space.sample())
print("robosuite stepped")
"""


@pytest.mark.slow
@pytest.mark.parametrize("order", [("export", "robosuite", "video"), ("robosuite", "export,video")])
def test_the_extras_install_in_either_order_and_export_and_robosuite_both_work(tmp_path: Path, order) -> None:
    """`[robosuite]` after `[export]` once moved NumPy to 1.26 under ml_dtypes 0.7 (`surreal export` died in a
    34-line traceback); `[export]` after `[robosuite]` broke robosuite's pin instead."""
    python = fresh_venv(tmp_path / "venv")
    for extras in order:
        run(str(python), "-m", "pip", "install", "-q", f"{REPO}[{extras}]", cwd=tmp_path)
    run(str(python), "-m", "pip", "check", cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "work"
    work.mkdir()
    tiny = ["env=Pendulum-v1", "algo=ddpg", "steps=256", "actor.chunk_steps=64", "algo.learning_starts=128"]
    run("surreal", "run", "--serial", *tiny, "name=tiny", cwd=work, env=env)
    exported = run("surreal", "export", "runs/tiny", "--format", "onnx", cwd=work, env=env)
    assert (work / "runs" / "tiny" / "policy" / "policy.onnx").exists(), exported
    assert "robosuite stepped" in run(str(python), "-c", STEP_ROBOSUITE, cwd=work, env=env)
