"""What the off-policy learners (DDPG, SAC) share: stepping through a sample of several equal minibatches with
the device read once, the compiled / CUDA-graph step with its eager fallback, and restoring fused optimizers
in place.

Why one class: the learner role hands an off-policy learner a sample of k minibatches (runtime/regimes/
replay_ratio.py); stepping through it without a host sync, skipping a diverged step inside fused Adam, and
replaying each kind of step as a CUDA graph are the same machinery whatever the losses are.

In a data-parallel group (`learner.replicas` > 1, algos/replica.py) each rank steps through a sample of its own
(its share of every minibatch), draws its share of the whole minibatch's noise (`randn`), averages every step's
gradients with the other ranks' (`agree`, which also makes a step skipped on one rank skipped on all) and reports
statistics averaged over the ranks; its priorities are those of its own transitions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from surreal.algos.capture import CapturedStep, CompiledSteps
from surreal.algos.replica import ALONE, Replica
from surreal.algos.stacked import StackedMLP

STEP_KEYS = ("obs", "actions", "rewards", "next_obs", "discounts", "weights")  # a minibatch's replay tensors
Step = Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]  # minibatch -> (stats, |TD|)


def replay_tensors(arrays: dict[str, Any], steps: int, device: torch.device) -> dict[str, torch.Tensor]:
    """A sample's replay arrays on `device` as [steps, minibatch, ...] tensors (weights all ones where the
    replay is uniform and sends none); images stay uint8 (the encoder divides them on the device), the rest float32."""
    out = {k: torch.as_tensor(_as_stepped(np.asarray(arrays[k]))) for k in STEP_KEYS if k in arrays}
    if "weights" not in out:
        out["weights"] = torch.ones_like(out["rewards"])
    return {k: v.to(device, non_blocking=True).unflatten(0, (steps, -1)) for k, v in out.items()}


def _as_stepped(array: np.ndarray) -> np.ndarray:
    return array if array.dtype == np.uint8 else array.astype(np.float32, copy=False)


class SampleStepper(CompiledSteps):
    """The update loop of an off-policy learner. A subclass sets `name`, `step_stats` (what `train_step`
    returns, in order, ending with `nonfinite_skipped`) and `actor_stats` (those NaN in a critic-only step);
    its `__init__` calls this one's, builds its networks (`actor`: what `params` sends; `critics`) and optimizers
    (`fused_adam`), then calls `self.reset_steps()`."""

    step_stats: tuple[str, ...]
    actor_stats: tuple[str, ...]
    actor: Any  # the actor network (its own class in each algorithm)
    critics: StackedMLP
    critic_optimizer: torch.optim.Optimizer
    critic_loss: Callable[..., Any]  # the algorithm's losses, which `train_step` calls as `*_loss_fn`
    actor_loss: Callable[..., Any]

    def __init__(self, cfg: Any, device: torch.device, compile: bool, replica: Replica = ALONE) -> None:
        """`cfg` (with `seed` and `policy_delay`); `replica`: its rank in a group (`ALONE`: none). Seeds the networks
        the subclass builds next, and the generator the steps draw from (DDPG's target smoothing, SAC's samples)."""
        self.cfg, self.device, self.compile, self.replica = cfg, device, compile, replica
        torch.manual_seed(cfg.seed)
        self.generator = torch.Generator(device=device).manual_seed(cfg.seed)
        self.updates = 0
        self.last_actor_stats = dict.fromkeys(self.actor_stats, float("nan"))

    # -- what the algorithm supplies ----------------------------------------------------------------------

    def train_step(self, b: dict[str, torch.Tensor], update_actor: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """One gradient step on minibatch `b`, with the losses `critic_loss_fn` / `actor_loss_fn` (compiled or
        not): `step_stats` as one tensor and the minibatch's |TD error|, both on the device."""
        raise NotImplementedError

    def sample_tensors(self, arrays: dict[str, Any], steps: int) -> dict[str, torch.Tensor]:
        """The sample as [steps, ...] tensors on the device, with whatever random draws the steps take."""
        raise NotImplementedError

    def after_step(self, step_stats: torch.Tensor) -> None:
        """Called after each step with its statistics (target updates on a schedule)."""

    def critic_step(self, b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The critics' part of `train_step`, DDPG's and SAC's alike: `critic_loss_fn`, backward, the ranks'
        agreement, `found_inf`, the running statistics' move, clipping and Adam. Returns (loss, Q of the first
        critic, |TD error|, whether the step is skipped)."""
        loss, q_first, target = self.critic_loss_fn(**b)
        self.critic_optimizer.zero_grad()  # to None: inside a capture, backward then takes the grads from its pool
        loss.backward()
        bad = self.agree(self.critic_parameters(), ~torch.isfinite(loss))
        self.critic_optimizer.found_inf.copy_(bad)  # type: ignore[attr-defined]
        # After the backward, never before: a compiled backward may read the running statistics the loss read.
        self.critics.commit()
        if self.cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.critic_parameters(), self.cfg.max_grad_norm, foreach=True)
        self.critic_optimizer.step()
        return loss, q_first, (q_first - target).detach().abs(), bad

    def critic_parameters(self) -> list[torch.nn.Parameter]:
        """What the critics' loss trains: the critics (and, for SAC on images, the shared encoder: sac/learner.py)."""
        return list(self.critics.parameters())

    def params(self) -> dict[str, Any]:
        """The actor's weights (with any running statistics), and whether actors should still act uniformly at
        random (no update yet): what `OffPolicyPolicy.load_params` takes."""
        actor = {k: v.detach().cpu().numpy() for k, v in self.actor.state_dict().items()}
        return {"actor": actor, "warmup": np.array(self.updates == 0)}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Each optimizer under its checkpoint key (`actor_optimizer`, `critic_optimizer`, ...)."""
        raise NotImplementedError

    # -- the machinery ------------------------------------------------------------------------------------

    def fused_adam(self, parameters: Any, lr: float, beta1: float = 0.9) -> torch.optim.Adam:
        """Adam, fused: one kernel per step for all parameters, and safe to capture in a CUDA graph. Its
        `found_inf` (what it reads as AMP's): when set, its step leaves parameters and moments as they were; a
        step sets it from its own losses, so a diverged step is skipped without the host looking."""
        optimizer = torch.optim.Adam(parameters, lr=lr, betas=(beta1, 0.999), fused=True, capturable=self.captures())
        optimizer.found_inf = torch.zeros((), device=self.device)  # type: ignore[attr-defined]
        return optimizer

    def randn(self, shape: tuple[int, ...], batch_dim: int) -> torch.Tensor:
        """Normal noise of `shape` from the learner's generator; a rank's share (along `batch_dim`) of the whole
        minibatch's, so that K ranks draw what one learner draws."""
        return self.replica.randn_share(shape, batch_dim, self.generator, self.device)

    def agree(self, parameters: Any, bad: torch.Tensor) -> torch.Tensor:
        """After a backward: the gradients of `parameters` averaged over the ranks, and whether the step went
        non-finite on any of them (alone: `bad`). Called before the optimizer reads `found_inf`."""
        return self.replica.average_gradients_agreeing(parameters, bad)

    def reset_steps(self) -> None:
        """(Re)builds the losses and steps: eager, or the losses compiled and, on CUDA, each kind of step
        (critic only, and with the actor) replayed as its own CUDA graph. Called again after a restore: a
        captured graph holds the optimizer state it replaced."""
        steps: dict[bool, Step] = {
            actor: functools.partial(self.train_step, update_actor=actor) for actor in (False, True)
        }
        self.critic_loss_fn: Callable[..., Any] = self.critic_loss
        self.actor_loss_fn: Callable[..., Any] = self.actor_loss
        if self.compile:
            self.critic_loss_fn = torch.compile(self.critic_loss, dynamic=False)
            self.actor_loss_fn = torch.compile(self.actor_loss, dynamic=False)
            if self.captures():
                steps = {actor: CapturedStep(step) for actor, step in steps.items()}
        self.step_fns = steps

    def _step(self, b: dict[str, torch.Tensor], update_actor: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return self.run_step(lambda: self.step_fns[update_actor](b))

    def update(self, arrays: dict[str, Any], steps: int = 1) -> tuple[list[dict[str, float]], np.ndarray]:
        """`steps` gradient steps, one per minibatch of a sample holding `steps` equal minibatches, in order;
        every `policy_delay`-th also steps the actor.

        Returns each step's statistics and the new priorities |TD error| of the sample's transitions, read
        from the device once. A step whose critic loss is not finite is skipped (parameters and optimizer
        state stay as they were): its statistics are NaN with `nonfinite_skipped` = 1 and its transitions'
        priorities NaN (the learner sends none for them). A critic-only step reports the last actor step's
        `actor_stats`."""
        transitions = len(arrays["rewards"])
        if steps < 1 or transitions % steps:
            raise ValueError(f"a sample of {transitions} transitions does not split into {steps} equal minibatches")
        b = self.sample_tensors(arrays, steps)
        results = []
        for i in range(steps):
            self.updates += 1
            update_actor = self.updates % self.cfg.policy_delay == 0
            step_stats, td_errors = self._step({k: v[i] for k, v in b.items()}, update_actor)
            results.append(torch.cat([step_stats, td_errors]))  # a copy: a captured step's outputs are overwritten
            self.after_step(step_stats)
        width = len(self.step_stats)
        stacked = torch.stack(results)
        # The whole minibatches' statistics (a group's average); the priorities stay this rank's own.
        stacked[:, :width] = self.replica.mean(stacked[:, :width].contiguous())
        host = stacked.cpu().numpy()  # the one wait for the device
        per_step, priorities = host[:, :width], host[:, width:].astype(np.float64)
        rates = self.learning_rates()
        out = []
        for i, row in enumerate(per_step):
            stats = dict(zip(self.step_stats, (float(x) for x in row), strict=True))
            if stats["nonfinite_skipped"]:
                stats = {**dict.fromkeys(self.step_stats, float("nan")), "nonfinite_skipped": 1.0}
                priorities[i] = np.nan
            elif np.isnan(stats["actor_loss"]):
                stats.update(self.last_actor_stats)
            else:
                self.last_actor_stats = {k: stats[k] for k in self.actor_stats}
            out.append({**stats, **rates})
        return out, priorities.reshape(-1)

    def learning_rates(self) -> dict[str, float]:
        """Each optimizer's step size (`actor_lr`, `critic_lr`, ...; one group each), logged with every step's
        statistics as SB3 logs its learning rate."""
        return {
            f"{key.removesuffix('_optimizer')}_lr": float(o.param_groups[0]["lr"])
            for key, o in self.optimizers().items()
        }
