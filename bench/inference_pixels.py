"""Central inference at pixel sizes: one batched forward pass of PPO's Nature CNN for N actors against each actor's
own, the policy code both run, on the same core in one run.

    nice -n 5 python -m bench.inference_pixels          # writes bench/results/inference-pixels.2core.json

`topology.inference=central` (roles/inference.py) runs `PPOPolicy.act` once over the concatenated observations of
every actor in a batch, where a per-actor actor runs it over its own 8. For an MLP the batch saves little (a
forward pass is microseconds, bench/inference.py), for a CNN it is the point of central inference (the issue's item
5). This measures that forward pass alone: `PPOPolicy` of the ppo-atari preset (the Nature CNN on `(4, 84, 84)`
uint8 stacks, Discrete(6) as Pong), `act` on N x 8 stacks at once (`central`) against N calls on 8 each
(`per_actor`), for N in `--actors`, in this process with `--threads` torch threads (1: an actor's core), the two
interleaved round by round, each first in every other round. N=1 is the control: the same work both ways, so its
ratio shows how far the box's noise reaches. The stacks are random uint8 (a forward pass costs the same whatever
the pixels).

Per env step: microseconds of forward pass each way and `central_speedup` (per-actor time / central time, each
round's own ratio, then their median). `request_bytes_per_env_step` is what a central actor would send each step for
its observations: every stack whole (4 frames), or each new frame once (the worker keeping the stacks: 1 frame).
Central inference does not take images yet (the launcher refuses them at start, docs/environments.md): this prices
what it would gain. Absolute times move with the box's load (noted); trust the same-round ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any, cast

import numpy as np

from bench._runs import RESULTS, emit, machine_at_end

OUT = RESULTS / "inference-pixels.2core.json"
ENVS = 8  # the ppo-atari preset's envs per actor
STACK = (4, 84, 84)
ACTIONS = 6  # Pong's minimal action set


def make_policy() -> Any:
    from gymnasium import spaces

    from surreal.algos.ppo.config import PPOConfig
    from surreal.algos.ppo.policy import PPOPolicy
    from surreal.config import algo_config, load_config

    cfg = cast(PPOConfig, algo_config(load_config(["preset=ppo-atari", "env=ALE/Pong-v5"])))
    return PPOPolicy(spaces.Box(0, 255, STACK, np.uint8), spaces.Discrete(ACTIONS), cfg, 0)


def seconds_per_env_step(policy: Any, obs: np.ndarray, actors: int, central: bool, repeats: int) -> float:
    """Forward-pass seconds per env step of `repeats` steps of `actors` actors' 8 envs: one `act` over all of them
    (`central`) or one per actor."""
    started = time.perf_counter()
    for _ in range(repeats):
        if central:
            policy.act(obs)
        else:
            for a in range(actors):
                policy.act(obs[a * ENVS : (a + 1) * ENVS])
    return (time.perf_counter() - started) / (repeats * actors * ENVS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--env-steps", type=int, default=512, help="env steps per measurement (per configuration)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    policy = make_policy()
    rng = np.random.default_rng(0)
    obs = {n: rng.integers(0, 256, (n * ENVS, *STACK), np.uint8) for n in args.actors}
    for n in args.actors:  # warm-up: first allocations of every batch size
        seconds_per_env_step(policy, obs[n], n, True, 2)
        seconds_per_env_step(policy, obs[n], n, False, 2)
    taken: dict[str, dict[str, list[float]]] = {str(n): {"per_actor": [], "central": []} for n in args.actors}
    loads = []
    for r in range(args.rounds):
        for n in args.actors:
            repeats = max(1, args.env_steps // (n * ENVS))
            for way in ("per_actor", "central") if r % 2 == 0 else ("central", "per_actor"):  # neither always first
                taken[str(n)][way].append(seconds_per_env_step(policy, obs[n], n, way == "central", repeats))
            got = taken[str(n)]
            print(
                f"round {r + 1}, {n} actors: per actor {got['per_actor'][-1] * 1e6:.0f} us, central "
                f"{got['central'][-1] * 1e6:.0f} us an env step",
                flush=True,
            )
        loads.append(round(os.getloadavg()[0], 1))
    points = {}
    for n, got in taken.items():
        ratios = [p / c for p, c in zip(got["per_actor"], got["central"], strict=True)]
        points[n] = {
            "batch_envs": int(n) * ENVS,
            "per_actor_us_per_env_step": round(statistics.median(got["per_actor"]) * 1e6, 1),
            "central_us_per_env_step": round(statistics.median(got["central"]) * 1e6, 1),
            "central_speedup": round(statistics.median(ratios), 3),
            "central_speedup_rounds": [round(x, 3) for x in ratios],
        }
    frame = STACK[1] * STACK[2]
    emit(
        {
            "bench": "inference_pixels",
            "machine": machine_at_end(),
            "load_average_after_each_round": loads,
            "shared_box": "other work ran on the same cores: absolute times move with it; trust the same-round ratios",
            "network": "PPO, ppo-atari preset: Nature CNN on (4, 84, 84) uint8, Discrete(6)",
            "torch": torch.__version__,
            "threads": args.threads,
            "envs_per_actor": ENVS,
            "rounds": args.rounds,
            "points": points,
            "request_bytes_per_env_step": {"stacks": STACK[0] * frame, "each_frame_once": frame},
        },
        args.out,
    )


if __name__ == "__main__":
    main()
