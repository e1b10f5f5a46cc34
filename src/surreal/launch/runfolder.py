"""The run folder: everything a run produced and everything needed to rerun it.

    runs/<name>/config.yaml       resolved experiment (what every role read)
    runs/<name>/reproduce.json    git sha, dirty flag, Python and package versions, the command line
    runs/<name>/metrics.jsonl     one row per learner update (written by the learner)
    runs/<name>/eval.json         final deterministic evaluation (written by the learner)
    runs/<name>/tensorboard/      TensorBoard events (learner)
    runs/<name>/checkpoints/      rotated learner checkpoints
    runs/<name>/logs/<role>.log   every process's output
    runs/<name>/summary.json      written by the launcher on exit
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from surreal.config import ExperimentConfig, save_config

PACKAGES = ("surreal", "numpy", "torch", "gymnasium", "mujoco", "pyzmq", "msgpack", "hydra-core", "omegaconf")


def runs_root() -> Path:
    return Path(os.environ.get("SURREAL_RUNS_ROOT", "runs"))


def run_name(cfg: ExperimentConfig) -> str:
    return cfg.name or f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.algo.name}-{cfg.env.id}"


def git_state() -> tuple[str, bool]:
    """(sha, dirty) of the repository this package is imported from; ("unknown", False) outside git."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True,
                                timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", False
    if sha.returncode != 0:
        return "unknown", False
    return sha.stdout.strip(), bool(status.stdout.strip())


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def create_run_folder(cfg: ExperimentConfig) -> tuple[Path, ExperimentConfig]:
    """Make runs/<name>/ with config.yaml and reproduce.json; returns (folder, config with its name)."""
    cfg = replace(cfg, name=run_name(cfg))
    run_dir = runs_root() / cfg.name
    if (run_dir / "metrics.jsonl").exists():
        raise FileExistsError(f"{run_dir} already holds a run; choose another name=")
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    sha, dirty = git_state()
    reproduce = {
        "git_sha": sha,
        "git_dirty": dirty,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "command": sys.argv,
    }
    (run_dir / "reproduce.json").write_text(json.dumps(reproduce, indent=2), encoding="utf-8")
    return run_dir, cfg


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl; a partially written last line is skipped."""
    rows = []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def write_summary(run_dir: Path, cfg: ExperimentConfig, wall_s: float, status: str,
                  restarts: dict[str, int]) -> dict[str, Any]:
    rows = read_metrics(run_dir / "metrics.jsonl")
    last = rows[-1] if rows else {}
    eval_path = run_dir / "eval.json"
    evaluation = json.loads(eval_path.read_text(encoding="utf-8")) if eval_path.exists() else {}
    reproduce = json.loads((run_dir / "reproduce.json").read_text(encoding="utf-8"))
    env_steps = int(evaluation.get("env_steps", last.get("env_steps", 0)))
    summary = {
        "algo": cfg.algo.name,
        "env": cfg.env.id,
        "seed": cfg.seed,
        "status": status,
        "env_steps": env_steps,
        "updates": int(last.get("updates", 0)),
        "wall_s": round(wall_s, 2),
        "env_steps_per_s": round(env_steps / wall_s, 1) if wall_s > 0 else 0.0,
        "eval_return_mean": evaluation.get("eval_return_mean"),
        "eval_return_std": evaluation.get("eval_return_std"),
        "eval_episodes": evaluation.get("eval_episodes"),
        "train_return_mean": last.get("train_return_mean"),
        "actors": cfg.topology.actors,
        "envs_per_actor": cfg.topology.envs_per_actor,
        "restarts": restarts,
        "git_sha": reproduce.get("git_sha"),
        "run_dir": str(run_dir),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary
