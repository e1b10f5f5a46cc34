"""`surreal run --resume` end to end (run/resume.py): a run whose launcher and roles are all SIGKILLed at a seeded
random point is resumed and completes its budget, its counters never going backwards and its replay coming back
from the newest snapshot; and what cannot be resumed is refused in one line, before anything starts.

The learning comparison (a resumed run's final eval against three uninterrupted seeds) is bench/resume_learning.py,
results in bench/results/resume-learning-ddpg-Pendulum-v1.2core.json."""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from bench._runs import kill_whole_run

import surreal
from conftest import wait_until
from surreal.api import Run
from surreal.config import load_config, read_config
from surreal.launch.progress import ProgressView
from surreal.metricsfile import read_evals, read_metrics
from surreal.run.folder import RunFolderLock, create_run_folder, launcher_pid
from surreal.run.resume import changed_keys, checkpoint_counters, resume_config
from test_local_run import DDPG_PENDULUM, LocalRun, assert_no_counter_goes_backwards, assert_replay_ratio_held

KILL_SEED = 39  # draws where in the run the kill falls


def surreal_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "surreal", "run", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "SURREAL_RUNS_ROOT": str(tmp_path / "runs")},
        check=False,
    )


@pytest.fixture
def stopped_run(tmp_path: Path) -> Path:
    """A run folder as a stopped run leaves it (config.yaml, reproduce.json, metrics.jsonl), without starting
    anything."""
    cfg = load_config(["name=stopped", "algo=ddpg", "env=Pendulum-v1", "steps=5000"])
    run_dir, _, lock = create_run_folder(cfg, [], tmp_path / "runs")
    lock.release()
    (run_dir / "metrics.jsonl").write_text(json.dumps({"env_steps": 1250, "updates": 250, "version": 16}) + "\n")
    return run_dir


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["algo.actor_lr=1e-3"], "algo.actor_lr (0.0003 -> 0.001) would change the experiment"),
        (["seed=2"], "seed (1 -> 2) would change the experiment"),
        (["algo=sac"], "algo= chooses config files"),
        (["algo.actr_lr=1e-3"], "unknown config key 'algo.actr_lr' (did you mean 'algo.actor_lr'?)"),
        (["steps=1000,2000"], "needs --multirun"),
    ],
)
@pytest.mark.system
def test_an_override_that_would_change_the_experiment_is_refused_in_one_line(tmp_path, stopped_run, overrides, says):
    before = sorted(p.name for p in stopped_run.rglob("*"))
    reproduce = (stopped_run / "reproduce.json").read_text()
    out = surreal_run(tmp_path, "--resume", str(stopped_run), *overrides)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert sorted(p.name for p in stopped_run.rglob("*")) == before, "nothing started, nothing written"
    assert (stopped_run / "reproduce.json").read_text() == reproduce


@pytest.mark.system
def test_what_is_not_a_stopped_run_is_refused_in_one_line(tmp_path, stopped_run):
    out = surreal_run(tmp_path, "--resume", "runs/nothing-here")
    assert out.returncode == 2 and "no such run folder" in out.stderr, out.stderr
    (tmp_path / "empty").mkdir()
    out = surreal_run(tmp_path, "--resume", "empty")
    assert out.returncode == 2 and "no config.yaml there" in out.stderr, out.stderr
    (tmp_path / "empty" / "sweep.json").write_text("{}")
    out = surreal_run(tmp_path, "--resume", "empty")
    assert out.returncode == 2 and "with --multirun --resume empty" in out.stderr, out.stderr
    with RunFolderLock(stopped_run):  # a launcher still runs in it
        out = surreal_run(tmp_path, "--resume", "stopped", "steps=9000")  # a name under the runs root does too
    assert out.returncode == 2 and "in use by another launcher" in out.stderr and "still running" in out.stderr
    out = surreal_run(tmp_path, "--jobs", "2", "seed=1")
    assert out.returncode == 2 and "--jobs needs --multirun" in out.stderr
    out = surreal_run(tmp_path, "name=stopped", "algo=ddpg", "env=Pendulum-v1")
    assert out.returncode == 2 and f"--resume {stopped_run}" in out.stderr, "a name in use says how to continue it"


@pytest.mark.system
def test_resuming_a_completed_run_says_so_in_one_line_and_names_the_budget_that_extends_it(tmp_path):
    """`--resume` of a run that spent its budget starts no role (it restarted every one for 26 s to announce `done`)
    and writes nothing: one line says it is complete and which `steps=` goes on. A larger budget does go on."""
    small = ["actor.chunk_steps=64", "algo.batch_size=256", "algo.minibatch_size=64", "device=cpu", "actors=1"]
    root = tmp_path / "runs"
    run = surreal.train("ppo", "Pendulum-v1", steps=512, overrides=small, name="done", mode="serial", runs_root=root)
    files = {path: path.stat().st_mtime_ns for path in run.dir.rglob("*") if path.is_file()}
    steps = run.final_eval["env_steps"]
    for args in (["--resume", "done"], ["--serial", "--resume", "done", "steps=512"]):
        out = surreal_run(tmp_path, *args)
        assert out.returncode == 0 and out.stderr == "", out.stderr
        assert out.stdout.splitlines() == [
            f"[surreal] done is complete ({steps:,} of steps=512 env steps, its final evaluation in eval.json): "
            "nothing to resume; to train it further give it a larger budget, e.g. "
            "`surreal run --resume done steps=1024`"
        ]
    assert {path: path.stat().st_mtime_ns for path in run.dir.rglob("*") if path.is_file()} == files, "nothing written"
    out = surreal_run(tmp_path, "--serial", "--resume", "done", "steps=1024")
    assert out.returncode == 0 and "is complete" not in out.stdout, out.stdout + out.stderr
    assert Run(run.dir).final_eval["env_steps"] >= 1024


