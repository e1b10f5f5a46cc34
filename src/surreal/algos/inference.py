"""The deterministic policy as one torch module: what `surreal.load_policy` runs and `surreal export` writes.

Each algorithm's policy class has `inference_module()`: observations (a float batch, [B, obs_dim]) in,
the actions its `act_deterministic` returns out, with the observation normalizer and the action squashing or
clipping inside. The pieces here compute what the NumPy code of the actors computes, operation for operation
(float64 normalization, the same clip), so for the torch-network algorithms the module's actions equal
`act_deterministic`'s bit for bit on the CPU (tests/test_policy_artifact_runs.py checks it on real runs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from surreal.algos.normalizer import RunningMeanStd

NORMALIZER_EPSILON = 1e-8  # RunningMeanStd.normalize's


class NormalizeObservations(nn.Module):
    """clip((obs - mean) / sqrt(var + 1e-8), -clip, clip) in float64, then float32: `RunningMeanStd.normalize`."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, rms: RunningMeanStd, clip: float) -> None:
        super().__init__()
        self.clip = float(clip)
        self.register_buffer("mean", torch.from_numpy(np.array(rms.mean, np.float64)))
        self.register_buffer("std", torch.from_numpy(np.sqrt(np.array(rms.var, np.float64) + NORMALIZER_EPSILON)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return ((obs.double() - self.mean) / self.std).clamp(-self.clip, self.clip).float()


class AsFloat32(nn.Module):
    """What an algorithm without a normalizer feeds its network: `obs.astype(np.float32)`."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.float()


class ClipActions(nn.Module):
    """`np.clip(actions, low, high)` with the action space's bounds (in their dtype, so the result's dtype is
    NumPy's too)."""

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("low", torch.from_numpy(np.array(low)))
        self.register_buffer("high", torch.from_numpy(np.array(high)))

    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.maximum(actions, self.low), self.high)


class ArgmaxActions(nn.Module):
    """A Discrete head's deterministic action: the index of the largest logit, shifted by the space's `start`."""

    def __init__(self, start: int) -> None:
        super().__init__()
        self.start = int(start)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1) + self.start


def action_head(act_space: spaces.Space[Any]) -> tuple[nn.Module, dict[str, object]]:
    """What turns a network's outputs into the env's actions, and how the artifact header states it: a Box's are
    clipped to its bounds, a Discrete's are the argmax (plus its `start`)."""
    if isinstance(act_space, spaces.Discrete):
        return ArgmaxActions(int(act_space.start)), {"type": "discrete", "select": "argmax"}
    assert isinstance(act_space, spaces.Box), act_space
    return ClipActions(act_space.low, act_space.high), {"type": "box", "squash": "none", "clip": True}


class DeterministicPolicy(nn.Module):
    """observations -> `preprocess` -> `network` -> `postprocess` -> actions."""

    def __init__(self, preprocess: nn.Module, network: nn.Module, postprocess: nn.Module | None = None) -> None:
        super().__init__()
        self.preprocess, self.network = preprocess, network
        self.postprocess = postprocess if postprocess is not None else nn.Identity()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.postprocess(self.network(self.preprocess(obs)))


class RecurrentDeterministicPolicy(nn.Module):
    """(observations, state) -> `preprocess` -> `rnn` -> `network` -> `postprocess` -> (actions, the next state): a
    recurrent policy's deterministic step, the state [B, L, H] travelling in and out (zeros at an episode's start)."""

    def __init__(self, preprocess: nn.Module, rnn: nn.Module, network: nn.Module, postprocess: nn.Module) -> None:
        super().__init__()
        self.preprocess, self.rnn, self.network, self.postprocess = preprocess, rnn, network, postprocess

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features, state = self.rnn(self.preprocess(obs), state)
        return self.postprocess(self.network(features)), state


def description(
    network: dict[str, Any], act_space: spaces.Space[Any], obs_norm: bool, obs_clip: float
) -> dict[str, Any]:
    """`describe()` of a policy with `action_head` and an `obs_norm` normalizer (PPO, ES): the network, action head
    and normalizer as the artifact header states them; the blob holds the statistics as `obs_norm/{mean,var,count}`."""
    normalizer = None
    if obs_norm:
        tensors = {"mean": "obs_norm/mean", "var": "obs_norm/var", "count": "obs_norm/count"}
        normalizer = {"tensors": tensors, "clip": float(obs_clip), "epsilon": NORMALIZER_EPSILON}
    return {"network": network, "action_head": action_head(act_space)[1], "normalizer": normalizer}
