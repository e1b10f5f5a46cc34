"""`prepare`: an experiment made ready to start, once, in the caller's process (`surreal run`, `surreal.train`):
its config composed and checked, the env built once (run/preflight.py), its run folder made or reopened and locked.
What cannot run is refused here, a ConfigError of one line, before any process exists.

    prepared = prepare(["algo=sac", "env=Pendulum-v1"])            # or prepare(["steps=200000"], resume="runs/x")
    summary = start(prepared)                                      # run/start.py
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from surreal.config import ConfigError, ExperimentConfig, load_config
from surreal.envs import admit_env_id
from surreal.run.folder import RunFolderLock, create_run_folder, mirror_uri
from surreal.run.preflight import checked
from surreal.run.resume import (
    checkpoint_counters,
    completed_note,
    describe_resume,
    fetch_run,
    find_run_dir,
    reopen_run_folder,
    resume_config,
)
from surreal.runstore import is_uri, run_name_of

Mode = Literal["processes", "serial"]


class RunComplete(Exception):
    """A resumed run (in `run_dir`) whose budget is spent: nothing to start; the message says how to extend it."""

    def __init__(self, note: str, run_dir: Path) -> None:
        super().__init__(note)
        self.run_dir = run_dir


@dataclass
class PreparedRun:
    """A run folder ready to start: `cfg`, the config its roles run (checked, its replay laid out), is config.yaml;
    `lock` holds the folder. `resumed_at`: the env steps of the checkpoint a resumed run's roles resume from.
    `warnings` (budgets a default eats) and `notes` (where a resumed run resumes) are the caller's to say."""

    dir: Path
    cfg: ExperimentConfig
    lock: RunFolderLock
    resume: bool = False
    resumed_at: int | None = None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def prepare(
    overrides: Sequence[str],
    *,
    resume: str | os.PathLike[str] | None = None,
    mode: Mode = "processes",
    root: Path | None = None,
) -> PreparedRun:
    """A new run of `overrides`, or the run `resume` names (a folder, a name under the runs `root`, a bucket's URI),
    `overrides` then limited to its budget and how it runs (run/resume.py). The caller imports the user's env
    modules first."""
    if resume is not None:
        return _reopen(resume, overrides, mode, root)
    cfg, warnings = checked(load_config(overrides))  # the env built once; the replay's layout resolved
    _refuse_for_mode(mode, cfg.run_uri, cfg.learner.replicas)
    run_dir, cfg, lock = create_run_folder(cfg, overrides, root)
    return PreparedRun(run_dir, cfg, lock, warnings=warnings)


def _reopen(where: str | os.PathLike[str], overrides: Sequence[str], mode: Mode, root: Path | None) -> PreparedRun:
    """A stopped run's folder reopened, what it lacks pulled from its bucket first. Its env is made only if its id
    imports nothing the user did not name (`admit_env_id`): a run folder may have been downloaded."""
    if is_uri(where):
        _refuse_for_mode(mode, str(where))
        remote = str(where).rstrip("/")
        run_dir = fetch_run(remote)
        cfg = resume_config(run_dir, overrides)
        cfg = replace(cfg, name=run_name_of(remote), run_uri=remote.rpartition("/")[0])  # where it is mirrored now
    else:
        run_dir = find_run_dir(where, root)
        cfg = resume_config(run_dir, overrides)
        _refuse_for_mode(mode, cfg.run_uri, cfg.learner.replicas)
        if (uri := mirror_uri(cfg, run_dir)) is not None:
            fetch_run(uri, run_dir=run_dir)  # what the folder lacks (deleted, or never here) comes from the bucket
    if (note := completed_note(where, run_dir, cfg)) is not None:
        raise RunComplete(note, run_dir)
    admit_env_id(cfg.env.id, str(run_dir / "config.yaml"))
    cfg, warnings = checked(cfg)
    lock, notes = reopen_run_folder(run_dir, cfg, overrides)
    counters = checkpoint_counters(run_dir)  # where the learner will resume (it says so itself, too)
    resumed_at = None if counters is None else int(counters["env_steps"])
    notes.append(describe_resume(run_dir, cfg, counters))
    return PreparedRun(run_dir, cfg, lock, True, resumed_at, warnings, notes)


def _refuse_for_mode(mode: Mode, run_uri: str | None, replicas: int = 1) -> None:
    """What serial mode (every role in one process) cannot run: a mirrored run folder, a learner group."""
    if mode == "serial" and run_uri is not None:
        raise ConfigError("run_uri (a run folder mirrored in a bucket) needs mode='processes': its roles mirror it")
    if mode == "serial" and replicas > 1:
        raise ConfigError("learner.replicas > 1 needs mode='processes' (without --serial): each rank is a process")
