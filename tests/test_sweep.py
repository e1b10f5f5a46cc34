"""`surreal run --multirun` (commands/sweep.py): Hydra's basic-sweeper expansion, members refused before anything
starts, the summary's numbers held to the members' eval.json, resuming a sweep's unfinished members, and (slow)
three SAC seeds on Pendulum-v1 end to end."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from conftest import wait_until
from surreal.commands import sweep
from surreal.config import load_config, save_config
from surreal.metricsfile import read_evals
from surreal.run.folder import RunFolderLock

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def surreal(tmp_path: Path, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "surreal", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=tmp_path,
        env={**os.environ, "SURREAL_RUNS_ROOT": str(tmp_path / "runs"), "PYTHONUNBUFFERED": "1"},
        check=False,
    )


@pytest.mark.parametrize(
    "overrides",
    [
        ["seed=1,2,3", "algo.lr=3e-4,1e-3", "env=Hopper-v5"],
        ["algo=ddpg,sac", "seed=range(1,3)", "steps=1000"],
        ["env.kwargs.xml_file='a,b.xml'", "seed=4"],  # a quoted comma is a value, not a sweep
        ["seed=choice(5,6)", "++env.kwargs.reset_noise_scale=0.1,0.2"],
    ],
)
def test_members_are_hydras_basic_sweeper_product(overrides):
    """The same members, in the same order, as Hydra's own BasicSweeper makes of the same overrides."""
    members, swept = sweep.expand(overrides)
    (hydras,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), None)
    assert members == hydras
    assert swept == [o.split("=")[0] for o in overrides if "," in o and "'" not in o]


def test_member_folders_are_named_by_index_and_swept_values():
    name, members = sweep.plan_members(["seed=1,2", "algo.lr=3e-4,1e-3", "env=Hopper-v5", "name=lr-sweep"])
    assert name == "lr-sweep"
    assert [m.name for m in members] == [
        "000-seed_1-algo.lr_0.0003",
        "001-seed_1-algo.lr_0.001",
        "002-seed_2-algo.lr_0.0003",
        "003-seed_2-algo.lr_0.001",
    ]
    assert members[1].overrides == ["seed=1", "algo.lr=0.001", "env=Hopper-v5"]
    assert members[1].setting == {"algo.lr": "0.001"}, "a setting is what is swept besides the seed"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["seed=1,2", "algo.lrr=1e-3"], "sweep member 0 (seed=1): algo.lrr=0.001: unknown config key 'algo.lrr'"),
        (["algo=ppo,ddpg", "algo.clip_coef=0.3"], "sweep member 1 (algo=ddpg)"),
        (["seed=1,2", "env=HalfCheeta-v5"], "did you mean 'HalfCheetah-v5'"),
        (["seed=1,2", "name=a,b"], "name= names the sweep's folder: it cannot be swept"),
        (["seed=1,2", "--jobs", "0"], "--jobs must be >= 1"),
    ],
)
@pytest.mark.system
def test_a_sweep_with_a_member_that_cannot_run_is_refused_before_anything_starts(tmp_path, args, says):
    out = surreal(tmp_path, "run", "--multirun", *args)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists(), "no sweep folder, no member started"


