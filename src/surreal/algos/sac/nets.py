"""SAC's actor network: a Gaussian squashed by tanh into the action bounds, its log-probability corrected for the
squashing (Stable-Baselines3's), and its mean action. Its MLP and the critics are algos/stacked.py's `StackedMLP`,
with the norms of the recent recipes (CrossQ's batch renormalization, layer norm)."""

from __future__ import annotations

import math

import torch
from gymnasium import spaces
from torch import nn

from surreal.algos.sac.config import SACConfig
from surreal.algos.stacked import StackedMLP


class SquashedGaussianActor(nn.Module):
    """a = tanh(mean + std * noise) * action_scale + action_bias, with log pi(a|s) in the [-1, 1] space."""

    action_scale: torch.Tensor
    action_bias: torch.Tensor

    def __init__(self, obs_dim: int, act_space: spaces.Box, cfg: SACConfig) -> None:
        super().__init__()
        act_dim = int(act_space.shape[0])
        self.net = StackedMLP([obs_dim, *cfg.hidden_sizes, 2 * act_dim], 1, cfg.actor_norm, cfg)
        self.log_std_min, self.log_std_max = cfg.log_std_min, cfg.log_std_max
        high = torch.as_tensor(act_space.high, dtype=torch.float32)
        low = torch.as_tensor(act_space.low, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(
        self, obs: torch.Tensor, noise: torch.Tensor | None, train: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions, log-probabilities); `noise` None: the mean action (evaluation), log-probability NaN-free
        but meaningless."""
        mean, log_std = self.net(obs, train)[0].chunk(2, -1)
        log_std = log_std.clamp(self.log_std_min, self.log_std_max)
        if noise is None:
            noise = torch.zeros_like(mean)
        squashed = torch.tanh(mean + log_std.exp() * noise)
        gaussian = -0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
        log_prob = (gaussian - torch.log(1 - squashed.pow(2) + 1e-6)).sum(-1)
        return squashed * self.action_scale + self.action_bias, log_prob


class MeanAction(nn.Module):
    """The squashed Gaussian actor's deterministic action (`forward` without noise, the evaluation mode)."""

    def __init__(self, actor: SquashedGaussianActor) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs, None)[0]
