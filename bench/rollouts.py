"""Recorded rollouts for simulated actors (bench.fleet): real environment steps, replayed without the simulator.

    python -m bench.rollouts [--env HalfCheetah-v5] [--steps 4096]

Steps one environment with the PPO policy as an actor starts it (its initial parameters, sampled actions, one
torch thread) and saves what an actor's chunks carry: `obs`, `next_obs` (the final observation on an episode's
last step), `actions` (before clipping), `logprobs`, `rewards`, `terminated`, `truncated`, each `[steps, ...]`, and
`steps_per_s`, the rate this box's core stepped env and policy together: a real actor's rate for that env.
Written to bench/data/<env>-rollout.npz (committed; about 0.5 MB for HalfCheetah-v5's 4,096 steps).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
DEFAULT_ENV = "HalfCheetah-v5"
FIELDS = ("obs", "next_obs", "actions", "logprobs", "rewards", "terminated", "truncated")  # an actor's chunk's


def rollout_path(env_id: str) -> Path:
    return DATA / f"{env_id.replace(':', '-')}-rollout.npz"


def ppo_actor(env_id: str, num_envs: int, seed: int) -> tuple[Any, Any]:
    """`num_envs` envs of `env_id` and the PPO policy as an actor starts it (its initial parameters, one torch
    thread): what this module records and bench.throughput and bench.capacity_costs step raw."""
    import torch

    from surreal.algos import get_algorithm
    from surreal.algos.ppo.config import PPOConfig
    from surreal.envs import make_vec_env

    torch.set_num_threads(1)
    envs = make_vec_env(env_id, num_envs, seed)
    spaces = envs.single_observation_space, envs.single_action_space
    return envs, get_algorithm("ppo").make_policy(*spaces, PPOConfig(seed=seed), 0)


def record(env_id: str, steps: int, seed: int = 0) -> Path:
    envs, policy = ppo_actor(env_id, 1, seed)
    out: dict[str, list[Any]] = {k: [] for k in FIELDS}
    obs, _ = envs.reset(seed=seed)
    started = time.perf_counter()
    for _ in range(steps):
        env_actions, rec = policy.act(obs)
        next_obs, rewards, terminated, truncated, infos = envs.step(env_actions)
        final = next_obs.copy()
        if terminated[0] or truncated[0]:
            final[0] = infos["final_obs"][0]
        out["obs"].append(obs[0])
        out["next_obs"].append(final[0])
        out["actions"].append(rec["actions"][0])
        out["logprobs"].append(rec["logprobs"][0])
        out["rewards"].append(np.float32(rewards[0]))
        out["terminated"].append(np.bool_(terminated[0]))
        out["truncated"].append(np.bool_(truncated[0]))
        obs = next_obs
    steps_per_s = steps / (time.perf_counter() - started)
    envs.close()
    arrays = {k: np.asarray(np.stack(v)) for k, v in out.items()}
    arrays = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in arrays.items()}
    path = rollout_path(env_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays, steps_per_s=np.float64(steps_per_s), env_id=np.str_(env_id))
    return path


def load(env_id: str = DEFAULT_ENV) -> dict[str, np.ndarray]:
    """The recorded rollout of `env_id` (recorded now if missing: that step needs torch and the env)."""
    path = rollout_path(env_id)
    if not path.exists():
        record(env_id, 4096)
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default=DEFAULT_ENV)
    parser.add_argument("--steps", type=int, default=4096)
    args = parser.parse_args()
    path = record(args.env, args.steps)
    data = load(args.env)
    ends = int((data["terminated"] | data["truncated"]).sum())
    print(f"{path}: {args.steps} steps, {ends} episode ends, {float(data['steps_per_s']):,.0f} steps/s on one core")


if __name__ == "__main__":
    main()
