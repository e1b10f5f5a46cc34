"""TensorBoard as an SB3 user reads it: short serial runs of DDPG, SAC and PPO (`surreal.train(mode="serial")`) write
the scalars SB3 logs for them (episode return and length, fps, the losses, entropy or the temperature, the learning
rate, the update count), and no `charts/SPS` point is 0 while env steps advance (recorder.py `SpsClock`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import surreal
from surreal.runtime.recorder import SPS_TAG, SpsClock

COMMON = {"device": "cpu", "learner.eval_episodes": 2}
# DDPG with two gradient steps per env step: a chunk's env steps allow rows' worth of updates on samples the replay
# already held, so rows with equal env steps follow each other (what made every other SPS point 0).
RUNS = {
    "ddpg": (2_000, {"algo.learning_starts": 500, "algo.batch_size": 32, "algo.hidden_sizes": [16, 16]}),
    "sac": (1_500, {"algo.learning_starts": 500, "algo.batch_size": 32, "algo.hidden_sizes": [16, 16]}),
    "ppo": (1_024, {"algo.batch_size": 256, "algo.minibatch_size": 64, "algo.update_epochs": 1}),
}
RUNS["ddpg"][1]["algo.replay_ratio"] = 2.0
RUNS["sac"][1]["algo.critic_hidden_sizes"] = [16, 16]
# What SB3 logs (rollout/ep_rew_mean, rollout/ep_len_mean, time/fps, train/n_updates, train/learning_rate, the
# losses, train/ent_coef or the entropy), under this project's names (docs/metrics.md says which is which).
EVERY_RUN = {"train/return_mean", "train/episode_length_mean", SPS_TAG, "learner/updates", "train/episodes"}
SB3_TAGS = {
    "ddpg": EVERY_RUN | {"learner/critic_loss", "learner/actor_loss", "learner/actor_lr", "learner/critic_lr"},
    "sac": EVERY_RUN
    | {"learner/critic_loss", "learner/actor_loss", "learner/alpha_loss", "learner/alpha", "learner/entropy"}
    | {"learner/actor_lr", "learner/critic_lr", "learner/alpha_lr"},
    "ppo": EVERY_RUN | {"learner/policy_loss", "learner/value_loss", "learner/entropy", "learner/lr"},
}


@pytest.fixture(scope="module")
def boards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EventAccumulator]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for algo, (steps, overrides) in RUNS.items():
        run = surreal.train(
            algo, "Pendulum-v1", actors=2, steps=steps, overrides={**COMMON, **overrides}, name=algo, mode="serial",
            runs_root=root,
        )  # fmt: skip
        board = EventAccumulator(str(Path(run.dir) / "tensorboard"), size_guidance={"scalars": 0})
        board.Reload()
        out[algo] = board
    return out


@pytest.mark.system
@pytest.mark.parametrize("algo", list(RUNS))
def test_the_scalars_sb3_logs_are_written(boards, algo):
    missing = SB3_TAGS[algo] - set(boards[algo].Tags()["scalars"])
    assert not missing, f"{algo}'s TensorBoard lacks {sorted(missing)}"


@pytest.mark.system
@pytest.mark.parametrize("algo", list(RUNS))
def test_no_sps_point_is_zero_while_env_steps_advance(boards, algo):
    points = boards[algo].Scalars(SPS_TAG)
    assert points and all(p.value > 0 for p in points), [(p.step, p.value) for p in points]
    steps = [p.step for p in points]
    assert steps == sorted(set(steps)), "one point per interval, each ending where env steps advanced"


def test_the_sps_clock_spans_rows_without_new_env_steps_and_short_gaps():
    """Rows of equal env steps and rows milliseconds apart extend the interval; the end covers what is left."""
    clock = SpsClock()
    assert clock.row(100.0, 0) is None
    assert clock.row(100.001, 256) is None, "a millisecond is no interval"
    assert clock.row(101.0, 512) == (512, 512.0)
    assert clock.row(102.0, 512) is None, "no env step since the last point: the interval goes on"
    assert clock.row(103.0, 1024) == (1024, 256.0)
    assert clock.row(103.5, 1280) is None
    assert clock.last() == (1280, 512.0)
    assert clock.last() is None
