"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016), with TD3's fixes as switches, distributed.

Follows CleanRL's ddpg_continuous_action / td3_continuous_action: a tanh-squashed deterministic actor scaled
to the action bounds, a Q critic (two with `twin_critics`), target networks updated softly (tau) or by hard
copies, delayed actor updates, optional target policy smoothing, and uniform random actions until
`learning_starts`.

What distribution changes: actors explore with their own noise scale (`noise_spread`, as Ape-X gives each
actor its own epsilon), compute n-step returns themselves (`NStepCollector`, so the replay stores ready
transitions and the learner stays agnostic of episodes), and the learner sends TD errors back as
priorities when the replay is prioritized. Sockets and loops live in the roles; this file is the math.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from surreal.algos.ddpg.config import DDPGConfig
from surreal.algos.inference import AsFloat32, DeterministicPolicy
from surreal.algos.replica import Replica
from surreal.algos.sac.config import SACConfig
from surreal.algos.sample_steps import SampleStepper, load_optimizer_state, replay_tensors
from surreal.algos.stacked import StackedMLP
from surreal.proto.wire import Chunk, Field, Fields
from surreal.runtime.rollout import Policy, RolloutCollector
from surreal.spaces import space_dims

# -- networks -------------------------------------------------------------------------------------------


def relu_mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for n_in, n_out in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


class DeterministicActor(nn.Module):
    """mu(s) = tanh(MLP(s)) * action_scale + action_bias: always inside the action bounds."""

    action_scale: torch.Tensor
    action_bias: torch.Tensor

    def __init__(self, obs_dim: int, act_space: spaces.Box, hidden_sizes: list[int]) -> None:
        super().__init__()
        self.net = relu_mlp([obs_dim, *hidden_sizes, int(act_space.shape[0])])
        high = torch.as_tensor(act_space.high, dtype=torch.float32)
        low = torch.as_tensor(act_space.low, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)) * self.action_scale + self.action_bias


# -- actor side -----------------------------------------------------------------------------------------


def actor_noise_scale(cfg: DDPGConfig, actor_index: int, num_actors: int) -> float:
    """Actor i's exploration scale: geometric between exploration_noise / spread and * spread (Ape-X's
    per-actor epsilon, for continuous actions); every actor gets exploration_noise when spread is 1. Actors
    added beyond the configured count (an elastic fleet) take the ladder's rungs again from the bottom."""
    if num_actors <= 1:
        return cfg.exploration_noise
    rung = actor_index % num_actors
    return cfg.exploration_noise * cfg.noise_spread ** (2.0 * rung / (num_actors - 1) - 1.0)


class OffPolicyPolicy:
    """What DDPG's and SAC's actors share: a CPU actor network whose `mean_action` is the deterministic action,
    uniform random actions while the learner has not updated yet (the warm-up), and a numpy generator of its own
    per actor. A subclass explores in `explore`."""

    def __init__(self, cfg: DDPGConfig | SACConfig, actor: nn.Module, act_space: spaces.Box, actor_index: int) -> None:
        self.cfg = cfg
        self.actor = actor.requires_grad_(False)
        self.mean_action: nn.Module = actor
        self.low, self.high = act_space.low.astype(np.float32), act_space.high.astype(np.float32)
        self.rng = np.random.default_rng(cfg.seed + 1_000 * actor_index)
        self.warmup = True

    def load_params(self, arrays: dict[str, Any]) -> None:
        self.actor.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in arrays["actor"].items()})
        self.warmup = bool(np.asarray(arrays["warmup"]))

    def explore(self, obs: torch.Tensor) -> np.ndarray:
        """Exploring actions for a batch of observations, inside the action bounds."""
        raise NotImplementedError

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self.warmup:
            actions = self.rng.uniform(self.low, self.high, (len(obs), len(self.low))).astype(np.float32)
        else:
            actions = self.explore(torch.from_numpy(obs.astype(np.float32)))
        return actions, {"actions": actions}

    @torch.no_grad()
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self.mean_action(torch.from_numpy(obs.astype(np.float32))).numpy()

    def params(self) -> dict[str, Any]:
        """The blob `load_params` takes, as this policy holds it."""
        return {"actor": {k: v.numpy() for k, v in self.actor.state_dict().items()}, "warmup": np.array(self.warmup)}

    def inference_module(self) -> nn.Module:
        """`act_deterministic` as one torch module (algos/inference.py), over copies of the weights."""
        return DeterministicPolicy(AsFloat32(), copy.deepcopy(self.mean_action)).eval()

    def describe(self) -> dict[str, Any]:
        """The network and action head, as the policy artifact's header states them (no normalizer)."""
        return {
            "network": {"kind": "mlp", "hidden_sizes": list(self.cfg.hidden_sizes), "activation": "relu"},
            "action_head": {"type": "box", "squash": "tanh", "clip": False},
            "normalizer": None,
        }

    def episode_done(self, done: np.ndarray) -> None:
        del done  # no per-episode exploration state

    def sampling_state(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state}

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]


