"""DDPG's (and TD3's) hyperparameters, torch-free (the registry imports this file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from surreal.config.schema import ExperimentConfig, OffPolicyConfig


@dataclass
class DDPGConfig(OffPolicyConfig):
    """DDPG (Lillicrap et al. 2016, https://arxiv.org/abs/1509.02971) with TD3's fixes as switches (Fujimoto et al.
    2018, https://arxiv.org/abs/1802.09477). Defaults are CleanRL's ddpg_continuous_action.py
    (https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ddpg_continuous_action.py): 256-256 ReLU actor and
    critic, Adam 3e-4, tau 0.005, batch 256, 25k uniform-random warm-up steps, Gaussian exploration 0.1, the actor
    updated every 2nd critic step, one gradient step per env step. TD3 (CleanRL's td3_continuous_action.py) is
    twin_critics=true target_policy_noise=0.2."""

    module: ClassVar[str] = "surreal.algos.ddpg.algorithm"

    name: str = "ddpg"
    batch_size: int = 256  # transitions per gradient step, sampled from replay
    actor_lr: float = 3e-4  # Adam step size of the actor
    critic_lr: float = 3e-4  # Adam step size of the critic(s)
    gamma: float = 0.99  # discount factor
    tau: float = 0.005  # soft target update; used when target_update_period is 0
    target_update_period: int = 0  # > 0: hard copy of the targets every this many critic updates
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # ReLU MLP widths of actor and critic each
    exploration_noise: float = 0.1  # Gaussian (or OU sigma), in units of the action range's half-width
    noise_spread: float = 1.0  # actor i's scale: exploration_noise * spread**(2i/(N-1) - 1); 1 = all equal
    noise_type: str = "gaussian"  # gaussian | ou
    ou_theta: float = 0.15  # Ornstein-Uhlenbeck mean reversion (noise_type=ou)
    policy_delay: int = 2  # critic updates per actor (and target) update; CleanRL's policy_frequency
    twin_critics: bool = False  # TD3: min of two critics in the target
    target_policy_noise: float = 0.0  # TD3: 0.2 (smoothing noise on the target action); 0 = DDPG
    target_noise_clip: float = 0.5  # TD3: clip of the target smoothing noise, relative to the action half-range
    max_grad_norm: float | None = None  # gradient-norm clip of each network; null: none

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = super().problems(cfg)
        out += self.breaking("> 0", "actor_lr", "critic_lr", "policy_delay", "noise_spread")
        out += self.breaking(
            ">= 0", "exploration_noise", "target_update_period", "ou_theta", "target_policy_noise", "target_noise_clip"
        )
        out += self.breaking("in (0, 1]", "gamma", "tau")
        if self.noise_type not in ("gaussian", "ou"):
            out.append(f"algo.noise_type must be gaussian or ou (got {self.noise_type!r})")
        out += self.bad_sizes("hidden_sizes")
        out += self.breaking("> 0 or null", "max_grad_norm")
        return out
