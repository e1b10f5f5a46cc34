"""SAC's actor side: a sample of pi(.|s) with its own noise stream per actor; evaluation takes the mean action. On
images the actor is DrQ's (`EncodedActor`), which takes the uint8 images as they are."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from surreal.algos.offpolicy import OffPolicyPolicy
from surreal.algos.sac.config import SACConfig
from surreal.algos.sac.nets import EncodedActor, MeanAction, SquashedGaussianActor, make_actor
from surreal.spaces import check_spaces


class SACPolicy(OffPolicyPolicy):
    """What an actor runs: a sample of pi(.|s), its own noise stream per actor. Evaluation takes the mean action."""

    cfg: SACConfig
    actor: SquashedGaussianActor | EncodedActor

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: SACConfig, actor_index: int, num_actors: int = 1
    ) -> None:
        del num_actors  # every actor samples from pi with its own noise stream
        check_spaces(cfg, obs_space, act_space)
        super().__init__(cfg, make_actor(obs_space, act_space, cfg), act_space, actor_index)
        self.mean_action = MeanAction(self.actor)

    def explore(self, obs: torch.Tensor) -> np.ndarray:
        noise = torch.from_numpy(self.rng.standard_normal((len(obs), len(self.low))).astype(np.float32))
        return self.actor(obs, noise)[0].numpy()

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described["network"]["norm"] = self.cfg.actor_norm
        if isinstance(self.actor, EncodedActor):  # DrQ: the encoder on the uint8 images, the MLP on its features
            network = described["network"]
            network.update(kind="cnn", encoder=self.cfg.encoder, features=self.actor.encoder.features)
        return described
