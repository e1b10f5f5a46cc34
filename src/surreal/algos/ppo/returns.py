"""PPO's return computations over time-major [T, K] batches: GAE(lambda) for the advantages, and the discounted
return that reward scaling divides by the running std of."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

Array = TypeVar("Array", np.ndarray, torch.Tensor)


def gae(
    rewards: Array,
    values: Array,
    next_values: Array,
    terminated: Array,
    truncated: Array,
    gamma: float,
    gae_lambda: float,
) -> Array:
    """Generalized advantage estimation over a time-major [T, K] batch (NumPy arrays or torch tensors).

    delta_t = r_t + gamma * V(s'_t) * (1 - terminated_t) - V(s_t): a truncated step still bootstraps from
    its final observation. The recursion stops at any episode end (terminated or truncated), and the
    batch's last step needs no carried advantage because its V(s'_T) is already in delta_T. One reverse
    scan over T serves all K columns at once."""
    advantages = rewards + gamma * next_values * ~terminated - values  # delta_t, turned into A_t in place
    decay = gamma * gae_lambda * ~(terminated | truncated)
    for t in reversed(range(len(rewards) - 1)):
        advantages[t] += decay[t] * advantages[t + 1]
    return advantages


def discounted_returns(rewards: torch.Tensor, done: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The discounted return of every step of a [T, K] batch, each column starting from zero and reset after each
    episode end; and what survives of a carry the column would start from instead (gamma^(t+1) until its first
    episode end), since the return is linear in that carry."""
    returns = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(len(rewards)):
        running = running * gamma + rewards[t]
        returns[t] = running
        running = running.masked_fill(done[t], 0.0)
    steps = torch.arange(1, len(rewards) + 1, device=rewards.device, dtype=torch.float64)
    no_end_before = (done.cumsum(0) - done.long()) == 0
    return returns, gamma ** steps[:, None] * no_end_before
