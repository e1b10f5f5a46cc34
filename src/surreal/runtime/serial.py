"""Serial mode (after Sample Factory's): actor and learner in one process, no sockets.

Exactly the data path of the distributed run — the same RolloutCollector, the same learner update, the
same parameter blob loaded into the policy — minus the transport, so algorithm behaviour can be tested
quickly and deterministically."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from surreal.algos import get_algorithm
from surreal.config.schema import PPOConfig
from surreal.envs import make_vec_env
from surreal.runtime.rollout import RolloutCollector, evaluate


def train_serial(
    env_id: str,
    cfg: PPOConfig,
    total_env_steps: int,
    num_envs: int,
    chunk_steps: int,
    eval_episodes: int = 10,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, float]:
    algo = get_algorithm(cfg.name)
    envs = make_vec_env(env_id, num_envs, cfg.seed, env_kwargs)
    policy = algo.make_policy(envs.single_observation_space, envs.single_action_space, cfg, 0)
    learner = algo.make_learner(envs.single_observation_space, envs.single_action_space, cfg, torch.device("cpu"))
    policy.load_params(learner.params())
    collector = RolloutCollector(envs, policy, chunk_steps, actor_index=0)
    env_steps, version, recent = 0, 0, []
    while env_steps < total_env_steps:
        chunks, transitions = [], 0
        while transitions < cfg.batch_size:
            chunk = collector.collect(version)
            chunks.append(chunk)
            transitions += chunk.env_steps
            recent = (recent + chunk.episode_returns)[-20:]
        env_steps += transitions
        learner.update(chunks, progress=min(1.0, env_steps / total_env_steps))
        version += 1
        policy.load_params(learner.params())
    envs.close()
    returns = evaluate(env_id, policy, eval_episodes, cfg.seed + 1_000_003, env_kwargs)
    return {
        "env_steps": env_steps,
        "updates": version,
        "train_return_mean": float(np.mean(recent)) if recent else float("nan"),
        "eval_return_mean": float(np.mean(returns)),
    }
