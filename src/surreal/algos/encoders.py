"""Convolutional encoders for image observations: uint8 (C, H, W) planes in, a feature vector out.

Observations travel as uint8 from the env to here (docs/environments.md, Pixel observations): an encoder divides
them by 255 on whatever device it runs, so a batch crosses to a GPU as a quarter of the float32 bytes. Both take any
leading dimensions ([..., C, H, W] -> [..., features]), so a [T, K] batch of stacks or a minibatch goes through as
it is.

- `NatureCNN` (`algo.encoder=nature`, the default): Mnih et al. 2015, "Human-level control through deep
  reinforcement learning" (https://www.nature.com/articles/nature14236): three convolutions (32 8x8 stride 4, 64 4x4
  stride 2, 64 3x3 stride 1) and a 512-unit layer, ReLUs, orthogonal init with gain sqrt(2), as CleanRL's
  ppo_atari.py (https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo_atari.py) builds it.
- `ImpalaCNN` (`algo.encoder=impala`): Espeholt et al. 2018, "IMPALA" (https://arxiv.org/abs/1802.01561), the
  15-layer residual network: three stages of (16, 32, 32) channels, each a 3x3 convolution, a 3x3 stride-2 max pool
  and two residual blocks of two 3x3 convolutions, then a 256-unit layer; as CleanRL's ppo_procgen.py
  (https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo_procgen.py) and Sample Factory's `impala` encoder
  build it (PyTorch's default init for the convolutions, as theirs).

`channels_last` (the learner sets it on a GPU: algos/ppo/learner.py) lays the batch out NHWC, the layout cuDNN's
convolutions run fastest in; the weights are converted with the module (`to(memory_format=...)`). The numbers are
the same either way, to float rounding.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from surreal.algos.ppo.config import ENCODERS  # `algo.encoder`'s names, and the features each gives its heads


def _orthogonal(layer: nn.Conv2d | nn.Linear, gain: float = float(np.sqrt(2))) -> nn.Conv2d | nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    assert layer.bias is not None
    nn.init.zeros_(layer.bias)
    return layer


class Encoder(nn.Module):
    """uint8 images [..., C, H, W] -> float32 features [..., features]; a subclass builds `network` for one image
    [N, C, H, W] (its convolutions, the flattening and the dense layer)."""

    network: nn.Sequential

    def __init__(self, features: int) -> None:
        super().__init__()
        self.features = features
        self.channels_last = False

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        lead = images.shape[:-3]
        x = images.reshape(-1, *images.shape[-3:]).float() / 255.0
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.network(x).reshape(*lead, self.features)

    def flat_size(self, convolutions: nn.Module, shape: tuple[int, ...]) -> int:
        """The number of values `convolutions` make of one image of `shape`."""
        with torch.no_grad():
            return int(convolutions(torch.zeros((1, *shape))).numel())


class NatureCNN(Encoder):
    """Mnih et al. 2015's network (module docstring); 3136 values into the dense layer for 84x84."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__(ENCODERS["nature"])
        convolutions = nn.Sequential(
            _orthogonal(nn.Conv2d(shape[0], 32, 8, stride=4)),
            nn.ReLU(),
            _orthogonal(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            _orthogonal(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
        )
        dense = _orthogonal(nn.Linear(self.flat_size(convolutions, shape), self.features))
        self.network = nn.Sequential(*convolutions, dense, nn.ReLU())


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), 3x3 convolutions that keep the channels and the size."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ConvSequence(nn.Module):
    """One IMPALA stage: a 3x3 convolution to `channels`, a 3x3 stride-2 max pool (halving the size, rounded up),
    two residual blocks."""

    def __init__(self, in_channels: int, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.res_block0, self.res_block1 = ResidualBlock(channels), ResidualBlock(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res_block1(self.res_block0(self.pool(self.conv(x))))


class ImpalaCNN(Encoder):
    """Espeholt et al. 2018's 15-layer residual network (module docstring); 32 x 11 x 11 values into the dense layer
    for 84x84."""

    STAGES = (16, 32, 32)

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__(ENCODERS["impala"])
        stages: list[nn.Module] = []
        channels = shape[0]
        for out in self.STAGES:
            stages.append(ConvSequence(channels, out))
            channels = out
        convolutions = nn.Sequential(*stages, nn.Flatten(), nn.ReLU())
        dense = nn.Linear(self.flat_size(convolutions, shape), self.features)
        self.network = nn.Sequential(*convolutions, dense, nn.ReLU())


def make_encoder(kind: str, shape: tuple[int, ...]) -> Encoder:
    """The encoder `algo.encoder` names, for images of `shape` (C, H, W); ValueError, one line, for another name or
    for images its convolutions do not fit."""
    if kind not in ("nature", "impala"):
        raise ValueError(f"algo.encoder must be one of {', '.join(ENCODERS)} (got {kind!r})")
    try:
        return NatureCNN(shape) if kind == "nature" else ImpalaCNN(shape)
    except RuntimeError as exc:  # a convolution larger than the image
        raise ValueError(f"algo.encoder={kind} cannot take images of {shape}: {exc}") from None
