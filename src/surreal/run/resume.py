"""`surreal run --resume runs/<name>`: continue a run folder's experiment where it stopped.

    surreal run --resume runs/pend-ddpg                 # after Ctrl-C, a crash, a kill -9, a reboot
    surreal run --resume runs/pend-ddpg steps=200000    # and give it a larger budget
    surreal run --resume s3://bucket/runs/pend-ddpg     # a run mirrored in a bucket, on any machine

A run that already spent the budget it would resume with (eval.json written, its checkpoint at the budget) starts
nothing: `--resume` says so in one line, naming the `steps=` that would extend it (`completed_note`).

Nothing here resumes anything itself: every role already comes back from what the run folder holds. The
learner starts with `--resume` (its newest checkpoint: parameters, optimizer, normalizer, counters, what its
feed held; roles/learner.py), each replay shard restores its newest snapshot in `<run>/replay/shard-<i>/`
(roles/replay.py `open_snapshots`), the evaluator continues after the last row of evals.jsonl, and the learner
appends to metrics.jsonl after cutting it back to its checkpoint. This module checks that the folder holds a
run, takes its experiment from `config.yaml` and refuses an override that would change it (the checkpoints
and snapshots belong to that experiment), and records the resume in reproduce.json.

What comes back after a SIGKILL of everything: the learner's last checkpoint (every `learner.checkpoint_interval`
and at least every `learner.checkpoint_interval_s`) and a transition replay's last periodic snapshot (every
`replay.snapshot_interval_s`, 30 s by default). A run the launcher stopped (Ctrl-C, SIGTERM) loses nothing:
the learner checkpoints and every shard writes a last snapshot on the way out, a FIFO's chunks included.

A run mirrored in a bucket (`run_uri`) resumes from there too (`fetch_run`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from omegaconf import OmegaConf

from surreal.config import ConfigError, ExperimentConfig, algo_config, read_config, save_config
from surreal.config.loading import apply_overrides, dotted_items
from surreal.provenance import resumed_record
from surreal.run.folder import RunFolderLock, bucket_error, mirror_uri, runs_root
from surreal.runjson import read_json, write_json
from surreal.runstore import RemoteRun, run_name_of

# What a resumed run may change: its budget and how it is run, never what it learns. Everything else in
# config.yaml is the experiment that the checkpoints and replay snapshots belong to.
RESUMABLE_KEYS = (
    "total_env_steps",  # the budget (steps=): more to go on, or less to stop sooner
    "topology.actors",  # the fleet is elastic (runtime/regimes/): its flow control follows the actors it hears
    "topology.ps_replicas",  # a ps holds nothing but the latest blob
    "device",
    "learner.torch_threads",
    "actor.torch_threads",
    "learner.compile",
    "learner.checkpoint_interval",
    "learner.checkpoint_interval_s",
    "learner.keep_checkpoints",
    "learner.eval_interval",
    "learner.eval_episodes",
    "replay.snapshot_interval_s",
    "run_uri",  # where the run folder is mirrored: a local run may move to a bucket
)


def find_run_dir(where: str | os.PathLike[str], root: Path | None = None) -> Path:
    """The run folder `where` names: a path, or a name under the runs root (`root`, else `SURREAL_RUNS_ROOT`,
    else ./runs). ConfigError unless it holds a run (config.yaml)."""
    path = Path(where)
    candidates = [path] if path.is_absolute() or path.exists() else [path, (root or runs_root()) / path]
    for candidate in candidates:
        if (candidate / "config.yaml").is_file():
            return candidate.resolve()
    if any((c / "sweep.json").is_file() for c in candidates):
        raise ConfigError(f"--resume {where}: a sweep's folder: resume its members with --multirun --resume {where}")
    if any(c.is_dir() for c in candidates):
        raise ConfigError(f"--resume {where}: no config.yaml there, so no run to resume")
    raise ConfigError(f"--resume {where}: no such run folder")


def fetch_run(uri: str, run_dir: Path | None = None) -> Path:
    """The local cache of the run folder mirrored at `uri`: `run_dir` (a run folder resumed by its path, whose
    config says it is mirrored there), else `<runs root>/<name>`, with every file the bucket's manifests list that
    it lacks, each checked before it lands (surreal/runstore.py). ConfigError, one line, when the bucket cannot be
    read, holds no run there (unless `run_dir` was given: a local run that starts mirroring), or the local folder
    holds another run."""
    given = run_dir is not None
    run_dir = run_dir or (runs_root() / run_name_of(uri)).resolve()
    if not given and (run_dir / "config.yaml").is_file():
        local = mirror_uri(read_config(run_dir / "config.yaml"), run_dir)
        if local != uri:
            where = f"mirrored at {local}" if local else "not mirrored"
            raise ConfigError(
                f"--resume {uri}: {run_dir} holds another run ({where}); move it or set SURREAL_RUNS_ROOT"
            )
    try:
        remote = RemoteRun(uri)
        remote.check_writable()  # the resumed roles write there: a missing bucket or read-only access is one line now
        if not remote.holds_run():
            if given:
                return run_dir
            raise ConfigError(f"--resume {uri}: no run there (nothing a learner mirrored)")
        pulled = remote.pull(run_dir)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the bucket's error, one line
        raise bucket_error(uri, exc) from None
    if pulled.files:
        print(f"[surreal] pulled {len(pulled.files)} file(s), {pulled.nbytes / 1e6:,.1f} MB, from {uri} into {run_dir}")
    return run_dir


def flat(cfg: ExperimentConfig) -> dict[str, Any]:
    """Every key of `cfg` as a dotted name (`algo.lr`, `env.kwargs.ctrl_cost_weight`) and its value."""
    tree = OmegaConf.to_container(OmegaConf.structured(replace(cfg, algo=algo_config(cfg))))
    return dict(dotted_items(cast("dict[str, Any]", tree)))


def changed_keys(before: ExperimentConfig, after: ExperimentConfig) -> dict[str, tuple[Any, Any]]:
    """The keys whose values differ: {key: (before, after)}."""
    a, b = flat(before), flat(after)
    return {key: (a.get(key), b.get(key)) for key in sorted(a.keys() | b.keys()) if a.get(key) != b.get(key)}


def resume_config(run_dir: Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """The run folder's experiment (config.yaml) with `overrides` applied. An override of a key outside
    `RESUMABLE_KEYS` that changes its value is refused in one line; one that repeats the run's value is fine,
    so the command that started a run can be given again with `--resume`."""
    saved = read_config(run_dir / "config.yaml")
    overrides = [item for item in overrides if not _same_group_choice(item, saved)]
    cfg = apply_overrides(saved, overrides) if overrides else saved
    refused = {key: change for key, change in changed_keys(saved, cfg).items() if key not in RESUMABLE_KEYS}
    if refused:
        what = ", ".join(f"{key} ({old!r} -> {new!r})" for key, (old, new) in refused.items())
        raise ConfigError(
            f"--resume {run_dir}: {what} would change the experiment its checkpoints belong to; a resumed run "
            f"may change only {', '.join(RESUMABLE_KEYS)} (start a new run for anything else)"
        )
    return cfg


def _same_group_choice(item: str, cfg: ExperimentConfig) -> bool:
    """`algo=<the run's algorithm>`: the command that started the run, given again; no change."""
    key, sep, value = item.partition("=")
    return bool(sep) and key.strip() == "algo" and value.strip() == cfg.algo.name


def checkpoint_counters(run_dir: Path) -> dict[str, Any] | None:
    """The counters of the newest checkpoint that loads (what the learner will resume from), or None when there
    is none. Read memory-mapped, without executing pickled code; torch is imported only here."""
    from surreal.runtime.checkpoint import PATTERN, load_checkpoint

    folder = run_dir / "checkpoints"
    found = sorted(p for p in folder.iterdir() if PATTERN.match(p.name)) if folder.is_dir() else []
    for path in reversed(found):
        try:
            counters = dict(load_checkpoint(path, mmap=True)["counters"])
            if all(type(counters.get(key)) is int for key in ("env_steps", "updates")):
                return counters
        except Exception:  # noqa: BLE001 - a damaged one: the learner sets it aside and takes the one before
            continue
    return None


def completed_note(where: str | os.PathLike[str], run_dir: Path, cfg: ExperimentConfig) -> str | None:
    """The one line `--resume` says instead of starting anything when the run already spent the budget it would
    resume with (`cfg`'s): its final evaluation is written (eval.json) and its newest checkpoint is at the budget, so
    the learner would only announce `done` (roles/learner.py `finished_before`). None: there is training to do."""
    if not (run_dir / "eval.json").is_file():
        return None
    counters = checkpoint_counters(run_dir)
    if counters is None or int(counters["env_steps"]) < cfg.total_env_steps:
        return None
    done, budget = int(counters["env_steps"]), cfg.total_env_steps
    return (
        f"{where} is complete ({done:,} of steps={budget:,} env steps, its final evaluation in eval.json): nothing to "
        f"resume; to train it further give it a larger budget, e.g. `surreal run --resume {where} steps={2 * budget}`"
    )


def reopen_run_folder(
    run_dir: Path, cfg: ExperimentConfig, overrides: Sequence[str]
) -> tuple[RunFolderLock, list[str]]:
    """Lock the run folder for this launcher, write the (budget-)updated config.yaml the roles read, and add
    this resume to reproduce.json's `resumes`. Returns the lock to hold while the run lasts, and a note when the
    code changed since the run started."""
    try:
        lock = RunFolderLock(run_dir, hint="it is still running; stop it first")
    except OSError as exc:
        raise ConfigError(f"cannot open the run folder {run_dir}: {exc.strerror or exc}") from None
    save_config(cfg, run_dir / "config.yaml")
    reproduce_path = run_dir / "reproduce.json"
    reproduce = read_json(reproduce_path) or {}  # bounded (runjson.RUN_JSON): a run folder may be downloaded
    resumed = resumed_record(overrides)
    started, sha = reproduce.get("git_sha"), resumed["git_sha"]
    notes = []
    if isinstance(started, str) and started not in ("unknown", sha):
        notes.append(f"note: the code changed since this run started (git {started[:12]} -> {sha[:12]})")
    if not isinstance(reproduce.get("resumes"), list):
        reproduce["resumes"] = []
    reproduce["resumes"].append(resumed)
    write_json(reproduce_path, reproduce)
    return lock, notes


def describe_resume(run_dir: Path, cfg: ExperimentConfig, counters: dict[str, Any] | None) -> str:
    """The launcher's line saying where the run resumes and what its replay comes back with."""
    if counters is None:
        where = "(no checkpoint restores: the learner starts afresh)"
    else:
        steps = int(counters["env_steps"])
        where = (
            f"from its checkpoint at update {int(counters['updates']):,}, {steps:,}/{cfg.total_env_steps:,} env steps"
        )
    shards = {path.parent.name for path in (run_dir / "replay").glob("shard-*/replay-*.snap")}
    if cfg.replay.snapshot_interval_s <= 0:
        replay = "replay snapshots are off (replay.snapshot_interval_s=0): the replay starts empty"
    elif shards:
        replay = f"the replay from the snapshots of {len(shards)} shard(s) in {run_dir / 'replay'}"
    else:
        replay = "no replay snapshot: the replay starts empty"
    return f"resuming {run_dir} {where}; {replay}"
