"""Run folder: names, config.yaml, reproduce.json, summary.json, and tailing metrics.jsonl as it grows."""

from __future__ import annotations

import json
import re
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from surreal.config import ConfigError, load_config, read_config
from surreal.launch.progress import Rates
from surreal.metricsfile import MetricsTail, parse_row, read_metrics
from surreal.provenance import PACKAGES, git_state
from surreal.run.folder import create_run_folder, run_name
from surreal.runjson import write_summary

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cfg():
    return load_config(["env=Hopper-v5", "seed=7", "actors=3"])


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    monkeypatch.setenv("SURREAL_RUNS_ROOT", str(tmp_path / "runs"))
    return tmp_path / "runs"


def rows_text(*rows: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_run_name_is_the_configured_one_or_timestamp_algo_env(cfg):
    assert run_name(replace(cfg, name="my-run_1.b")) == "my-run_1.b"
    assert re.fullmatch(r"\d{8}-\d{6}-ppo-Hopper-v5", run_name(cfg))
    atari = replace(cfg, env=replace(cfg.env, id="ALE/Pong-v5"))
    assert re.fullmatch(r"\d{8}-\d{6}-ppo-ALE_Pong-v5", run_name(atari))
    for bad in ("../escape", "a/b", ".hidden", ""):
        with pytest.raises(ConfigError, match="folder name"):
            run_name(replace(cfg, name=bad))


def test_create_run_folder_writes_resolved_config_and_reproduce_info(cfg, runs_root):
    run_dir, named, _lock = create_run_folder(replace(cfg, name="r1"), ["env=Hopper-v5", "seed=7", "actors=3"])
    assert run_dir == (runs_root / "r1").resolve() and named.name == "r1"
    assert (run_dir / "logs").is_dir() and (run_dir / "checkpoints").is_dir()
    assert read_config(run_dir / "config.yaml") == named

    reproduce = json.loads((run_dir / "reproduce.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", reproduce["git_sha"]), "the tests run from a git checkout"
    assert isinstance(reproduce["git_dirty"], bool)
    assert reproduce["python"] == ".".join(map(str, sys.version_info[:3]))
    assert set(reproduce["packages"]) == set(PACKAGES) and reproduce["packages"]["numpy"]
    # The distribution is surreal-rl (the index's `surreal` is another project): its version is the one recorded.
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert reproduce["packages"]["surreal-rl"] == version
    assert reproduce["command"] == sys.argv
    assert reproduce["overrides"] == ["env=Hopper-v5", "seed=7", "actors=3"]

    with pytest.raises(ConfigError, match=r"in use by another launcher \(pid \d+\)"):
        create_run_folder(replace(cfg, name="r1"))  # this launcher still holds it
    _lock.release()
    (run_dir / "metrics.jsonl").write_text(rows_text({"env_steps": 1, "updates": 1}))
    with pytest.raises(ConfigError, match="already holds a run"):
        create_run_folder(replace(cfg, name="r1"))


def test_a_run_folder_that_cannot_be_made_or_named_is_one_clear_error(cfg, runs_root, monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match="folder name of at most 100"):
        run_name(replace(cfg, name="x" * 101))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SURREAL_RUNS_ROOT", str(blocker / "runs"))  # a runs folder inside a file
    with pytest.raises(ConfigError, match="cannot create the run folder"):
        create_run_folder(replace(cfg, name="r2"))


def test_git_state_is_unknown_outside_a_checkout(tmp_path):
    assert git_state(tmp_path / "module.py") == ("unknown", False)


def test_summary_takes_eval_and_the_last_complete_metrics_row(cfg, runs_root):
    run_dir, named, _ = create_run_folder(replace(cfg, name="done"))
    rows = rows_text(
        {"env_steps": 2048, "updates": 1, "train_return_mean": None},
        {"env_steps": 4096, "updates": 2, "train_return_mean": 12.5, "train_success_rate": 0.25},
    )
    (run_dir / "metrics.jsonl").write_text(rows + '{"env_steps": 6144, "upd')  # the learner was mid-write
    evaluation = {"eval_return_mean": 99.0, "eval_return_std": 3.0, "eval_episodes": 10, "env_steps": 4096}
    evaluation["eval_success_rate"] = 0.5
    (run_dir / "eval.json").write_text(json.dumps(evaluation))

    summary = write_summary(run_dir, named, 8.0, "completed", {"learner": 1, "actor-0": 0})
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    assert summary | {"git_sha": None} == {
        "algo": "ppo",
        "env": "Hopper-v5",
        "seed": 7,
        "status": "completed",
        "reason": None,
        "env_steps": 4096,
        "updates": 2,
        "wall_s": 8.0,
        "env_steps_per_s": 512.0,
        "eval_return_mean": 99.0,
        "eval_return_std": 3.0,
        "eval_episodes": 10,
        "train_return_mean": 12.5,
        "eval_success_rate": 0.5,
        "train_success_rate": 0.25,
        "actors": 3,
        "envs_per_actor": 1,
        "restarts": {"learner": 1, "actor-0": 0},
        "resumed_at_env_steps": None,
        "git_sha": None,
        "run_dir": str(run_dir),
    }


def test_summary_of_a_run_that_ended_before_its_first_update(cfg, runs_root):
    run_dir, named, _ = create_run_folder(replace(cfg, name="early"))
    summary = write_summary(run_dir, named, 3.0, "failed", {"actor-0": 5}, reason="actor-0 exhausted its restarts")
    assert summary["env_steps"] == 0 and summary["updates"] == 0 and summary["env_steps_per_s"] == 0.0
    assert summary["eval_return_mean"] is None and summary["train_return_mean"] is None
    assert summary["eval_success_rate"] is None and summary["train_success_rate"] is None
    assert summary["status"] == "failed" and summary["reason"] == "actor-0 exhausted its restarts"


def test_a_metrics_line_is_a_row_only_when_it_is_a_json_object(tmp_path):
    assert parse_row('{"updates": 3}') == parse_row(b'{"updates": 3}\n') == {"updates": 3}
    for not_a_row in ('{"upda', "[1, 2]", "7", "", b"\xff\xfe{", b'{"a": "\xff"}'):
        assert parse_row(not_a_row) is None, not_a_row
    path = tmp_path / "metrics.jsonl"
    assert read_metrics(path) == []
    path.write_bytes(b'{"updates": 1}\n[1]\n\xff\n{"updates": 2}\n{"upd')
    assert read_metrics(path) == [{"updates": 1}, {"updates": 2}]


def test_metrics_tail_returns_only_complete_new_rows_and_rereads_a_rewritten_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.read() == []
    path.write_text(rows_text({"updates": 1}) + '{"upda')
    assert tail.read() == [{"updates": 1}]
    with open(path, "a") as f:
        f.write('tes": 2}\n')
    assert tail.read() == [{"updates": 2}]
    assert tail.read() == []
    path.write_text(rows_text({"updates": 1}))  # a resumed learner dropped rows after its checkpoint
    assert tail.read() == [{"updates": 1}]


def test_rates_come_from_arrival_times_and_restart_when_steps_go_back():
    rates = Rates()
    rates.add(100.0, 0, 0)
    assert rates.per_second() is None
    rates.add(100.5, 1000, 1)
    assert rates.per_second() is None, "too short a span to be a rate"
    rates.add(102.0, 4000, 2)
    assert rates.per_second() == (2000.0, 1.0)
    rates.add(103.0, 2048, 1)  # resumed from an earlier checkpoint
    assert rates.per_second() is None


def test_a_resumed_runs_summary_rates_the_env_steps_since_its_resume(cfg, runs_root):
    run_dir, named, _ = create_run_folder(replace(cfg, name="resumed"))
    (run_dir / "metrics.jsonl").write_text(rows_text({"env_steps": 10_000, "updates": 5}))
    summary = write_summary(run_dir, named, 8.0, "interrupted", {}, resumed_at_env_steps=6_000)
    assert summary["resumed_at_env_steps"] == 6_000 and summary["env_steps_per_s"] == 500.0
