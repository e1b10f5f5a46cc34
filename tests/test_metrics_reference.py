"""docs/metrics.md names every field a run writes: short serial runs of every algorithm, on an env that reports
success and with the evaluator on, write metrics.jsonl, evals.jsonl and TensorBoard; every row field and every tag
they wrote must be in the reference, and everything the reference lists must have been written by one of them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from surreal.config import load_config
from surreal.config.schema import ALGORITHMS
from surreal.metricsfile import read_evals, read_metrics
from surreal.run.serial import run_serial

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
SUCCESS_ENV = "SurrealTestSuccessPendulum-v0"
SECTIONS = {"metrics.jsonl": "## metrics.jsonl", "evals.jsonl": "## evals.jsonl", "tensorboard": "## TensorBoard"}

# Tiny runs: a few updates and at least two metrics rows each (charts/SPS is the rate between two rows), an
# evaluation or two by the evaluator, and the final one.
RUNS = {
    "ppo": ["steps=512", "algo.batch_size=128", "algo.minibatch_size=64", "algo.update_epochs=1"]
    + ["actor.chunk_steps=32"],
    "ddpg": ["steps=800", "algo.learning_starts=100", "algo.batch_size=32", "algo.hidden_sizes=[16,16]"],
    "sac": ["steps=800", "algo.learning_starts=100", "algo.batch_size=32", "algo.hidden_sizes=[16,16]"]
    + ["algo.critic_hidden_sizes=[16,16]"],
    "es": ["steps=2000", "algo.batch_size=4", "algo.pairs_per_chunk=2", "algo.noise_table_size=100000"]
    + ["algo.hidden_sizes=[8]"],
}


class SuccessPendulum(gym.Wrapper):
    """Pendulum-v1 that reports `is_success` (upright at the step), as robosuite tasks and Gymnasium-Robotics do."""

    def __init__(self) -> None:
        super().__init__(gym.make("Pendulum-v1", max_episode_steps=50))

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, {**info, "is_success": bool(obs[0] > 0.9)}


def documented() -> dict[str, set[str]]:
    """The names in the first column of each section's tables: `| `name` | ... |`."""
    text = REFERENCE.read_text(encoding="utf-8")
    out = {}
    for key, heading in SECTIONS.items():
        start = text.index(heading + "\n")
        end = text.find("\n## ", start + len(heading))
        body = text[start : end if end >= 0 else None]
        out[key] = set(re.findall(r"^\| `([^`]+)`", body, flags=re.MULTILINE))
    return out


def tags(folder: Path) -> set[str]:
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    return set(accumulator.Tags()["scalars"])


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, set[str]]]:
    """What each algorithm's run wrote: row fields, evaluator row fields, learner and evaluator tags."""
    torch.set_num_threads(1)
    if SUCCESS_ENV not in gym.envs.registry:
        gym.register(SUCCESS_ENV, entry_point=SuccessPendulum, max_episode_steps=50)
    out = {}
    for algo, overrides in RUNS.items():
        run_dir = tmp_path_factory.mktemp(algo)
        common = [f"env={SUCCESS_ENV}", "actors=2", "device=cpu", "learner.eval_interval=100"]
        cfg = load_config([f"algo={algo}", *common, "learner.eval_episodes=2", *overrides])
        run_serial(cfg, run_dir)
        out[algo] = {
            "metrics.jsonl": {k for row in read_metrics(run_dir / "metrics.jsonl") for k in row},
            "evals.jsonl": {k for row in read_evals(run_dir) for k in row},
            "tensorboard": tags(run_dir / "tensorboard") | tags(run_dir / "tensorboard" / "evaluator"),
        }
    return out


def test_every_algorithm_is_run():
    assert set(RUNS) == set(ALGORITHMS)


@pytest.mark.parametrize("section", list(SECTIONS))
def test_every_field_written_is_in_the_reference(written, section):
    listed = documented()[section]
    for algo, files in written.items():
        missing = files[section] - listed
        assert not missing, f"{algo} writes {sorted(missing)} to {section}: add them to docs/metrics.md"


@pytest.mark.parametrize("section", list(SECTIONS))
def test_everything_the_reference_lists_is_written(written, section):
    seen = set().union(*(files[section] for files in written.values()))
    stale = documented()[section] - seen
    assert not stale, f"docs/metrics.md lists {sorted(stale)} under {section}, which no run wrote"


def test_success_and_evaluator_curves_are_there(written):
    """The env reports success: the rates reach the rows and TensorBoard; the evaluator's curve is in TensorBoard."""
    ppo = written["ppo"]
    assert {"train_success_rate", "train_episode_length_mean"} <= ppo["metrics.jsonl"]
    assert {"eval/return_mean", "eval/success_rate", "eval/seconds", "charts/SPS"} <= ppo["tensorboard"]
    assert {"time/update_s", "time/wait_s", "train/episode_length_mean"} <= ppo["tensorboard"]