def fake_member(sweep_dir: Path, member: sweep.Member, final: float | None, curve: list[tuple[int, float]]) -> None:
    """A member's run folder as a finished run leaves it: config.yaml, evals.jsonl, eval.json (unless `final` is
    None: a member that failed), summary.json."""
    run_dir = sweep_dir / member.name
    run_dir.mkdir(parents=True)
    save_config(load_config(member.overrides), run_dir / "config.yaml")
    rows = [{"env_steps": s, "eval_return_mean": r, "eval_episodes": 2} for s, r in curve]
    (run_dir / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = [{"env_steps": s, "updates": i + 1, "train_return_mean": r} for i, (s, r) in enumerate(curve)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    status = "failed"
    if final is not None:
        evaluation = {"eval_return_mean": final, "eval_return_std": 1.0, "eval_episodes": 2, "env_steps": 3000}
        (run_dir / "eval.json").write_text(json.dumps(evaluation))
        status = "completed"
    (run_dir / "summary.json").write_text(json.dumps({"status": status}))


def make_sweep(
    tmp_path: Path, overrides: list[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, list[sweep.Member]]:
    monkeypatch.setenv("SURREAL_RUNS_ROOT", str(tmp_path / "runs"))
    name, members = sweep.plan_members(overrides)
    return sweep.create_sweep_folder(name, members, overrides, 1), members


@pytest.mark.system
def test_the_summary_is_each_settings_mean_and_std_across_seeds_of_the_members_final_evals(tmp_path, monkeypatch):
    sweep_dir, members = make_sweep(
        tmp_path, ["seed=1,2,3", "algo.lr=3e-4,1e-3", "env=Pendulum-v1", "name=s"], monkeypatch
    )
    finals = {0: -150.0, 1: -400.0, 2: -170.5, 3: -380.0, 4: -161.0, 5: None}  # member 5 failed: no eval.json
    for i, member in enumerate(members):
        fake_member(sweep_dir, member, finals[i], [(1000, -1200.0 + i), (2000 + 10 * i, -600.0 - i)])
    summary = sweep.write_sweep_summary(sweep_dir)
    by_label = {s["label"]: s for s in summary["settings"]}
    assert list(by_label) == ["algo.lr=0.0003", "algo.lr=0.001"]
    for label, indices in (("algo.lr=0.0003", [0, 2, 4]), ("algo.lr=0.001", [1, 3])):
        setting = by_label[label]
        paths = [sweep_dir / members[i].name / "eval.json" for i in indices]
        evals = [json.loads(path.read_text())["eval_return_mean"] for path in paths]
        assert setting["n"] == len(evals) and [m["seed"] for m in setting["members"]] == [1, 2, 3]
        assert setting["eval_return_mean"] == pytest.approx(statistics.fmean(evals))
        assert setting["eval_return_std"] == pytest.approx(statistics.pstdev(evals))
        assert (setting["eval_return_min"], setting["eval_return_max"]) == (min(evals), max(evals))
    assert (
        by_label["algo.lr=0.001"]["members"][2]["status"] == "pending"
        and "3: pending" in (sweep_dir / "summary.md").read_text()
    )
    assert json.loads((sweep_dir / "summary.json").read_text()) == json.loads(json.dumps(summary))
    table = list(csv.DictReader(io.StringIO((sweep_dir / "summary.csv").read_text())))
    assert [float(row["eval_return_mean"]) for row in table] == [s["eval_return_mean"] for s in summary["settings"]]
    assert "| algo.lr=0.0003 | 1, 2, 3 | -160.5 ± 8.4 (n=3) |" in (sweep_dir / "summary.md").read_text()
    png = (sweep_dir / "curves.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


def test_a_stopped_sweep_resumes_the_members_that_did_not_complete(tmp_path, monkeypatch):
    sweep_dir, members = make_sweep(tmp_path, ["seed=1,2,3", "env=Pendulum-v1", "algo=sac", "name=s"], monkeypatch)
    fake_member(sweep_dir, members[0], -150.0, [(1000, -300.0)])
    fake_member(sweep_dir, members[1], None, [(1000, -900.0)])  # stopped: a folder, no eval
    planned: list[list[str]] = []
    monkeypatch.setattr(sweep, "drive", lambda d, lock, plan, jobs: planned.extend(args for _, args in plan) or 0)
    assert sweep.resume_sweep(sweep_dir, [], 2) == 0
    assert planned == [
        ["--resume", str(sweep_dir / members[1].name)],
        [*members[2].overrides, f"name={members[2].name}"],  # never started: started now
    ]
    planned.clear()
    assert sweep.resume_sweep(sweep_dir, ["steps=5000"], 1) == 0
    assert planned[0] == ["--resume", str(sweep_dir / members[0].name), "steps=5000"], "a new budget: all of them"
    with RunFolderLock(sweep_dir):
        assert sweep.resume_sweep(sweep_dir, [], 1) == 2, "a sweep still running is not resumed twice"


@pytest.mark.slow
def test_a_seed_sweep_of_sac_on_pendulum_makes_three_runs_and_a_summary_true_to_their_evals(tmp_path):
    """The issue's command, at a short budget: three runs under one sweep folder, each an ordinary completed run
    folder, and a summary whose numbers are the members' eval.json; curves.png drawn from their evaluations."""
    args = ["run", "--multirun", "seed=1,2,3", "env=Pendulum-v1", "algo=sac", "steps=1500", "name=pend-sac"]
    args += ["algo.learning_starts=500", "algo.hidden_sizes=[32,32]", "actor.chunk_steps=32"]
    args += ["learner.eval_interval=500", "learner.eval_episodes=2", "--jobs", "2"]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "surreal", *args],
        cwd=tmp_path,
        env={**os.environ, "SURREAL_RUNS_ROOT": str(tmp_path / "runs"), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: dict[int, psutil.Process] = {}

    def finished() -> bool:
        with contextlib.suppress(psutil.NoSuchProcess):
            seen.update({p.pid: p for p in psutil.Process(launcher.pid).children(recursive=True)})
        return launcher.poll() is not None

    try:
        wait_until(finished, 900, interval_s=0.5)
        output = launcher.stdout.read() if launcher.stdout else ""
        assert launcher.returncode == 0, output[-3000:]
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=30)
        for process in seen.values():
            if process.is_running():
                process.kill()
    sweep_dir = tmp_path / "runs" / "pend-sac"
    wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in seen.values()), 30)

    plan = json.loads((sweep_dir / "sweep.json").read_text())
    names = [m["name"] for m in plan["members"]]
    assert names == ["000-seed_1", "001-seed_2", "002-seed_3"]
    assert [(m["status"], m["exit_code"]) for m in plan["members"]] == [("completed", 0)] * 3
    evals = []
    for seed, name in enumerate(names, start=1):
        run_dir = sweep_dir / name
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["seed"] == seed and summary["env_steps"] >= 1500
        assert summary["algo"] == "sac" and summary["env"] == "Pendulum-v1"
        assert read_evals(run_dir), "the evaluator's rows, for the curves"
        evals.append(json.loads((run_dir / "eval.json").read_text())["eval_return_mean"])
    (setting,) = json.loads((sweep_dir / "summary.json").read_text())["settings"]
    assert [m["eval_return_mean"] for m in setting["members"]] == evals
    assert setting["n"] == 3 and [m["seed"] for m in setting["members"]] == [1, 2, 3]
    assert setting["eval_return_mean"] == pytest.approx(statistics.fmean(evals))
    assert setting["eval_return_std"] == pytest.approx(statistics.pstdev(evals))
    assert f"{statistics.fmean(evals):.1f} ± {statistics.pstdev(evals):.1f} (n=3)" in output, "printed at the end"
    assert (sweep_dir / "curves.png").read_bytes().startswith(PNG_MAGIC)
    assert all((sweep_dir / "logs" / f"{name}.log").exists() for name in names)
