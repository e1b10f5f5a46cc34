"""DDPG's actor side: mu(s) plus this actor's exploration noise, Gaussian or Ornstein-Uhlenbeck, its scale set by its
index (Ape-X gives each actor its own epsilon the same way)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from surreal.algos.ddpg.config import DDPGConfig
from surreal.algos.ddpg.nets import DeterministicActor
from surreal.algos.offpolicy import OffPolicyPolicy
from surreal.spaces import space_dims


def actor_noise_scale(cfg: DDPGConfig, actor_index: int, num_actors: int) -> float:
    """Actor i's exploration scale: geometric between exploration_noise / spread and * spread (Ape-X's
    per-actor epsilon, for continuous actions); every actor gets exploration_noise when spread is 1. Actors
    added beyond the configured count (an elastic fleet) take the ladder's rungs again from the bottom."""
    if num_actors <= 1:
        return cfg.exploration_noise
    rung = actor_index % num_actors
    return cfg.exploration_noise * cfg.noise_spread ** (2.0 * rung / (num_actors - 1) - 1.0)


class DDPGPolicy(OffPolicyPolicy):
    """What an actor runs: mu(s) plus this actor's Gaussian or Ornstein-Uhlenbeck noise, in units of the
    action half-range."""

    cfg: DDPGConfig

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: DDPGConfig, actor_index: int, num_actors: int = 1
    ) -> None:
        obs_dim, _ = space_dims(cfg, obs_space, act_space)
        actor = DeterministicActor(obs_dim, act_space, list(cfg.hidden_sizes)).eval()
        super().__init__(cfg, actor, act_space, actor_index)
        self.half_range = (self.high - self.low) / 2.0
        self.noise_scale = actor_noise_scale(cfg, actor_index, num_actors)
        self.ou_state: np.ndarray | None = None

    def _noise(self, shape: tuple[int, ...]) -> np.ndarray:
        white = self.rng.standard_normal(shape).astype(np.float32)
        if self.cfg.noise_type == "gaussian":
            return self.noise_scale * white
        if self.ou_state is None or self.ou_state.shape != shape:
            self.ou_state = np.zeros(shape, np.float32)
        dt = 1e-2  # the DDPG paper's OU process: theta 0.15, dt 0.01
        self.ou_state += self.cfg.ou_theta * -self.ou_state * dt + self.noise_scale * np.sqrt(dt) * white
        return self.ou_state.copy()

    def explore(self, obs: torch.Tensor) -> np.ndarray:
        mu = self.actor(obs).numpy()
        return np.clip(mu + self._noise(mu.shape) * self.half_range, self.low, self.high)

    def episode_done(self, done: np.ndarray) -> None:
        if self.ou_state is not None:
            self.ou_state[done] = 0.0

    def sampling_state(self) -> dict[str, Any]:
        state = super().sampling_state()
        if self.ou_state is not None:
            state["ou_state"] = self.ou_state.copy()
        return state

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        super().load_sampling_state(state)
        self.ou_state = np.array(state["ou_state"], np.float32) if "ou_state" in state else None
