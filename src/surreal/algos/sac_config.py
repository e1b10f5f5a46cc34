"""SAC's hyperparameters: torch-free, so the replay and ps roles read them too (the registry imports this file).

Soft Actor-Critic (Haarnoja et al. 2018) with CrossQ's switches (Bhatt et al. 2024) and the network options of
the recent recipes; the defaults and their sources are in conf/algo/sac.yaml, `preset=crossq` turns CrossQ on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from surreal.config.schema import ExperimentConfig, OffPolicyConfig

NORMS = ("none", "layer", "batch_renorm")  # what may follow a hidden layer (sac.py says where each goes)


@dataclass
class SACConfig(OffPolicyConfig):
    """SAC: twin soft Q critics, a tanh-squashed Gaussian actor, a learned entropy temperature."""

    module: ClassVar[str] = "surreal.algos.sac"

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
    n_step: int = 1  # n-step returns, computed by the actors (truncation bootstraps, termination does not)
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

    def max_env_steps_per_unit(self, max_episode_steps: int | None) -> int | None:
        del max_episode_steps
        return self.n_step  # an actor's first chunk: T steps make T - n + 1 n-step transitions

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = super().problems(cfg)
        out += [
            f"algo.{k} must be > 0 (got {v})"
            for k, v in (
                ("actor_lr", self.actor_lr),
                ("critic_lr", self.critic_lr),
                ("alpha_lr", self.alpha_lr),
                ("alpha_init", self.alpha_init),
                ("n_step", self.n_step),
                ("policy_delay", self.policy_delay),
                ("target_update_period", self.target_update_period),
            )
            if not v > 0
        ]
        out += [
            f"algo.{k} must be >= 0 (got {v})"
            for k, v in (("renorm_warmup", self.renorm_warmup), ("renorm_d_max", self.renorm_d_max))
            if not v >= 0
        ]
        for key, value in (("gamma", self.gamma), ("tau", self.tau)):
            if not 0 < value <= 1:
                out.append(f"algo.{key} must be in (0, 1] (got {value})")
        for key, value in (("adam_beta1", self.adam_beta1), ("renorm_momentum", self.renorm_momentum)):
            if not 0 <= value < 1:
                out.append(f"algo.{key} must be in [0, 1) (got {value})")
        if not self.renorm_r_max >= 1:
            out.append(f"algo.renorm_r_max must be >= 1 (got {self.renorm_r_max})")
        for key, sizes in (("hidden_sizes", self.hidden_sizes), ("critic_hidden_sizes", self.critic_hidden_sizes)):
            if not sizes or any(h <= 0 for h in sizes):
                out.append(f"algo.{key} must be a non-empty list of positive sizes (got {sizes})")
        for key, norm in (("actor_norm", self.actor_norm), ("critic_norm", self.critic_norm)):
            if norm not in NORMS:
                out.append(f"algo.{key} must be one of {', '.join(NORMS)} (got {norm!r})")
        if not self.log_std_min < self.log_std_max:
            out.append(f"algo.log_std_min ({self.log_std_min}) must be < algo.log_std_max ({self.log_std_max})")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            out.append(f"algo.max_grad_norm must be > 0 or null (got {self.max_grad_norm})")
        if self.joint_forward and self.target_network:
            out.append("algo.joint_forward=true takes Q(s', a') from the critic itself: set algo.target_network=false")
        if cfg.actor.chunk_steps < self.n_step:
            out.append(f"actor.chunk_steps ({cfg.actor.chunk_steps}) must be >= algo.n_step ({self.n_step})")
        return out

    def replica_problems(self, replicas: int) -> list[str]:
        """Batch renormalization normalizes by the batch's statistics: a rank sees only its share, so the ranks'
        networks would drift apart (a synchronized norm is not built)."""
        out = super().replica_problems(replicas)
        for key, norm in (("actor_norm", self.actor_norm), ("critic_norm", self.critic_norm)):
            if norm == "batch_renorm":
                out.append(f"learner.replicas={replicas} does not support algo.{key}=batch_renorm (CrossQ)")
        return out
