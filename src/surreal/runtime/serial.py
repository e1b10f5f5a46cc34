"""Serial mode (after Sample Factory's): actor and learner in one process, no sockets.

Exactly the data path of the distributed run — the same RolloutCollector, the same learner update, the
same parameter blob loaded into the policy — minus the transport, so algorithm behaviour can be tested
quickly and deterministically."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from surreal.algos import get_algorithm
from surreal.config.schema import AlgoConfig
from surreal.envs import make_vec_env
from surreal.runtime.rollout import evaluate

RECENT_EPISODES = 20
EVAL_SEED_OFFSET = 1_000_003  # evaluation episodes start from seeds no training env used (as the learner role)


def train_serial(
    env_id: str,
    cfg: AlgoConfig,
    total_env_steps: int,
    num_envs: int,
    chunk_steps: int,
    seed: int,
    device: str = "cpu",
    env_kwargs: dict[str, Any] | None = None,
    eval_episodes: int = 10,
) -> dict[str, float]:
    """Train until `total_env_steps`, then evaluate the deterministic policy.

    `seed` replaces `cfg.seed`, as the experiment loader does, so one number fixes the environments, the
    network initialization, the actor's sampling and the minibatch order. Every update uses chunks of the
    current parameters only (lock-step), the on-policy limit of the distributed run; on-policy algorithms
    only (PPO, ES)."""
    if not type(cfg).on_policy:
        raise ValueError(f"serial mode runs on-policy algorithms; {cfg.name} needs the replay role")
    cfg = dataclasses.replace(cfg, seed=seed)
    algo = get_algorithm(cfg.name)
    envs = make_vec_env(env_id, num_envs, seed, env_kwargs)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    policy = algo.make_policy(obs_space, act_space, cfg, 0)
    learner = algo.make_learner(obs_space, act_space, cfg, torch.device(device))
    policy.load_params(learner.params())
    collector = algo.make_collector(envs, policy, cfg, 0, chunk_steps)
    env_steps, used, version = 0, 0, 0
    recent: list[float] = []
    try:
        while env_steps < total_env_steps:
            chunks, transitions = [], 0
            while transitions < cfg.batch_size:
                chunk = collector.collect(version)
                chunks.append(chunk)
                transitions += chunk.size
                env_steps += chunk.env_steps
                recent = (recent + chunk.episode_returns)[-RECENT_EPISODES:]
            # CleanRL's annealing: the fraction done *before* this batch, so the first update uses the full
            # learning rate and the last one a small but non-zero one.
            learner.update(chunks, progress=min(1.0, used / total_env_steps))
            used = env_steps
            version += 1
            policy.load_params(learner.params())
    finally:
        envs.close()
    returns = evaluate(env_id, policy, eval_episodes, seed + EVAL_SEED_OFFSET, env_kwargs)
    return {
        "env_steps": env_steps,
        "updates": version,
        "train_return_mean": float(np.mean(recent)) if recent else float("nan"),
        "eval_return_mean": float(np.mean(returns)),
    }
