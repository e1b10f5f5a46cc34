"""Soft Actor-Critic (Haarnoja et al. 2018), with CrossQ's switches (Bhatt et al. 2024), distributed.

Follows Stable-Baselines3's SAC: twin soft Q critics against the minimum of twin target critics, a Gaussian
actor squashed by tanh into the action bounds (its log-probability corrected for the squashing, measured in
the [-1, 1] space so that the target entropy -|A| means the same for every action range), and a temperature
alpha learned so the policy's entropy stays near that target. Uniform random actions until `learning_starts`.

CrossQ's switches (`preset=crossq`): batch renormalization in the critic (`critic_norm=batch_renorm`), no
target network (`target_network=false`: Q(s', a') comes from the critic itself, without gradient), and the
current and next state-actions through the critic as one batch (`joint_forward=true`), so the normalization
sees both distributions; with wider critics and Adam's beta1 0.5. Layer norm (`layer`) is the other option
of the recent recipes. Where a norm goes: layer norm before each hidden ReLU; batch renormalization on the
input and after each hidden ReLU (CrossQ's placement).

From pixels (DrQ, sac/config.py): the actor is `EncodedActor`, the shared encoder then the Gaussian head. A step
shifts its images at random (`random_shift`, offsets drawn up front with the noise), encodes the observations once
with gradients for the critics' loss, which alone trains the encoder (its parameters are in the critics' optimizer),
and the next observations once without, by the target encoder that follows the encoder as the target critics follow
the critics; the actor's loss takes the observations' features detached, so it moves only the head (DrQ-v2's reuse
of the critic's encoding). The critics and the losses are the state path's, on features.

The rest is DDPG's off-policy path (algos/offpolicy.py, sample_steps.py). Sockets and loops live in the roles; this
file is the math.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from surreal.algos.capture import load_optimizer_state
from surreal.algos.replica import ALONE, Replica
from surreal.algos.sac.config import SACConfig
from surreal.algos.sac.nets import EncodedActor, make_actor, random_shift
from surreal.algos.sample_steps import SampleStepper, replay_tensors
from surreal.algos.stacked import StackedMLP
from surreal.spaces import space_dims

STEP_STATS = (
    "critic_loss",
    "actor_loss",
    "alpha_loss",
    "alpha",
    "entropy",
    "q_mean",
    "td_error_mean",
    "nonfinite_skipped",
)  # a step's, in order
ACTOR_STATS = ("actor_loss", "alpha_loss", "entropy")  # NaN in a critic-only step: the last actor step's stand


class SACLearner(SampleStepper):
    """The SAC update, shaped as DDPG's (ddpg/learner.py's `DDPGLearner` says why): one call steps through a
    sample of several minibatches and reads the device once; both critics are one module; a non-finite
    step is skipped inside fused Adam; the exploration noise of every step is drawn up front, so each step
    is a fixed-shape function of its inputs that `compile=True` compiles and, on CUDA, replays as a graph.
    `compile=False` runs the same step eagerly: the reference the compiled path is tested against."""

    name, step_stats, actor_stats = "SAC", STEP_STATS, ACTOR_STATS

    def __init__(
        self,
        obs_space: spaces.Box,
        act_space: spaces.Box,
        cfg: SACConfig,
        device: torch.device,
        *,
        compile: bool = False,
        replica: Replica = ALONE,
    ) -> None:
        obs_dim, act_dim = space_dims(cfg, obs_space, act_space)
        super().__init__(cfg, device, compile, replica)
        self.act_dim = act_dim
        self.actor = make_actor(obs_space, act_space, cfg).to(device)
        # On images the losses see features: the head takes them, the critics' input is them.
        self.head = self.actor.head if isinstance(self.actor, EncodedActor) else self.actor
        self.encoder = self.actor.encoder if isinstance(self.actor, EncodedActor) else None
        obs_dim = obs_dim if self.encoder is None else self.encoder.features
        self.critics = StackedMLP([obs_dim + act_dim, *cfg.critic_hidden_sizes, 1], 2, cfg.critic_norm, cfg).to(device)
        # DrQ's target encoder under the target critics (without target networks, the encoder itself, no gradient).
        self.encoder_target = None
        if self.encoder is not None:
            self.encoder_target = copy.deepcopy(self.encoder).requires_grad_(False) if cfg.target_network else None
        self.critics_target = copy.deepcopy(self.critics).requires_grad_(False) if cfg.target_network else None
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.alpha_init), device=device))
        self.log_alpha.requires_grad_(cfg.autotune_alpha)
        self.target_entropy = -float(act_dim) if cfg.target_entropy is None else cfg.target_entropy
        self.targets: list[torch.Tensor] = []
        self.sources: list[torch.Tensor] = []
        if self.critics_target is not None:
            self.targets = [*self.critics_target.parameters(), *self.critics_target.statistics()]
            self.sources = [*self.critics.parameters(), *self.critics.statistics()]
        if self.encoder is not None and self.encoder_target is not None:
            self.targets += list(self.encoder_target.parameters())
            self.sources += list(self.encoder.parameters())
        adam = functools.partial(self.fused_adam, beta1=cfg.adam_beta1)
        self.actor_optimizer = adam(self.head.parameters(), cfg.actor_lr)
        self.critic_optimizer = adam(self.critic_parameters(), cfg.critic_lr)
        self.alpha_optimizer = adam([self.log_alpha], cfg.alpha_lr) if cfg.autotune_alpha else None
        self.reset_steps()

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        out: dict[str, torch.optim.Optimizer] = {"actor_optimizer": self.actor_optimizer}
        out["critic_optimizer"] = self.critic_optimizer
        if self.alpha_optimizer is not None:
            out["alpha_optimizer"] = self.alpha_optimizer
        return out

    def critic_parameters(self) -> list[nn.Parameter]:
        """The critics' and, on images, the encoder's: what the critics' loss trains."""
        encoder = [] if self.encoder is None else list(self.encoder.parameters())
        return [*self.critics.parameters(), *encoder]

    def sample_tensors(self, arrays: dict[str, Any], steps: int) -> dict[str, torch.Tensor]:
        """The sample's replay tensors, plus the policy noise of every step, drawn at once: `noise`
        [steps, 2, minibatch, |A|], the first for the next actions of the critic's target, the second for the
        actor's loss; on images with `augment_pad`, `shifts` [steps, 2, minibatch, 2], each image's crop offset
        (observation, next observation)."""
        out = replay_tensors(arrays, steps, self.device)
        batch = out["rewards"].shape[1]
        out["noise"] = self.randn((steps, 2, batch, self.act_dim), batch_dim=2)
        if self.encoder is not None and self.cfg.augment_pad:
            high = 2 * self.cfg.augment_pad + 1
            shape = (steps, 2, batch, 2)
            out["shifts"] = torch.randint(0, high, shape, generator=self.generator, device=self.device)
        return out

    def encode(self, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The minibatch with its images as features (module docstring): the observations' through the encoder with
        gradients, the next observations' through the target encoder without; each image shifted first."""
        assert self.encoder is not None
        shifts = b.get("shifts")
        pad = self.cfg.augment_pad
        obs, next_obs = b["obs"], b["next_obs"]
        if shifts is not None:
            obs, next_obs = random_shift(obs, shifts[0], pad), random_shift(next_obs, shifts[1], pad)
        with torch.no_grad():
            next_features = (self.encoder_target or self.encoder)(next_obs)
        rest = {k: v for k, v in b.items() if k != "shifts"}
        return {**rest, "obs": self.encoder(obs), "next_obs": next_features}

    # -- the step -----------------------------------------------------------------------------------

    def critic_loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        discounts: torch.Tensor,
        weights: torch.Tensor,
        noise: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss, Q of the first critic, the target): half the importance-weighted squared TD error summed over
        the critics, against r + discount * (min over critics of Q(s', a') - alpha log pi(a'|s')), a' ~ pi."""
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_actions, next_log_prob = self.head(next_obs, noise[0])
        if self.cfg.joint_forward:  # CrossQ: one batch, so batch renormalization sees both distributions
            both = self.critics(
                torch.cat([torch.cat([obs, actions], -1), torch.cat([next_obs, next_actions], -1)]), True
            )
            q_values, next_q = both.squeeze(-1).split(len(obs), -1)
            next_q = next_q.detach()
        else:
            q_values = self.critics(torch.cat([obs, actions], -1), True).squeeze(-1)
            with torch.no_grad():
                critics = self.critics if self.critics_target is None else self.critics_target
                next_q = critics(torch.cat([next_obs, next_actions], -1), False).squeeze(-1)
        target = rewards + discounts * (next_q.min(0).values - alpha * next_log_prob)
        # Importance weights correct prioritized sampling's bias (all ones for uniform replay).
        loss = 0.5 * (weights * (q_values - target) ** 2).mean(-1).sum()
        return loss, q_values[0].detach(), target

    def actor_loss(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(actor loss, temperature loss, log pi of the sampled actions): alpha log pi(a|s) - min Q(s, a) with
        a ~ pi reparametrized, through the critics' input only; the temperature's loss pushes the policy's
        entropy towards the target (Stable-Baselines3's form, on log alpha)."""
        alpha = self.log_alpha.detach().exp()
        actions, log_prob = self.head(obs, noise[1], True)
        q_values = self.critics(torch.cat([obs, actions], -1), False, frozen=2).squeeze(-1)
        actor_loss = (alpha * log_prob - q_values.min(0).values).mean()
        alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        return actor_loss, alpha_loss, log_prob.detach()

    def train_step(self, b: dict[str, torch.Tensor], update_actor: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """One critic step (and the actor's and the temperature's when `update_actor`): the unit that is
        compiled and captured. Returns STEP_STATS as one tensor and the |TD error| of the minibatch, both on
        the device; nothing here waits for it."""
        cfg = self.cfg
        alpha = self.log_alpha.detach().exp()
        if self.encoder is not None:
            b = self.encode(b)
        loss, q_first, td_errors, critic_bad = self.critic_step(b)
        nan = torch.full((), float("nan"), device=self.device)
        actor_loss, alpha_loss, entropy = nan, nan, nan
        if update_actor:
            actor_loss, alpha_loss, log_prob = self.actor_loss_fn(b["obs"].detach(), b["noise"])
            stepped = [self.actor_optimizer, *([self.alpha_optimizer] if self.alpha_optimizer else [])]
            for optimizer in stepped:
                optimizer.zero_grad()
            (actor_loss + alpha_loss).backward()  # disjoint: alpha is detached in one, log pi in the other
            bad = critic_bad | ~torch.isfinite(actor_loss) | ~torch.isfinite(alpha_loss)
            bad = self.agree([*self.head.parameters(), self.log_alpha], bad)
            for optimizer in stepped:
                optimizer.found_inf.copy_(bad)  # type: ignore[attr-defined]
            self.actor.net.commit()
            if cfg.max_grad_norm is not None:
                nn.utils.clip_grad_norm_(self.head.parameters(), cfg.max_grad_norm, foreach=True)
            for optimizer in stepped:
                optimizer.step()
            entropy = -log_prob.mean()
        stats = [loss, actor_loss, alpha_loss, alpha, entropy, q_first.mean(), td_errors.mean(), critic_bad.float()]
        return torch.stack([s.detach() for s in stats]), td_errors

    def after_step(self, step_stats: torch.Tensor) -> None:
        if self.targets and self.updates % self.cfg.target_update_period == 0:
            with torch.no_grad():
                tau = self.cfg.tau * (1 - step_stats[-1])  # nonfinite_skipped: no move
                torch._foreach_lerp_(self.targets, self.sources, [tau] * len(self.targets))

    # -- parameters and checkpoints -----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "actor": self.actor.state_dict(),
            "critics": self.critics.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "generator": self.generator.get_state(),
            "updates": self.updates,
            "last_actor_stats": dict(self.last_actor_stats),
            **{key: optimizer.state_dict() for key, optimizer in self.optimizers().items()},
        }
        if self.critics_target is not None:
            state["critics_target"] = self.critics_target.state_dict()
        if self.encoder_target is not None:
            state["encoder_target"] = self.encoder_target.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores in place (a captured CUDA graph keeps reading the same tensors). How this process steps
        (fused, capturable) is not part of what resumes."""
        self.actor.load_state_dict(state["actor"])
        self.critics.load_state_dict(state["critics"])
        if self.critics_target is not None:
            self.critics_target.load_state_dict(state["critics_target"])
        if self.encoder_target is not None:
            self.encoder_target.load_state_dict(state["encoder_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for key, optimizer in self.optimizers().items():
            load_optimizer_state(optimizer, state[key])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
        self.last_actor_stats = {k: float(v) for k, v in state["last_actor_stats"].items()}
        self.reset_steps()
