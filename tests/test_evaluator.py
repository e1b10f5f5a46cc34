"""The evaluator role's core on an in-process ps: which blobs it evaluates, what a row holds, where a restarted
one continues, and the rows file it leaves. No sockets, no subprocesses (test_local_run.py runs the process)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from surreal.algos import get_algorithm
from surreal.config import ConfigError, algo_config, load_config
from surreal.envs import make_env
from surreal.metricsfile import EVALS_FILE, read_evals
from surreal.policy.artifact import BEST_DIR, FILE_NAME, POLICY_DIR, read_policy_file
from surreal.proto.wire import BlobMeta
from surreal.roles.evaluation import EVAL_SEED_OFFSET
from surreal.roles.evaluator import EvalRow, EvaluatorCore, append_row, next_threshold
from surreal.roles.ports import InProcessParams
from surreal.runtime.rollout import evaluate

OVERRIDES = ["env=InvertedPendulum-v5", "algo=ddpg", "learner.eval_interval=1000", "learner.eval_episodes=3"]


def spaces(cfg) -> tuple:
    env = make_env(cfg.env.id, 0)
    env.close()
    return env.observation_space, env.action_space


def blob_arrays(cfg) -> dict:
    """A fresh learner's parameters: what a ps would serve."""
    return get_algorithm(cfg.algo.name).make_learner(*spaces(cfg), algo_config(cfg), torch.device("cpu")).params()


def test_next_threshold_is_the_first_multiple_after():
    assert [next_threshold(s, 1000) for s in (0, 1, 999, 1000, 1001, 4100)] == [1000, 1000, 1000, 2000, 2000, 5000]


def test_only_blobs_past_the_next_multiple_of_the_interval_are_evaluated_and_done_ends_it():
    cfg = load_config(OVERRIDES)
    ps, arrays = InProcessParams(), blob_arrays(cfg)
    core = EvaluatorCore(cfg, ps)
    assert core.step() is None and core.version < 0, "nothing published yet"
    evaluated = []
    for version, env_steps in enumerate((500, 1200, 1500, 1999, 4100, 4500)):
        ps.publish(BlobMeta(version, "inc", env_steps=env_steps), arrays)
        row = core.step()
        evaluated.append(None if row is None else row.env_steps)
        assert core.step() is None, "the same blob again: nothing new to evaluate"
    assert evaluated == [None, 1200, None, None, 4100, None]
    assert core.due == 5000
    ps.publish(BlobMeta(6, "inc", done=True, env_steps=9000), arrays)
    assert core.step() is None and core.done, "the done blob ends it unevaluated: eval.json is the last point"


def test_a_row_scores_the_blob_on_the_final_evaluations_seeds():
    cfg = load_config(OVERRIDES)
    ps, arrays = InProcessParams(), blob_arrays(cfg)
    core = EvaluatorCore(cfg, ps)
    ps.publish(BlobMeta(3, "inc", env_steps=1024), arrays)
    row = core.step()
    assert row is not None and (row.env_steps, row.version, row.eval_episodes) == (1024, 3, 3)
    policy = get_algorithm("ddpg").make_policy(*spaces(cfg), algo_config(cfg), 0, 1)
    policy.load_params(arrays)
    reference = evaluate(cfg.env.id, policy, 3, cfg.seed + EVAL_SEED_OFFSET, cfg.env.kwargs)
    assert row.eval_return_mean == pytest.approx(np.mean(reference.returns))
    assert row.eval_return_std == pytest.approx(np.std(reference.returns))
    assert row.eval_success_rate is None, "InvertedPendulum reports no success"
    assert row.eval_s >= 0


def test_a_restarted_evaluator_continues_after_its_last_row(tmp_path):
    cfg = load_config(OVERRIDES)
    for env_steps in (1200, 2600):
        append_row(tmp_path / EVALS_FILE, EvalRow(env_steps, 1, 0.0, 0.1, 1.0, 0.0, 3, None))
    core = EvaluatorCore(cfg, InProcessParams(), tmp_path)
    assert core.rows == [1200, 2600] and core.due == 3000
    core.close()
    assert EvaluatorCore(cfg, InProcessParams()).due == 1000, "a fresh one starts at the first multiple"


def test_a_line_torn_by_a_kill_costs_only_itself(tmp_path):
    path = tmp_path / EVALS_FILE
    append_row(path, EvalRow(1000, 1, 0.0, 0.1, 5.0, 0.0, 3, None))
    with open(path, "a", encoding="utf-8") as out:
        out.write('{"env_steps": 20')  # SIGTERM mid-write
    append_row(path, EvalRow(3000, 2, 0.0, 0.1, 7.0, 0.0, 3, 0.5))
    assert [r["env_steps"] for r in read_evals(tmp_path)] == [1000, 3000]
    assert json.loads(path.read_text().splitlines()[-1])["eval_success_rate"] == 0.5


