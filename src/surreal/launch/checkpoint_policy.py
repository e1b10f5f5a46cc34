"""A run's deterministic policy from its newest learner checkpoint: what `surreal.Run.policy()` returns when the run
folder holds no policy artifact.

It is the policy the final evaluation scored (roles/evaluation.py `finish` builds it the same way: the algorithm's
policy with the learner's published parameters, observation-normalizer statistics included), rebuilt from the
run's config.yaml and the newest checkpoint that loads. Checkpoints load with `torch.load(weights_only=True)`:
no pickled code runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from surreal.algos import get_algorithm
from surreal.algos.interface import ActorPolicy
from surreal.config import ConfigError, ExperimentConfig, algo_config, read_config
from surreal.envs import make_env
from surreal.runtime.checkpoint import PATTERN


@dataclass
class CheckpointPolicy:
    """`policy(obs)`: the deterministic action for one observation (or a batch, first axis) of the run's env."""

    policy: ActorPolicy
    observation_space: Any
    action_space: Any
    config: ExperimentConfig
    checkpoint: Path
    env_steps: int

    @classmethod
    def load(cls, run_dir: str | Path) -> CheckpointPolicy:
        run_dir = Path(run_dir)
        cfg = read_config(run_dir / "config.yaml")
        probe = make_env(cfg.env.id, cfg.seed, cfg.env.kwargs)
        obs_space, act_space = probe.observation_space, probe.action_space
        probe.close()
        algo = get_algorithm(cfg.algo.name)
        folder = run_dir / "checkpoints"
        paths = sorted(p for p in folder.iterdir() if PATTERN.match(p.name)) if folder.is_dir() else []
        for path in reversed(paths):
            learner = algo.make_learner(obs_space, act_space, algo_config(cfg), torch.device("cpu"))
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
                learner.load_state_dict(state["learner"])
            except Exception:  # noqa: BLE001 - a damaged checkpoint (the learner sets it aside too): the one before
                continue
            policy = algo.make_policy(obs_space, act_space, algo_config(cfg), 0, 1)
            policy.load_params(learner.params())
            return cls(policy, obs_space, act_space, cfg, path, int(state["counters"]["env_steps"]))
        raise ConfigError(f"{run_dir}: no checkpoint loads, so there is no policy yet")

    def __call__(self, obs: Any) -> np.ndarray:
        obs = np.asarray(obs, np.float32)
        single = obs.shape == self.observation_space.shape
        actions = self.policy.act_deterministic(obs[None] if single else obs)
        return np.asarray(actions[0] if single else actions)

    act = __call__
