"""PPO on image observations: a convolutional encoder (algos/encoders.py) in front of the model, CleanRL's ppo_atari
shape (the actor and the critic share the encoder, each a linear head on its features) and, with `algo.recurrent`,
its ppo_atari_lstm shape (the cell takes the encoder's features).

`EncodedModel` is a model's mode like nets.py's `FeedForward` and recurrent.py's `RecurrentActorCritic`, answering
the same calls with the encoder in front of whichever it wraps: the batch the learner prepares keeps the uint8
observations (a minibatch gathers images, not features), and each call encodes what it scores: the value pass over
the whole batch in slices under no_grad, each minibatch once with gradients (`per_step`), an actor's observations
once per step (`act_step`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from surreal.algos.encoders import Encoder
from surreal.algos.ppo.nets import Batch, FeedForward
from surreal.algos.ppo.recurrent import RecurrentActorCritic

VALUE_SLICE = 4096  # images encoded at once by the value pass, which bounds its activations whatever the batch


class EncodedModel(nn.Module):
    """`encoder` then `inner`, a feed-forward or recurrent model over the encoder's features (module docstring)."""

    def __init__(self, encoder: Encoder, inner: FeedForward | RecurrentActorCritic) -> None:
        super().__init__()
        self.encoder = encoder
        self.inner = inner

    @torch.no_grad()
    def encode_in_slices(self, images: torch.Tensor) -> torch.Tensor:
        """The features of images [..., C, H, W], `VALUE_SLICE` at a time."""
        flat = images.flatten(0, -4)
        features = torch.cat([self.encoder(part) for part in flat.split(VALUE_SLICE)])
        return features.reshape(*images.shape[:-3], self.encoder.features)

    # -- the mode (nets.py's FeedForward says what each call is) ---------------------------------------------

    def values(
        self, observations: torch.Tensor, done: torch.Tensor, per_env: Batch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inner.values(self.encode_in_slices(observations), done, per_env)

    def entries(self, batch: Batch, done: torch.Tensor, per_env: Batch) -> Batch:
        return self.inner.entries(batch, done, per_env)

    def minibatches(self, groups: list[Batch], minibatch_size: int) -> list[tuple[Batch, int]]:
        return self.inner.minibatches(groups, minibatch_size)

    def per_step(self, minibatch: Batch) -> tuple[FeedForward, Batch]:
        """The minibatch's images encoded once, with gradients, for both heads (or the cell before them)."""
        return self.inner.per_step({**minibatch, "obs": self.encoder(minibatch["obs"])})

    def act_step(self, x: torch.Tensor, state: Any) -> tuple[FeedForward, torch.Tensor, Any]:
        return self.inner.act_step(self.encoder(x), state)

    def deterministic(self, preprocess: nn.Module, postprocess: nn.Module) -> nn.Module:
        """The inner model's deterministic policy with a copy of the encoder in its preprocessing."""
        return self.inner.deterministic(nn.Sequential(preprocess, copy.deepcopy(self.encoder)), postprocess)
