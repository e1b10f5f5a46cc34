"""SAC's hyperparameters, torch-free (the registry imports this file).

Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
https://arxiv.org/abs/1812.05905). Defaults are the paper's (Appendix D, Table 1) as Stable-Baselines3's SAC implements
them (https://github.com/DLR-RM/stable-baselines3/blob/master/stable_baselines3/sac/sac.py): 256-256 ReLU actor and
twin critics, Adam 3e-4 for actor, critics and temperature, tau 0.005 every step (robosuite's rlkit benchmark: every
5th), batch 256, one gradient step per env step, the temperature learned from 1.0 towards the target entropy -|A|,
log-std clamped to [-20, 2]. learning_starts 10,000 is RL Baselines3 Zoo's MuJoCo setting (hyperparams/sac.yml; SB3's
own default is 100). The switches reproduce CrossQ (Bhatt et al. 2024, https://arxiv.org/abs/1902.05605) and the
network options of the recent recipes: `preset=crossq` sets them.

From pixels (an image observation, channels-first uint8), SAC is DrQ (Kostrikov et al. 2020, "Image Augmentation Is
All You Need", https://arxiv.org/abs/2004.13649; DrQ-v2, Yarats et al. 2021, https://arxiv.org/abs/2107.09645): a
convolutional encoder (`encoder`, algos/encoders.py) shared by the actor and the critics and trained by the critics'
loss only, random shifts of `augment_pad` pixels on every image a step reads, and a target encoder under the target
critics. DrQ's own settings that differ from the state defaults are `preset=drq`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from surreal.config.encoders import ENCODERS
from surreal.config.encoders import encoder_widths as widths_of
from surreal.config.schema import ExperimentConfig, OffPolicyConfig

NORMS = ("none", "layer", "batch_renorm")  # what may follow a hidden layer (sac/learner.py says where each goes)


@dataclass
class SACConfig(OffPolicyConfig):
    """SAC: twin soft Q critics, a tanh-squashed Gaussian actor, a learned entropy temperature."""

    module: ClassVar[str] = "surreal.algos.sac.algorithm"
    # An image: DrQ's shared encoder (`encoder`) in front of the actor's and the critics' MLPs; a flat Box: the MLPs.
    observation_spaces: ClassVar[frozenset[str]] = frozenset({"box", "image"})

    name: str = "sac"
    batch_size: int = 256  # transitions per gradient step, sampled from replay
    learning_starts: int = 10_000
    actor_lr: float = 3e-4  # Adam step size of the actor
    critic_lr: float = 3e-4  # Adam step size of the critics
    alpha_lr: float = 3e-4  # Adam step size of the entropy temperature
    adam_beta1: float = 0.9  # CrossQ: 0.5
    gamma: float = 0.99  # discount factor
    tau: float = 0.005  # soft target update, every target_update_period critic steps
    target_update_period: int = 1  # critic steps between soft target updates
    target_network: bool = True  # CrossQ: false, Q(s', a') comes from the critic itself (no gradient)
    joint_forward: bool = False  # CrossQ: (s, a) and (s', a') through the critic as one batch
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # the actor's
    critic_hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # CrossQ: [2048, 2048]
    actor_norm: str = "none"  # none | layer | batch_renorm
    critic_norm: str = "none"  # none | layer | batch_renorm (CrossQ)
    renorm_momentum: float = 0.99  # batch renormalization: running statistics' decay
    renorm_warmup: int = 100_000  # forward passes of plain batch norm before r and d are clipped to r_max, d_max
    renorm_r_max: float = 3.0  # batch renormalization's clip of r (after the warm-up)
    renorm_d_max: float = 5.0  # batch renormalization's clip of d (after the warm-up)
    policy_delay: int = 1  # critic steps per actor and temperature step (CrossQ: 3)
    autotune_alpha: bool = True  # learn the temperature toward target_entropy (false: alpha_init throughout)
    alpha_init: float = 1.0  # the temperature's start (its value throughout when autotune_alpha is false)
    target_entropy: float | None = None  # None: -|A|, the number of action dimensions
    log_std_min: float = -20.0  # the lower clamp of the actor's log-std
    log_std_max: float = 2.0  # the upper clamp of the actor's log-std
    max_grad_norm: float | None = None  # gradient-norm clip of each network; null: none
    # Images (DrQ): the convolutional encoder (algos/encoders.py: nature, impala), trained by the critics' loss only
    encoder: str = "nature"
    # DrQ's output layer: the convolutions' values through a dense layer to this many features, layer norm and tanh,
    # in place of the encoder's own ReLU layer (0 keeps that: 512 for nature), whose units die under the critics' loss
    encoder_features: int = 50
    augment_pad: int = 4  # random shift: each image padded by this many pixels (edge repeated), cropped back; 0: none
    # The planes of one frame of a stacked image (3: RGB renders, env.kwargs.pixels): each frame travels and is stored
    # once; a count that does not divide the image's planes stores each plane as a frame
    frame_planes: int = 3

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = super().problems(cfg)
        out += self.breaking(
            "> 0", "actor_lr", "critic_lr", "alpha_lr", "alpha_init", "policy_delay", "target_update_period"
        )
        out += self.breaking(">= 0", "renorm_warmup", "renorm_d_max")
        out += self.breaking("in (0, 1]", "gamma", "tau")
        out += self.breaking("in [0, 1)", "adam_beta1", "renorm_momentum")
        out += self.breaking(">= 1", "renorm_r_max")
        out += self.bad_sizes("hidden_sizes", "critic_hidden_sizes")
        for key, norm in (("actor_norm", self.actor_norm), ("critic_norm", self.critic_norm)):
            if norm not in NORMS:
                out.append(f"algo.{key} must be one of {', '.join(NORMS)} (got {norm!r})")
        if not self.log_std_min < self.log_std_max:
            out.append(f"algo.log_std_min ({self.log_std_min}) must be < algo.log_std_max ({self.log_std_max})")
        out += self.breaking("> 0 or null", "max_grad_norm")
        if self.encoder not in ENCODERS:
            out.append(f"algo.encoder must be one of {', '.join(ENCODERS)} (got {self.encoder!r})")
        out += self.breaking(">= 0", "augment_pad", "encoder_features")
        out += self.breaking("> 0", "frame_planes")
        if self.joint_forward and self.target_network:
            out.append("algo.joint_forward=true takes Q(s', a') from the critic itself: set algo.target_network=false")
        return out

    def encoder_widths(self, shape: tuple[int, ...]) -> list[int]:
        """The widths of the encoder's dense layer for images of `shape` (C, H, W) (config/encoders.py; DrQ's output
        layer, `encoder_features`, when set)."""
        widths = widths_of(self.encoder, shape)
        return widths[:-1] + [self.encoder_features] if self.encoder_features else widths

    def replica_problems(self, replicas: int) -> list[str]:
        """Batch renormalization normalizes by the batch's statistics: a rank sees only its share, so the ranks'
        networks would drift apart (a synchronized norm is not built)."""
        out = super().replica_problems(replicas)
        for key, norm in (("actor_norm", self.actor_norm), ("critic_norm", self.critic_norm)):
            if norm == "batch_renorm":
                out.append(f"learner.replicas={replicas} does not support algo.{key}=batch_renorm (CrossQ)")
        return out
