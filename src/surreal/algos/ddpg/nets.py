"""DDPG's networks (CleanRL's ddpg_continuous_action): ReLU MLPs, and a deterministic actor squashed by tanh into the
action bounds. The critics are algos/stacked.py's `StackedMLP` (TD3's twins as one module)."""

from __future__ import annotations

import torch
from gymnasium import spaces
from torch import nn


def relu_mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for n_in, n_out in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


class DeterministicActor(nn.Module):
    """mu(s) = tanh(MLP(s)) * action_scale + action_bias: always inside the action bounds."""

    action_scale: torch.Tensor
    action_bias: torch.Tensor

    def __init__(self, obs_dim: int, act_space: spaces.Box, hidden_sizes: list[int]) -> None:
        super().__init__()
        self.net = relu_mlp([obs_dim, *hidden_sizes, int(act_space.shape[0])])
        high = torch.as_tensor(act_space.high, dtype=torch.float32)
        low = torch.as_tensor(act_space.low, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)) * self.action_scale + self.action_bias
