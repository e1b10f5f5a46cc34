"""What `Policy.act` costs on one observation against calling the torch network directly, in the same run.

    python -m bench.policy_act [--rounds 60] [--calls 500] [--out bench/results/policy-act.2core.json]

The policy: PPO's 64-64 tanh MLP for HalfCheetah-v5 (obs 17-D, act 6-D), its observation normalizer fed real
observations, written as the learner writes its artifact and read back with `surreal.load_policy`. Each call acts
on one float64 observation, as `env.step(policy.act(obs))` does. Variants, timed in alternating rounds so they
share the machine's load, each leading in turn (the figure is the median round's microseconds per call; the fastest
round's is reported too, the least disturbed by other processes on a shared box):

- module: the actor network (`nn.Sequential` of Linear and Tanh, no weight requiring a gradient) called on a ready
  float32 [1, 17] tensor: the floor, with no normalizer, no clip, no NumPy conversions, no autograd context.
- policy_act: `Policy.act(obs)`: NumPy in and out, the normalizer and the action clip inside (a traced module).
- eager_inference_module: `Policy.module()` called eagerly on the [1, 17] float64 tensor (the same computation
  as policy_act, op by op in Python): why the policy traces it.
- algo_act_deterministic: the algorithm's own `PPOPolicy.act_deterministic` (NumPy normalizer, torch network,
  NumPy clip), what actors and the learner's evaluation call.

`overhead` is policy_act / module - 1 and `overhead_us` the difference; the issue's targets are <= 20 % and
<= 100 us. The last line printed is one JSON object (also written to --out).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from gymnasium.spaces import Box

from bench._runs import emit, machine_at_end
from surreal.algos.ppo import algorithm as ppo
from surreal.algos.ppo.config import PPOConfig
from surreal.algos.ppo.nets import ActorCritic
from surreal.config import algo_config, load_config
from surreal.envs import make_env
from surreal.policy.artifact import FILE_NAME
from surreal.policy.build import PolicyRecorder
from surreal.policy.load import load_policy

TARGET_OVERHEAD, TARGET_OVERHEAD_US = 0.20, 100.0


def observations(env_id: str, n: int, seed: int = 0) -> np.ndarray:
    """n observations of env_id's episodes under uniformly random actions (the tests' real observations too)."""
    env = make_env(env_id, seed)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    seen: list[np.ndarray] = []
    while len(seen) < n:
        seen.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.array(seen)


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--calls", type=int, default=500, help="calls per variant per round")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)

    cfg = load_config(["algo=ppo", "env=HalfCheetah-v5", "algo.hidden_sizes=[64,64]", "device=cpu"], tasks=False)
    env = make_env(cfg.env.id, 0)
    spaces = cast(Box, env.observation_space), cast(Box, env.action_space)
    env.close()
    ppo_cfg = cast(PPOConfig, algo_config(cfg))
    learner = ppo.make_learner(*spaces, ppo_cfg, torch.device("cpu"))
    seen = observations(cfg.env.id, 2000)
    assert learner.obs_rms is not None, "flat observations have a normalizer"
    learner.obs_rms.update(seen)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / FILE_NAME
        PolicyRecorder(cfg, *spaces, "bench").save(path, learner.params(), version=1, env_steps=2000, updates=1)
        policy = load_policy(path)

    reference = ppo.make_policy(*spaces, ppo_cfg, 0, 1)
    reference.load_params(learner.params())
    network = cast(ActorCritic, reference.model).actor_mean  # HalfCheetah: a Box head
    eager = policy.module()
    obs = seen[1234]
    x32 = torch.from_numpy(obs.astype(np.float32))[None]
    x64 = torch.from_numpy(obs)[None]
    assert np.array_equal(policy.act(obs), reference.act_deterministic(obs[None])[0])

    variants: dict[str, Callable[[], Any]] = {  # no weight requires a gradient: no torch.no_grad() needed
        "module": lambda: network(x32),
        "policy_act": lambda: policy.act(obs),
        "eager_inference_module": lambda: eager(x64),
        "algo_act_deterministic": lambda: reference.act_deterministic(obs[None]),
    }
    for fn in variants.values():  # warm-up: the traced module's first calls profile
        per_call_us(fn, args.calls)
    rounds: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for i in range(args.rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:  # each variant leads in turn
            rounds[name].append(per_call_us(variants[name], args.calls))
    us = {name: round(statistics.median(times), 2) for name, times in rounds.items()}
    fastest = {name: round(min(times), 2) for name, times in rounds.items()}
    overhead = us["policy_act"] / us["module"] - 1
    overhead_us = us["policy_act"] - us["module"]
    emit(
        {
            "bench": "policy_act",
            "machine": machine_at_end(),
            "torch": torch.__version__,
            "torch_threads": 1,
            "policy": "ppo 64-64 tanh MLP, HalfCheetah-v5 (obs 17, act 6), observation normalizer on",
            "rounds": args.rounds,
            "calls_per_round": args.calls,
            "us_per_call": us,
            "us_per_call_fastest_round": fastest,
            "overhead_fastest_rounds": round(fastest["policy_act"] / fastest["module"] - 1, 4),
            "us_per_call_rounds": {name: [round(t, 2) for t in times] for name, times in rounds.items()},
            "overhead": round(overhead, 4),
            "overhead_us": round(overhead_us, 2),
            "target": {"overhead": TARGET_OVERHEAD, "overhead_us": TARGET_OVERHEAD_US},
            "meets_target": overhead <= TARGET_OVERHEAD and overhead_us <= TARGET_OVERHEAD_US,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
