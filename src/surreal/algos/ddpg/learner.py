"""DDPG's learner side (Lillicrap et al. 2016), with TD3's fixes as switches (Fujimoto et al. 2018): CleanRL's
ddpg_continuous_action / td3_continuous_action. A Q critic (two with `twin_critics`) against target networks updated
softly (tau) or by hard copies, delayed actor updates, optional target policy smoothing; the TD errors go back as
priorities when the replay is prioritized. Sockets and loops live in the roles; this file is the math.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from surreal.algos.capture import load_optimizer_state
from surreal.algos.ddpg.config import DDPGConfig
from surreal.algos.ddpg.nets import DeterministicActor
from surreal.algos.replica import ALONE, Replica
from surreal.algos.sample_steps import SampleStepper, replay_tensors
from surreal.algos.stacked import StackedMLP
from surreal.spaces import space_dims

STEP_STATS = ("critic_loss", "actor_loss", "q_mean", "td_error_mean", "nonfinite_skipped")  # a step's, in order


class DDPGLearner(SampleStepper):
    """The DDPG / TD3 update, with the speed belonging to the device. One call takes a sample of several
    minibatches and steps through them without waiting for the device; the statistics and priorities are
    read once, at the end. Both critics are one module (`StackedMLP`), a step whose loss is not finite
    is skipped inside the optimizer (fused Adam's `found_inf`, no host check), and every step has the same
    shapes, so `compile=True` can compile the losses and, on CUDA, replay each step as a CUDA graph.
    `compile=False` runs the same step eagerly: the reference the compiled path is tested against."""

    name, step_stats, actor_stats = "DDPG", STEP_STATS, ("actor_loss",)

    def __init__(
        self,
        obs_space: spaces.Box,
        act_space: spaces.Box,
        cfg: DDPGConfig,
        device: torch.device,
        *,
        compile: bool = False,
        replica: Replica = ALONE,
    ) -> None:
        obs_dim, act_dim = space_dims(cfg, obs_space, act_space)
        super().__init__(cfg, device, compile, replica)
        hidden = list(cfg.hidden_sizes)
        self.actor = DeterministicActor(obs_dim, act_space, hidden).to(device)
        # TD3's twins or DDPG's one, as one module (algos/stacked.py)
        self.critics = StackedMLP([obs_dim + act_dim, *hidden, 1], 2 if cfg.twin_critics else 1).to(device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critics_target = copy.deepcopy(self.critics).requires_grad_(False)
        self.targets: list[torch.Tensor] = [*self.actor_target.parameters(), *self.critics_target.parameters()]
        self.sources: list[torch.Tensor] = [*self.actor.parameters(), *self.critics.parameters()]
        self.actor_optimizer = self.fused_adam(self.actor.parameters(), cfg.actor_lr)
        self.critic_optimizer = self.fused_adam(self.critics.parameters(), cfg.critic_lr)
        self.reset_steps()

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_optimizer": self.actor_optimizer, "critic_optimizer": self.critic_optimizer}

    def sample_tensors(self, arrays: dict[str, Any], steps: int) -> dict[str, torch.Tensor]:
        """The sample's replay tensors, plus the target-smoothing noise of every step, drawn at once."""
        out = replay_tensors(arrays, steps, self.device)
        if self.cfg.target_policy_noise > 0:
            out["noise"] = self.randn(tuple(out["actions"].shape), batch_dim=1)
        return out

    # -- the step -----------------------------------------------------------------------------------

    def critic_loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        discounts: torch.Tensor,
        weights: torch.Tensor,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss, Q of the first critic, the target): the importance-weighted squared TD error summed over
        the critics, against r + discount * min over the target critics at the target action (smoothed by
        `noise` for TD3)."""
        cfg = self.cfg
        with torch.no_grad():
            next_actions = self.actor_target(next_obs)
            if noise is not None:
                scale, bias = self.actor.action_scale, self.actor.action_bias
                clipped = (noise * cfg.target_policy_noise).clamp(-cfg.target_noise_clip, cfg.target_noise_clip)
                next_actions = torch.max(torch.min(next_actions + clipped * scale, bias + scale), bias - scale)
            next_q = self.critics_target(torch.cat([next_obs, next_actions], -1), False).squeeze(-1)
            target = rewards + discounts * next_q.min(0).values
        q_values = self.critics(torch.cat([obs, actions], -1), True).squeeze(-1)
        # Importance weights correct prioritized sampling's bias (all ones for uniform replay).
        loss = (weights * (q_values - target) ** 2).mean(-1).sum()
        return loss, q_values[0], target

    def actor_loss(self, obs: torch.Tensor) -> torch.Tensor:
        return -self.critics(torch.cat([obs, self.actor(obs)], -1), True, frozen=1).mean()

    def train_step(self, b: dict[str, torch.Tensor], update_actor: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """One critic step (and the actor's and the soft targets' when `update_actor`): the unit that is
        compiled and captured. Returns STEP_STATS as one tensor and the |TD error| of the minibatch, both on
        the device; nothing here waits for it."""
        cfg = self.cfg
        loss, q_first, td_errors, critic_bad = self.critic_step(b)
        actor_loss = torch.full((), float("nan"), device=self.device)
        if update_actor:
            actor_loss = self.actor_loss_fn(b["obs"])
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            bad = self.agree(self.actor.parameters(), critic_bad | ~torch.isfinite(actor_loss))
            self.actor_optimizer.found_inf.copy_(bad)  # type: ignore[attr-defined]
            if cfg.max_grad_norm is not None:
                nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.max_grad_norm, foreach=True)
            self.actor_optimizer.step()
            if cfg.target_update_period == 0:  # soft targets, still in place after a skipped step
                with torch.no_grad():
                    tau = cfg.tau * (~bad).float()
                    torch._foreach_lerp_(self.targets, self.sources, [tau] * len(self.targets))
        stats = torch.stack(
            [loss.detach(), actor_loss.detach(), q_first.detach().mean(), td_errors.mean(), critic_bad.float()]
        )
        return stats, td_errors

    def after_step(self, step_stats: torch.Tensor) -> None:
        period = self.cfg.target_update_period
        if period and self.updates % period == 0:  # hard copies (soft targets move inside train_step)
            with torch.no_grad():
                torch._foreach_copy_(self.targets, self.sources)

    # -- parameters and checkpoints -----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critics": self.critics.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critics_target": self.critics_target.state_dict(),
            **{key: optimizer.state_dict() for key, optimizer in self.optimizers().items()},
            "generator": self.generator.get_state(),
            "updates": self.updates,
            "last_actor_loss": self.last_actor_stats["actor_loss"],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores in place (a captured CUDA graph keeps reading the same tensors). How this process steps
        (fused, capturable) is not part of what resumes: a checkpoint from another device keeps this
        optimizer's choices."""
        self.actor.load_state_dict(state["actor"])
        self.critics.load_state_dict(state["critics"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.critics_target.load_state_dict(state["critics_target"])
        for key, optimizer in self.optimizers().items():
            load_optimizer_state(optimizer, state[key])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
        self.last_actor_stats = {"actor_loss": float(state.get("last_actor_loss", float("nan")))}
        self.reset_steps()
