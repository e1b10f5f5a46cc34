"""What a stopping learner needs between SIGTERM and SIGKILL: the rest of the update it is in, then a checkpoint.

    python -m bench.stop_grace [--out bench/results/stop_grace.2core.json]

For each configuration (PPO and DDPG with their HalfCheetah-v5 defaults, and PPO with the 65,536-sample batch
`bench.fleet` runs), on the CPU: one update on real experience (`roles/device.update_seconds`, the median of
`--repeats` after one untimed), and one checkpoint as the learner writes it on SIGTERM (the algorithm's
state, fsynced and renamed: `runtime/checkpoint.py`), its seconds and bytes. A learner's grace period must
hold the longest update plus the checkpoint (`launch/local.py` LEARNER_GRACE_S, the chart's
`learner.terminationGracePeriodSeconds`).

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bench._runs import emit, machine_at_end
from surreal.algos import get_algorithm
from surreal.config import algo_config, load_config
from surreal.envs import env_spaces
from surreal.roles.device import update_seconds
from surreal.runtime.checkpoint import CheckpointStore

CONFIGS = {
    "ppo": ["algo=ppo"],
    "ppo-batch65536": ["algo=ppo", "algo.batch_size=65536", "algo.minibatch_size=2048", "topology.envs_per_actor=8"],
    "ddpg": ["algo=ddpg"],
}


def measure(overrides: list[str], repeats: int) -> dict[str, Any]:
    cfg = load_config(["env=HalfCheetah-v5", "device=cpu", *overrides], tasks=False)
    update_s = update_seconds(cfg, torch.device("cpu"), repeats)
    learner = get_algorithm(cfg.algo.name).make_learner(*env_spaces(cfg), algo_config(cfg), torch.device("cpu"))
    with tempfile.TemporaryDirectory() as folder:
        store = CheckpointStore(Path(folder), 1)
        started = time.perf_counter()
        path = store.save(1, {"learner": learner.state_dict()})
        checkpoint_s = time.perf_counter() - started
        nbytes = path.stat().st_size
    return {"update_s": round(update_s, 4), "checkpoint_s": round(checkpoint_s, 4), "checkpoint_bytes": nbytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the learner's default (learner.torch_threads)
    results = {name: measure(overrides, args.repeats) for name, overrides in CONFIGS.items()}
    for name, result in results.items():
        print(f"{name}: one update {result['update_s']:.2f} s, checkpoint {result['checkpoint_s']:.3f} s", flush=True)
    emit({"bench": "stop_grace", "machine": machine_at_end(), "torch_threads": 1, **results}, args.out)


if __name__ == "__main__":
    main()