def snapshot_transitions(path: Path) -> int:
    """How many transitions a replay snapshot holds, from its header (replay/snapfile.py's layout)."""
    data = path.read_bytes()
    magic = b"surreal-replay\n"
    (length,) = struct.unpack("<Q", data[len(magic) : len(magic) + 8])
    header = json.loads(data[len(magic) + 8 : len(magic) + 8 + length])
    return int(header["books"]["size"])


@pytest.mark.slow
def test_a_run_killed_outright_at_a_random_point_resumes_and_completes_its_budget(tmp_path):
    """DDPG on Pendulum-v1 with 2 actors, SIGKILLed whole when its env steps pass a point drawn from KILL_SEED, then
    `surreal run --resume`: the learner continues from its newest checkpoint, the replay shard from its newest
    snapshot (every transition in it), the evaluator after its rows up to the checkpoint; the run completes its
    budget with no counter going backwards in metrics.jsonl or evals.jsonl and the replay ratio held."""
    steps = 8000
    overrides = (
        *DDPG_PENDULUM,
        f"steps={steps}",
        "actors=2",
        "replay.snapshot_interval_s=1",
        "learner.checkpoint_interval=1",  # every metrics row (250 gradient steps)
        "learner.eval_interval=2000",
        "learner.eval_episodes=2",
    )
    kill_at = int(random.Random(KILL_SEED).uniform(0.3, 0.7) * steps)
    first = LocalRun(tmp_path, "killed", *overrides)
    run_dir = first.run_dir
    snapshots = run_dir / "replay" / "shard-0"
    try:
        wait_until(lambda: first.children() and read_metrics(run_dir / "metrics.jsonl")[-1:], 300)
        wait_until(lambda: read_metrics(run_dir / "metrics.jsonl")[-1]["env_steps"] >= kill_at, 300)
        wait_until(lambda: list(snapshots.glob("replay-*.snap")), 60)
        roles = kill_whole_run(first.proc.pid)
        first.proc.wait(timeout=30)
    finally:
        first.close()
    assert len(roles) >= 6, "replay, ps, learner, 2 actors, evaluator"
    newest = sorted(snapshots.glob("replay-*.snap"))[-1]
    held = snapshot_transitions(newest)
    counters = checkpoint_counters(run_dir)
    assert held > 0 and counters is not None
    assert not (run_dir / "summary.json").exists(), "the launcher died before it could write a summary"
    assert Run.open(run_dir).status == "unknown" and not Run.open(run_dir).running

    resumed = LocalRun(tmp_path, "killed", "--resume", str(run_dir), *overrides)  # the same command, resumed
    try:
        wait_until(lambda: "resumed at update" in (run_dir / "logs" / "learner.log").read_text(), 300)
        assert launcher_pid(run_dir) == resumed.proc.pid, "the resumed launcher holds the folder while it runs"
        summary = resumed.wait(600)
        assert summary["status"] == "completed" and steps <= summary["env_steps"] < steps + 1000, summary
        assert summary["resumed_at_env_steps"] == counters["env_steps"]
        learner_log = (run_dir / "logs" / "learner.log").read_text()
        assert f"resumed at update {counters['updates']}, {counters['env_steps']} env steps" in learner_log
        restored = re.findall(
            r"restored (\d+) transitions from (\S+) ", (run_dir / "logs" / "replay-0.log").read_text()
        )
        assert restored and restored[0] == (str(held), str(newest)), "the newest snapshot, every transition in it"
        rows = read_metrics(run_dir / "metrics.jsonl")
        assert_no_counter_goes_backwards(rows)
        updated = [row for row in rows if row["updates"]]  # the warm-up's rows, before the first update, say 0
        assert all(a["updates"] < b["updates"] for a, b in itertools.pairwise(updated)), "no row twice"
        assert_replay_ratio_held(rows)
        evals = [r["env_steps"] for r in read_evals(run_dir)]
        assert len(evals) >= 3 and all(a < b for a, b in itertools.pairwise(evals)), evals
        console = (tmp_path / "killed.console.log").read_text()
        assert f"from its checkpoint at update {counters['updates']:,}" in console
        reproduce = json.loads((run_dir / "reproduce.json").read_text())
        assert len(reproduce["resumes"]) == 1
        resumed.assert_nothing_left()
    finally:
        resumed.close()


def test_the_progress_line_of_a_resumed_run_says_where_it_resumed(tmp_path):
    view = ProgressView(tmp_path / "metrics.jsonl", 40_960, live=False, resumed_at=12_288)
    fields = view._fields({}, 0.0)
    assert fields["env steps"] == "12,288/40,960 (30%, resumed at 12,288)", "before any row: the checkpoint's"
    fresh = ProgressView(tmp_path / "metrics.jsonl", 40_960, live=False)._fields({}, 0.0)
    assert fresh["env steps"] == "0/40,960 (0%)"


def test_a_resumed_run_may_change_its_budget_and_fleet_and_repeat_its_own_overrides(stopped_run):
    cfg = resume_config(stopped_run, ["algo=ddpg", "env=Pendulum-v1", "name=stopped", "steps=9000", "actors=4"])
    assert cfg.total_env_steps == 9000 and cfg.topology.actors == 4 and cfg.algo.name == "ddpg"
    assert changed_keys(read_config(stopped_run / "config.yaml"), cfg) == {
        "topology.actors": (2, 4),
        "total_env_steps": (5000, 9000),
    }