def test_the_evaluator_is_on_by_default_where_the_budget_reaches_it_and_the_interval_is_checked():
    """Every 25,000 env steps by default (RL Zoo's eval_freq), in a run whose budget is above that; 0 turns it off."""
    assert load_config([]).learner.eval_interval == 25_000 and load_config([]).evaluates_while_training
    assert not load_config(["steps=25000"]).evaluates_while_training, "the final evaluation is that point"
    assert not load_config(["learner.eval_interval=0"]).evaluates_while_training
    with pytest.raises(ConfigError, match="learner.eval_interval must be >= 0"):
        load_config(["learner.eval_interval=-5"])
    with pytest.raises(ValueError, match="eval_interval > 0"):
        EvaluatorCore(load_config(["learner.eval_interval=0"]), InProcessParams())


def test_the_best_evaluated_blob_is_kept_as_the_best_policy(tmp_path):
    """policy/best/ holds the blob of the highest eval return so far, its row's score in the header; a restarted
    evaluator keeps the recorded score to beat."""
    best_file = tmp_path / POLICY_DIR / BEST_DIR / FILE_NAME
    ps, rows, blobs = InProcessParams(), [], {}
    core = EvaluatorCore(load_config(OVERRIDES), ps, tmp_path)
    for version, seed in enumerate((1, 2, 3, 4)):
        arrays = blob_arrays(load_config([*OVERRIDES, f"seed={seed}"]))
        blobs[1000 * (version + 1)] = arrays
        ps.publish(BlobMeta(version, "inc", env_steps=1000 * (version + 1)), arrays)
        rows.append(core.step())
        top = max(rows, key=lambda r: r.eval_return_mean)  # the first of equal scores stays
        header, tensors = read_policy_file(best_file)
        assert header["evaluation"]["return_mean"] == top.eval_return_mean
        assert header["evaluation"]["env_steps"] == header["env_steps"] == top.env_steps
        assert header["parameter_version"] == top.version and header["evaluation"]["seed"] == 1
        weights = blobs[top.env_steps]["actor"]["net.0.weight"]
        assert np.array_equal(tensors["actor/net.0.weight"], weights)
    assert len({r.eval_return_mean for r in rows}) > 1, "the blobs score differently"
    core.close()
    assert [r["env_steps"] for r in read_evals(tmp_path)] == [1000, 2000, 3000, 4000], "every row written"
    restarted = EvaluatorCore(load_config(OVERRIDES), InProcessParams(), tmp_path)
    assert restarted.best is not None and restarted.best.score == top.eval_return_mean
    assert restarted.due == 5000
    restarted.close()
    assert EvaluatorCore(load_config(OVERRIDES), InProcessParams()).best is None, "no run folder: no best"


def test_a_learner_resumed_before_the_last_row_rewinds_the_rows_and_they_are_evaluated_again(tmp_path):
    """A run killed after an evaluation but before its learner's next checkpoint resumes with fewer env steps than
    the last row names: the rows past the resume point are dropped and those intervals evaluated again, so the
    file's env steps never go backwards (and the evaluations after the resume score the resumed run)."""
    cfg = load_config(OVERRIDES)
    path = tmp_path / EVALS_FILE
    for env_steps in (1200, 2600, 3100):
        append_row(path, EvalRow(env_steps, 1, 0.0, 0.1, 1.0, 0.0, 3, None))
    ps, arrays = InProcessParams(), blob_arrays(cfg)
    core = EvaluatorCore(cfg, ps, tmp_path)
    assert core.rows == [1200, 2600, 3100]
    ps.publish(BlobMeta(7, "resumed", env_steps=2400), arrays)  # the checkpoint the learner resumed from
    row = core.step()
    assert core.rows == [1200, 2400]
    assert row is not None and row.env_steps == 2400, "past 2,000 again: the resumed run's policy is scored there"
    assert [r["env_steps"] for r in read_evals(tmp_path)] == [1200, 2400]
    ps.publish(BlobMeta(8, "resumed", env_steps=2900), arrays)
    assert core.step() is None and core.due == 3000
    ps.publish(BlobMeta(9, "resumed", env_steps=3050), arrays)
    row = core.step()
    assert row is not None and row.env_steps == 3050
    assert [r["env_steps"] for r in read_evals(tmp_path)] == [1200, 2400, 3050], "past its last row: no rewind"
    core.close()