class DDPGPolicy(OffPolicyPolicy):
    """What an actor runs: mu(s) plus this actor's Gaussian or Ornstein-Uhlenbeck noise, in units of the
    action half-range."""

    cfg: DDPGConfig

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: DDPGConfig, actor_index: int, num_actors: int = 1
    ) -> None:
        obs_dim, _ = space_dims(cfg, obs_space, act_space)
        actor = DeterministicActor(obs_dim, act_space, list(cfg.hidden_sizes)).eval()
        super().__init__(cfg, actor, act_space, actor_index)
        self.half_range = (self.high - self.low) / 2.0
        self.noise_scale = actor_noise_scale(cfg, actor_index, num_actors)
        self.ou_state: np.ndarray | None = None

    def _noise(self, shape: tuple[int, ...]) -> np.ndarray:
        white = self.rng.standard_normal(shape).astype(np.float32)
        if self.cfg.noise_type == "gaussian":
            return self.noise_scale * white
        if self.ou_state is None or self.ou_state.shape != shape:
            self.ou_state = np.zeros(shape, np.float32)
        dt = 1e-2  # the DDPG paper's OU process: theta 0.15, dt 0.01
        self.ou_state += self.cfg.ou_theta * -self.ou_state * dt + self.noise_scale * np.sqrt(dt) * white
        return self.ou_state.copy()

    def explore(self, obs: torch.Tensor) -> np.ndarray:
        mu = self.actor(obs).numpy()
        return np.clip(mu + self._noise(mu.shape) * self.half_range, self.low, self.high)

    def episode_done(self, done: np.ndarray) -> None:
        if self.ou_state is not None:
            self.ou_state[done] = 0.0

    def sampling_state(self) -> dict[str, Any]:
        state = super().sampling_state()
        if self.ou_state is not None:
            state["ou_state"] = self.ou_state.copy()
        return state

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        super().load_sampling_state(state)
        self.ou_state = np.array(state["ou_state"], np.float32) if "ou_state" in state else None


def n_step_transitions(arrays: dict[str, np.ndarray], n: int, gamma: float) -> dict[str, np.ndarray]:
    """n-step transitions for the first E = T - n + 1 steps of a time-major [T, K] window.

    For step t the return sums gamma^i r_{t+i} up to n rewards, stopping after the step where the episode
    ends. The bootstrap observation is the next_obs of the last summed step (the final observation at an
    episode end, SAME_STEP autoreset) and its discount gamma^m, or 0 when the episode terminated there: a
    time-limit truncation still bootstraps, a termination never does."""
    rewards, terminated, truncated = arrays["rewards"], arrays["terminated"], arrays["truncated"]
    next_obs = arrays["next_obs"]
    E = rewards.shape[0] - n + 1
    returns = np.zeros((E, *rewards.shape[1:]), np.float32)
    g = np.ones_like(returns)
    live = np.ones(returns.shape, bool)
    terminal = np.zeros(returns.shape, bool)
    boot = next_obs[:E].copy()
    for i in range(n):
        window = slice(i, i + E)
        returns += np.where(live, g * rewards[window], 0.0).astype(np.float32)
        boot[live] = next_obs[window][live]
        g = np.where(live, g * gamma, g).astype(np.float32)
        terminal |= live & terminated[window]
        live &= ~(terminated[window] | truncated[window])
    return {
        "obs": arrays["obs"][:E],
        "actions": arrays["actions"][:E],
        "rewards": returns,
        "next_obs": boot,
        "discounts": np.where(terminal, 0.0, g).astype(np.float32),
    }


