"""The run folder: everything a run produced and everything needed to rerun it.

    runs/<name>/config.yaml       resolved experiment (what every role reads through SURREAL_CONFIG)
    runs/<name>/reproduce.json    git sha, dirty flag, Python and package versions, the command line
    runs/<name>/metrics.jsonl     one row per learner update (written by the learner)
    runs/<name>/eval.json         final deterministic evaluation (written by the learner)
    runs/<name>/tensorboard/      TensorBoard events (learner)
    runs/<name>/checkpoints/      rotated learner checkpoints
    runs/<name>/logs/<name>.log   every process's output
    runs/<name>/summary.json      written by the launcher when the run ends, however it ends
    runs/<name>/replay/           replay shards' snapshots (a resumed run's replay comes back from them)

With `run_uri` set the folder is mirrored at `<run_uri>/<name>` in a bucket and is a cache of it (surreal/runstore.py).

A run folder is continued with `surreal run --resume runs/<name>` (launch/resume.py), which adds an entry to
reproduce.json's `resumes`.

The root is `SURREAL_RUNS_ROOT` (default `./runs`).
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any

from surreal.boundedjson import JsonBounds, JsonBoundsError
from surreal.boundedjson import read as read_bounded
from surreal.config import ConfigError, ExperimentConfig, save_config
from surreal.config.schema import NOT_IN_RUN_NAME, RUN_NAME, RUN_NAME_RULE
from surreal.fileio import atomic_write_text
from surreal.metricsfile import read_metrics
from surreal.runstore import RemoteRun, StorageError, describe, join

PACKAGES = ("surreal-rl", "numpy", "torch", "gymnasium", "mujoco", "pyzmq", "msgpack", "hydra-core", "omegaconf")
GIT_TIMEOUT_S = 10.0
# The run folder's JSON files (summary.json, eval.json, reproduce.json, a sweep's sweep.json): small objects written
# here, but read back from folders that may have been downloaded, so bounded before they are parsed. NaN is allowed:
# Python's json writes it (an evaluation's std of one episode, a metric that diverged).
RUN_JSON = JsonBounds(16 << 20, max_depth=32, max_items=1 << 20, max_string=1 << 20, allow_nan=True)
EXIT_CODES = {"completed": 0, "failed": 1, "interrupted": 130}  # `surreal run`'s exit status for summary.json's


def runs_root() -> Path:
    return Path(os.environ.get("SURREAL_RUNS_ROOT", "runs"))


def run_name(cfg: ExperimentConfig) -> str:
    """`cfg.name`, else `<YYYYmmdd-HHMMSS>-<algo>-<env id>`; a `/` in an id (`ALE/Pong-v5`) becomes `_`."""
    if cfg.name is not None:
        if not RUN_NAME.fullmatch(cfg.name):
            raise ConfigError(f"name={cfg.name!r} {RUN_NAME_RULE}")
        return cfg.name
    env_id = NOT_IN_RUN_NAME.sub("_", cfg.env.id)
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.algo.name}-{env_id}"


def git_state(path: Path | None = None) -> tuple[str, bool]:
    """(sha, dirty) of the git checkout this package is imported from; ("unknown", False) otherwise.

    The package file must be tracked by that checkout: a wheel installed into a virtualenv that happens
    to sit inside some repository would otherwise report that repository's sha.
    """
    anchor = (path or Path(__file__)).resolve()

    def git(*args: str) -> subprocess.CompletedProcess[str] | None:
        try:
            return subprocess.run(
                ["git", *args], cwd=anchor.parent, capture_output=True, text=True, timeout=GIT_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired):
            return None

    tracked = git("ls-files", "--error-unmatch", anchor.name)
    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")
    if tracked is None or sha is None or status is None or tracked.returncode or sha.returncode:
        return "unknown", False
    return sha.stdout.strip(), bool(status.stdout.strip())


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def write_json(path: Path, data: Any) -> None:
    """`data` as indented JSON, written at once (temporary file and rename), so a reader never sees half a file."""
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


class RunFolderLock:
    """An exclusive lock on a run folder, held by the launcher that runs in it (released on exit, also when
    the launcher dies: the kernel drops a dead process's flock), so two launchers never share one folder."""

    def __init__(self, run_dir: Path, hint: str = "choose another name=") -> None:
        self.file = open(run_dir / ".launcher.lock", "a+", encoding="utf-8")  # noqa: SIM115
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            owner = self.file.read().strip() or "?"
            self.file.close()
            raise ConfigError(f"{run_dir} is in use by another launcher (pid {owner}); {hint}") from None
        self.file.truncate(0)
        self.file.write(str(os.getpid()))
        self.file.flush()

    def __enter__(self) -> RunFolderLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        self.file.close()  # closing the file releases the lock


def refuse_existing_run(run_dir: Path) -> None:
    """A folder that already holds a run (metrics.jsonl) is not started in again: `--resume` continues it."""
    if (run_dir / "metrics.jsonl").exists():
        raise ConfigError(f"{run_dir} already holds a run; choose another name= (or continue it: --resume {run_dir})")


def mirror_uri(cfg: ExperimentConfig, run_dir: Path) -> str | None:
    """Where a run folder is mirrored: `<run_uri>/<name>` (surreal/runstore.py); None without `run_uri`."""
    return None if cfg.run_uri is None else join(cfg.run_uri, cfg.name or run_dir.name)


def bucket_error(uri: str, exc: Exception) -> ConfigError:
    """A bucket that cannot be read, as the launcher's one line (the backends raise many types)."""
    if isinstance(exc, StorageError):
        return ConfigError(str(exc))
    return ConfigError(f"{uri}: cannot read the bucket ({describe(exc)})")


def refuse_existing_remote_run(uri: str) -> None:
    """A bucket folder that already holds a run is not started in again either: `--resume URI` continues it."""
    try:
        remote = RemoteRun(uri)
        remote.check_writable()
        holds = remote.holds_run()
    except Exception as exc:  # noqa: BLE001 - the bucket's error, one line
        raise bucket_error(uri, exc) from None
    if holds:
        raise ConfigError(f"{uri} already holds a run; choose another name= (or continue it: --resume {uri})")


def create_run_folder(
    cfg: ExperimentConfig, overrides: Sequence[str] = (), root: Path | None = None
) -> tuple[Path, ExperimentConfig, RunFolderLock]:
    """Make `<root>/<name>/{logs,checkpoints}` with config.yaml and reproduce.json, locked for this launcher.

    Returns the absolute folder, the config with its name filled in, and the lock to hold while the run
    lasts. A folder another launcher holds, or one that already holds a run (metrics.jsonl), is refused
    rather than mixed into: the learner appends to that file. A folder that cannot be made is one line.
    `root`: the runs root (default `runs_root()`).
    """
    name = run_name(cfg)
    cfg = replace(cfg, name=name)
    run_dir = ((root or runs_root()) / name).resolve()
    try:
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        (run_dir / "checkpoints").mkdir(exist_ok=True)
        lock = RunFolderLock(run_dir)
    except OSError as exc:
        raise ConfigError(f"cannot create the run folder {run_dir}: {exc.strerror or exc}") from None
    try:
        refuse_existing_run(run_dir)
        if (uri := mirror_uri(cfg, run_dir)) is not None:
            refuse_existing_remote_run(uri)
    except ConfigError:
        lock.release()
        raise
    save_config(cfg, run_dir / "config.yaml")
    sha, dirty = git_state()
    write_json(
        run_dir / "reproduce.json",
        {
            "git_sha": sha,
            "git_dirty": dirty,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "packages": package_versions(),
            "executable": sys.executable,
            "cwd": os.getcwd(),
            "command": sys.argv,
            "overrides": list(overrides),
            "started_at": round(time.time(), 3),  # Unix time, as the rows' `time`: their offset from the start
        },
    )
    return run_dir, cfg, lock


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
