"""SAC's actor network: a Gaussian squashed by tanh into the action bounds, its log-probability corrected for the
squashing (Stable-Baselines3's), and its mean action. Its MLP and the critics are algos/stacked.py's `StackedMLP`,
with the norms of the recent recipes (CrossQ's batch renormalization, layer norm). On images the actor is DrQ's:
the shared convolutional encoder in front (`EncodedActor`), and `random_shift` is DrQ's augmentation."""

from __future__ import annotations

import math

import torch
from gymnasium import spaces
from torch import nn

from surreal.algos.encoders import Encoder, make_encoder
from surreal.algos.sac.config import SACConfig
from surreal.algos.stacked import StackedMLP
from surreal.spaces import is_channels_first


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

    def __init__(self, actor: SquashedGaussianActor | EncodedActor) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(obs, None)[0]


class EncodedActor(nn.Module):
    """DrQ's actor: the shared convolutional encoder, then the squashed Gaussian on its features. What the actors and
    the artifact hold (both parts' weights travel as the actor's); the learner trains the encoder through the
    critics' loss only, so its actor loss calls `head` on detached features instead of this."""

    def __init__(self, encoder: Encoder, head: SquashedGaussianActor) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head

    @property
    def net(self) -> StackedMLP:
        """The head's MLP (whose running statistics a learner step commits)."""
        return self.head.net

    def forward(
        self, obs: torch.Tensor, noise: torch.Tensor | None, train: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head(self.encoder(obs), noise, train)


def make_actor(obs_space: spaces.Box, act_space: spaces.Box, cfg: SACConfig) -> SquashedGaussianActor | EncodedActor:
    """The actor for these observations: on images (channels-first uint8) DrQ's encoder in front (`EncodedActor`),
    else the squashed Gaussian on the vector."""
    if not is_channels_first(obs_space):
        return SquashedGaussianActor(int(obs_space.shape[0]), act_space, cfg)
    encoder = make_encoder(cfg.encoder, tuple(obs_space.shape))
    if cfg.encoder_features:
        encoder = drq_output(encoder, cfg.encoder_features)
    return EncodedActor(encoder, SquashedGaussianActor(encoder.features, act_space, cfg))


def drq_output(encoder: Encoder, features: int) -> Encoder:
    """`encoder` with its last dense layer and ReLU replaced by DrQ's output (Kostrikov et al. 2020, after SAC-AE,
    Yarats et al. 2019): a dense layer to `features`, layer norm, tanh. Bounded, normalized features, none of which
    can die: under the critics' loss the Nature CNN's 512 ReLUs went silent (391 of 512 zero on every state of an
    InvertedPendulum run after 5.5 k updates, 39 at the start), and the critics and the actor were left with the
    rest."""
    *convolutions, dense, _ = encoder.network
    assert isinstance(dense, nn.Linear)
    output = nn.Linear(dense.in_features, features)
    nn.init.orthogonal_(output.weight)
    nn.init.zeros_(output.bias)
    encoder.network = nn.Sequential(*convolutions, output, nn.LayerNorm(features), nn.Tanh())
    encoder.features = features
    return encoder


def random_shift(images: torch.Tensor, shifts: torch.Tensor, pad: int) -> torch.Tensor:
    """DrQ's augmentation: each image [B, C, H, W] padded by `pad` pixels on every side (edges repeated) and cropped
    back to H x W at offset `shifts` [B, 2] (rows, columns, each in [0, 2 pad]); float32 out, values as they came
    (0..255: the encoder divides). One gather, so it runs the same on any device."""
    if pad == 0:
        return images.float()
    batch, _, height, width = images.shape
    padded = nn.functional.pad(images.float(), (pad, pad, pad, pad), mode="replicate")
    rows = (shifts[:, 0, None] + torch.arange(height, device=images.device))[:, None, :, None]
    cols = (shifts[:, 1, None] + torch.arange(width, device=images.device))[:, None, None, :]
    index = torch.arange(batch, device=images.device)[:, None, None, None]
    channels = torch.arange(images.shape[1], device=images.device)[None, :, None, None]
    return padded[index, channels, rows, cols]