def chunk_fields(obs_space: spaces.Box, act_space: spaces.Box, cfg: DDPGConfig) -> Fields:
    """One transition as `n_step_transitions` makes it, what a chunk's cell and a stored transition hold: what every
    sample reply the learner takes must hold, field by field (proto/wire.py `ReplyLayout`)."""
    del cfg  # the same fields whatever n
    f32, obs, act = np.dtype(np.float32), tuple(obs_space.shape), tuple(act_space.shape)
    return {
        "obs": Field(f32, obs),
        "actions": Field(f32, act),
        "rewards": Field(f32),
        "next_obs": Field(f32, obs),
        "discounts": Field(f32),
    }


class NStepCollector:
    """Wraps the rollout collector: turns each chunk into n-step transitions, carrying the last n-1 steps
    of every environment into the next chunk so no transition is cut short by a chunk boundary."""

    def __init__(self, inner: RolloutCollector, n: int, gamma: float) -> None:
        self.inner = inner
        self.n = n
        self.gamma = gamma
        self.chunk_size = inner.chunk_size
        self.carry: dict[str, np.ndarray] | None = None

    def collect(self, version: int) -> Chunk:
        chunk = self.inner.collect(version)
        raw = chunk.arrays
        if self.carry is not None:
            raw = {k: np.concatenate([self.carry[k], v]) for k, v in raw.items()}
        self.carry = {k: v[len(v) - (self.n - 1) :] for k, v in raw.items()} if self.n > 1 else None
        return Chunk(
            n_step_transitions(raw, self.n, self.gamma),
            chunk.version,
            chunk.actor,
            chunk.episode_returns,
            chunk.episode_lengths,
            steps=chunk.env_steps,
            episode_successes=chunk.episode_successes,
        )

    def state(self) -> dict[str, Any]:
        """The rollout's state and the last n-1 steps carried into the next chunk."""
        carry = None if self.carry is None else {k: v.copy() for k, v in self.carry.items()}
        return {"inner": self.inner.state(), "carry": carry}

    def load_state(self, state: dict[str, Any]) -> None:
        self.inner.load_state(state["inner"])
        carry = state["carry"]
        self.carry = None if carry is None else {k: np.array(v) for k, v in carry.items()}


# -- learner side ---------------------------------------------------------------------------------------


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
        replica: Replica | None = None,
    ) -> None:
        """`compile`: compile the critic and actor losses and, on CUDA, replay each step as a CUDA graph (the first
        update then pays the compilation); off, the same step runs eagerly. `replica`: this learner's rank in a
        data-parallel group."""
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

    def learning_rates(self) -> dict[str, float]:
        return {"actor_lr": self.step_size(self.actor_optimizer), "critic_lr": self.step_size(self.critic_optimizer)}

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
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
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
        load_optimizer_state(self.actor_optimizer, state["actor_optimizer"])
        load_optimizer_state(self.critic_optimizer, state["critic_optimizer"])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
        self.last_actor_stats = {"actor_loss": float(state.get("last_actor_loss", float("nan")))}
        self.reset_steps()


make_policy = DDPGPolicy


def make_collector(
    envs: gym.vector.VectorEnv, policy: Policy, cfg: DDPGConfig | SACConfig, actor_index: int, chunk_steps: int
) -> NStepCollector:
    """DDPG's and SAC's: the actors compute n-step transitions."""
    return NStepCollector(RolloutCollector(envs, policy, chunk_steps, actor_index), cfg.n_step, cfg.gamma)


make_learner = DDPGLearner


if TYPE_CHECKING:  # mypy checks this module against the interface the roles call
    from surreal.algos.ddpg import learner as _this
    from surreal.algos.interface import Algorithm

    _CHECKED: Algorithm = _this
