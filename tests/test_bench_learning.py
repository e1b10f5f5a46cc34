"""`bench.learning --collect`: the learning result for run folders that finished without their watcher."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from bench.learning import collect, first_at_target

from surreal.config import load_config
from surreal.run.folder import create_run_folder
from surreal.runjson import write_summary


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SURREAL_RUNS_ROOT", str(tmp_path / "runs"))
    return tmp_path / "runs"


def finished_run(name: str, overrides: list[str], eval_return: float, success: float | None = None):
    """A run folder as `surreal run` leaves it, written by the launcher's own functions."""
    cfg = load_config(overrides)
    run_dir, named, lock = create_run_folder(replace(cfg, name=name), [f"name={name}", *overrides])
    lock.release()
    rows = [{"env_steps": 4096 * (i + 1), "updates": i + 1, "train_return_mean": 10.0 * i} for i in range(5)]
    if success is not None:
        rows[-1]["train_success_rate"] = success
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evaluation = {"eval_return_mean": eval_return, "eval_return_std": 1.0, "eval_episodes": 20, "env_steps": 20480}
    if success is not None:
        evaluation["eval_success_rate"] = success
    (run_dir / "eval.json").write_text(json.dumps(evaluation))
    write_summary(run_dir, named, 100.0, "completed", {"learner": 0})
    return run_dir


def seed_overrides(seed: int, *extra: str) -> list[str]:
    return ["algo=ddpg", "env=Pendulum-v1", "steps=20480", f"seed={seed}", "actors=2", *extra]


def test_collect_reports_each_seed_with_the_experiment_read_from_the_folders(runs_root):
    runs = [
        finished_run("a", seed_overrides(1, "algo.batch_size=64"), -200.0, success=0.5),
        finished_run("b", seed_overrides(2, "algo.batch_size=64"), -300.0),
    ]
    result = collect(runs)
    assert {k: result[k] for k in ("benchmark", "algo", "env", "steps", "actors", "overrides")} == {
        "benchmark": "learning",
        "algo": "ddpg",
        "env": "Pendulum-v1",
        "steps": 20480,
        "actors": 2,
        "overrides": ["algo.batch_size=64"],
    }
    assert [(r["seed"], r["status"], r["eval_return_mean"]) for r in result["runs"]] == [
        (1, "completed", -200.0),
        (2, "completed", -300.0),
    ]
    assert [r["eval_success_rate"] for r in result["runs"]] == [0.5, None]
    assert result["eval_return_mean"] == -250.0 and result["wall_s_mean"] == 100.0
    assert result["references"]["target"] == -250  # REFERENCES, for the env read from the folders
    assert all((run / "learning_curve.png").is_file() for run in runs)


def test_collect_refuses_folders_of_different_experiments_and_runs_it_did_not_start(runs_root, tmp_path):
    one = finished_run("one", seed_overrides(1), -200.0)
    other = finished_run("other", seed_overrides(2, "algo.batch_size=64"), -300.0)
    with pytest.raises(SystemExit, match="not the seeds of one experiment"):
        collect([one, other])

    plain = finished_run("plain", ["algo=ddpg", "env=Pendulum-v1"], -200.0)
    with pytest.raises(SystemExit, match=r"not a bench.learning run \(steps, actors not among its overrides\)"):
        collect([plain])


def test_a_row_holds_the_evaluators_curve_and_when_it_first_reached_the_bar(runs_root):
    run = finished_run("evals", seed_overrides(1, "learner.eval_interval=4096"), -180.0)
    started = json.loads((run / "reproduce.json").read_text())["started_at"]
    during = [(4096, -900.0), (8192, -400.0), (12288, -240.0), (16384, -260.0)]
    (run / "evals.jsonl").write_text(
        "".join(
            json.dumps({"env_steps": s, "time": started + s / 100, "eval_return_mean": r, "eval_episodes": 10}) + "\n"
            for s, r in during
        )
    )
    (row,) = collect([run])["runs"]
    assert [(p["env_steps"], p["eval_return_mean"]) for p in row["evals"]] == [*during, (20480, -180.0)]
    assert [p["wall_s"] for p in row["evals"]] == [41.0, 81.9, 122.9, 163.8, 100.0]
    assert row["first_at_target"]["env_steps"] == 12288, "Pendulum's bar is -250: the third evaluation"
    plain = finished_run("plain-seed", seed_overrides(1), -180.0)
    assert "evals" not in collect([plain])["runs"][0], "no evaluator: the final eval alone, as before"


def test_a_success_bar_is_judged_on_the_success_rate():
    curve = [
        {"env_steps": 1, "eval_return_mean": 500.0, "eval_success_rate": 0.6},
        {"env_steps": 2, "eval_return_mean": 400.0, "eval_success_rate": 0.85},
    ]
    assert first_at_target(curve, {"success_target": 0.8, "target": 100})["env_steps"] == 2
    assert first_at_target(curve, {"target": 450})["env_steps"] == 1
    assert first_at_target(curve, {"target": 9000}) is None and first_at_target(curve, {}) is None
