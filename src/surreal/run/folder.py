"""The run folder: everything a run produced and everything needed to rerun it.

    runs/<name>/config.yaml       resolved experiment (what every role reads through SURREAL_CONFIG)
    runs/<name>/reproduce.json    git sha, dirty flag, Python and package versions, the command line (provenance.py)
    runs/<name>/metrics.jsonl     one row per learner update (written by the learner)
    runs/<name>/eval.json         final deterministic evaluation (written by the learner)
    runs/<name>/tensorboard/      TensorBoard events (learner)
    runs/<name>/checkpoints/      rotated learner checkpoints
    runs/<name>/logs/<name>.log   every process's output
    runs/<name>/summary.json      written when the run ends, however it ends (run/start.py)
    runs/<name>/replay/           replay shards' snapshots (a resumed run's replay comes back from them)

With `run_uri` set the folder is mirrored at `<run_uri>/<name>` in a bucket and is a cache of it (surreal/runstore.py).

A run folder is continued with `surreal run --resume runs/<name>` (run/resume.py), which adds an entry to
reproduce.json's `resumes`.

The root is `SURREAL_RUNS_ROOT` (default `./runs`).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from surreal.config import ConfigError, ExperimentConfig, save_config
from surreal.config.schema import NOT_IN_RUN_NAME, RUN_NAME, RUN_NAME_RULE
from surreal.provenance import started_record
from surreal.runjson import write_json
from surreal.runstore import RemoteRun, StorageError, describe, join

LOCK_FILE = ".launcher.lock"  # held by the launcher (or serial run) that runs in the folder, its pid inside


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


class RunFolderLock:
    """An exclusive lock on a run folder, held by the launcher that runs in it (released on exit, also when
    the launcher dies: the kernel drops a dead process's flock), so two launchers never share one folder.
    `handed`: its descriptor, locked by the process that prepared the run (run/start.py `handed_over`)."""

    def __init__(self, run_dir: Path, hint: str = "choose another name=", handed: int | None = None) -> None:
        if handed is not None:
            self.file = os.fdopen(handed, "a+", encoding="utf-8")
        else:
            self.file = open(run_dir / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115
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
        self.file.close()  # closing the file releases the lock (once no other process holds it open)


def launcher_pid(run_dir: Path) -> int | None:
    """The pid of the launcher (or serial run) holding `run_dir`'s lock, None when none does."""
    path = run_dir / LOCK_FILE
    if not path.exists():
        return None
    with open(path, "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            text = f.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(f, fcntl.LOCK_UN)
        return None


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
        if (run_dir / "metrics.jsonl").exists():
            raise ConfigError(
                f"{run_dir} already holds a run; choose another name= (or continue it: --resume {run_dir})"
            )
        if (uri := mirror_uri(cfg, run_dir)) is not None:
            refuse_existing_remote_run(uri)
    except ConfigError:
        lock.release()
        raise
    save_config(cfg, run_dir / "config.yaml")
    write_json(run_dir / "reproduce.json", started_record(overrides))
    return run_dir, cfg, lock
