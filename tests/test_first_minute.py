"""A run shows its first minute: the learner writes a metrics row from the first finished episode, before any update
(an off-policy warm-up of random actions, an on-policy first batch), for every algorithm, so `surreal plot` and
`Run.metrics` work at once; the Quickstart's short SAC run, all warm-up, has a curve."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import surreal
from surreal.commands.plot import plot_run
from surreal.config.schema import ALGORITHMS

pytestmark = [
    pytest.mark.system,  # serial runs of every algorithm
    pytest.mark.filterwarnings("ignore:algo.learning_starts"),  # the warm-up is the point here
]
COMMON = {"device": "cpu", "learner.eval_episodes": 2, "env.kwargs.max_episode_steps": 50}
# Each stops before (or right after) its first update: every row but an update's is the warm-up's.
RUNS = {
    "sac": (600, {"algo.learning_starts": 10_000, "algo.hidden_sizes": [16, 16], "algo.critic_hidden_sizes": [16, 16]}),
    "ddpg": (600, {"algo.learning_starts": 10_000, "algo.hidden_sizes": [16, 16]}),
    "ppo": (1_024, {"algo.batch_size": 1_024, "algo.minibatch_size": 256, "algo.update_epochs": 1}),
    "es": (800, {"algo.batch_size": 4, "algo.pairs_per_chunk": 2, "algo.noise_table_size": 100_000}),
}
RUNS["ppo"][1]["actor.chunk_steps"] = 64
RUNS["es"][1]["algo.hidden_sizes"] = [8]


def test_every_algorithm_is_run():
    assert set(RUNS) == set(ALGORITHMS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, surreal.Run]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for algo, (steps, overrides) in RUNS.items():
        out[algo] = surreal.train(
            algo, "Pendulum-v1", actors=2, steps=steps, overrides={**COMMON, **overrides}, name=algo, mode="serial",
            runs_root=root,
        )  # fmt: skip
    return out


@pytest.mark.parametrize("algo", list(RUNS))
def test_rows_come_from_the_first_finished_episode_before_any_update(runs, algo):
    run = runs[algo]
    rows = surreal.Run.open(run.dir).metrics
    warmup = [row for row in rows if row["updates"] == 0]
    assert warmup, f"{algo} wrote no row before its first update"
    assert warmup[0]["episodes"] >= 1 and warmup[0]["train_return_mean"] is not None
    assert warmup[0]["env_steps"] <= 512, "the first row comes with the actors' first chunks, which end episodes"
    episodes = [row["episodes"] for row in warmup]
    assert episodes == sorted(set(episodes)), "a row each time episodes finished, counting up"
    assert all(row["train_episode_length_mean"] == 50.0 and "time" in row for row in warmup)
    assert rows[-1]["episodes"] >= warmup[-1]["episodes"] and rows[-1]["env_steps"] <= run.final_eval["env_steps"]


def test_an_off_policy_run_inside_its_warm_up_plots_and_reads_back(runs):
    """The Quickstart's case: SAC stopped inside its 10,000 random steps; no update ever ran."""
    run = surreal.Run.open(runs["sac"].dir)
    assert run.summary is not None and run.summary["updates"] == 0
    last, finished = run.metrics[-1], run.summary["env_steps"] // 50
    assert finished - 2 <= last["episodes"] <= finished, "every finished episode counted (each actor may be mid-one)"
    assert plot_run(run.dir).endswith("learning_curve.png")
    command = [sys.executable, "-m", "surreal", "plot", str(run.dir)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
