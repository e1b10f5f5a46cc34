"""A run or sweep folder's JSON files (summary.json, eval.json, reproduce.json, sweep.json): written whole, read back
bounded (a folder may have been downloaded); and summary.json's content, written when a launch ends however it ends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from surreal.boundedjson import JsonBounds, JsonBoundsError
from surreal.boundedjson import read as read_bounded
from surreal.errors import ConfigError
from surreal.fileio import atomic_write_text
from surreal.metricsfile import read_metrics

if TYPE_CHECKING:
    from surreal.config import ExperimentConfig

# NaN is allowed: Python's json writes it (an evaluation's std of one episode, a metric that diverged).
RUN_JSON = JsonBounds(16 << 20, max_depth=32, max_items=1 << 20, max_string=1 << 20, allow_nan=True)
EXIT_CODES = {"completed": 0, "failed": 1, "interrupted": 130}  # `surreal run`'s exit status for summary.json's


def write_json(path: Path, data: Any) -> None:
    """`data` as indented JSON, written at once (temporary file and rename), so a reader never sees half a file."""
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file (eval.json, summary.json); None when it is missing, unreadable, over `RUN_JSON`'s bounds
    or not an object (`read_json_strict` says which)."""
    try:
        return read_json_strict(path)
    except (OSError, ConfigError):
        return None


def read_json_strict(path: Path) -> dict[str, Any]:
    """A JSON object file of a run or sweep folder, bounded (`RUN_JSON`); ConfigError, one line, when it is over its
    bounds, not JSON or not an object, OSError when it cannot be read."""
    try:
        data = read_bounded(path, RUN_JSON)
    except JsonBoundsError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return data


def read_eval(run_dir: Path) -> dict[str, Any]:
    """eval.json, or {} when the learner did not get that far."""
    return read_json(run_dir / "eval.json") or {}


def write_summary(
    run_dir: Path,
    cfg: ExperimentConfig,
    wall_s: float,
    status: str,
    restarts: dict[str, int],
    reason: str | None = None,
    resumed_at_env_steps: int | None = None,
) -> dict[str, Any]:
    """summary.json from eval.json and the last metrics row; fields are null where a run ended early.

    A resumed run's summary is this session's: `wall_s` and `restarts` count since the resume,
    `env_steps_per_s` the env steps taken since `resumed_at_env_steps` (null for a run never resumed)."""
    rows = read_metrics(run_dir / "metrics.jsonl")
    last = rows[-1] if rows else {}
    evaluation = read_eval(run_dir)
    env_steps = int(evaluation.get("env_steps", last.get("env_steps", 0)))
    reproduce = read_json(run_dir / "reproduce.json") or {}
    summary = {
        "algo": cfg.algo.name,
        "env": cfg.env.id,
        "seed": cfg.seed,
        "status": status,
        "reason": reason,
        "env_steps": env_steps,
        "updates": int(last.get("updates", 0)),
        "wall_s": round(wall_s, 2),
        "env_steps_per_s": round((env_steps - (resumed_at_env_steps or 0)) / wall_s, 1) if wall_s > 0 else 0.0,
        "eval_return_mean": evaluation.get("eval_return_mean"),
        "eval_return_std": evaluation.get("eval_return_std"),
        "eval_episodes": evaluation.get("eval_episodes"),
        "train_return_mean": last.get("train_return_mean"),
        # Null unless the env reports `is_success` (robosuite tasks do).
        "eval_success_rate": evaluation.get("eval_success_rate"),
        "train_success_rate": last.get("train_success_rate"),
        "actors": cfg.topology.actors,
        "envs_per_actor": cfg.topology.envs_per_actor,
        "restarts": restarts,
        "resumed_at_env_steps": resumed_at_env_steps,
        "git_sha": reproduce.get("git_sha"),
        "run_dir": str(run_dir),
    }
    write_json(run_dir / "summary.json", summary)
    return summary
