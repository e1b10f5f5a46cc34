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
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from surreal.config.schema import DDPGConfig
from surreal.proto.wire import Chunk
from surreal.runtime.rollout import RolloutCollector

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


class Critic(nn.Module):
    """Q(s, a) from the concatenated observation and action."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int]) -> None:
        super().__init__()
        self.net = relu_mlp([obs_dim + act_dim, *hidden_sizes, 1])

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, actions], -1)).squeeze(-1)


def _dims(obs_space: spaces.Box, act_space: spaces.Box) -> tuple[int, int]:
    if not isinstance(act_space, spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError("DDPG here supports flat Box observations and Box actions")
    return int(obs_space.shape[0]), int(act_space.shape[0])


# -- actor side -----------------------------------------------------------------------------------------


def actor_noise_scale(cfg: DDPGConfig, actor_index: int, num_actors: int) -> float:
    """Actor i's exploration scale: geometric between exploration_noise / spread and * spread (Ape-X's
    per-actor epsilon, for continuous actions); every actor gets exploration_noise when spread is 1. Actors
    added beyond the configured count (an elastic fleet) take the ladder's rungs again from the bottom."""
    if num_actors <= 1:
        return cfg.exploration_noise
    rung = actor_index % num_actors
    return cfg.exploration_noise * cfg.noise_spread ** (2.0 * rung / (num_actors - 1) - 1.0)


class DDPGPolicy:
    """What an actor runs: mu(s) plus this actor's Gaussian or Ornstein-Uhlenbeck noise, in units of the
    action half-range; uniform random actions while the learner has not updated yet (the warm-up)."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: DDPGConfig, actor_index: int, num_actors: int
    ) -> None:
        obs_dim, act_dim = _dims(obs_space, act_space)
        self.cfg = cfg
        self.actor = DeterministicActor(obs_dim, act_space, list(cfg.hidden_sizes)).requires_grad_(False).eval()
        self.low, self.high = act_space.low.astype(np.float32), act_space.high.astype(np.float32)
        self.half_range = (self.high - self.low) / 2.0
        self.noise_scale = actor_noise_scale(cfg, actor_index, num_actors)
        self.rng = np.random.default_rng(cfg.seed + 1_000 * actor_index)
        self.warmup = True
        self.ou_state: np.ndarray | None = None

    def load_params(self, arrays: dict[str, Any]) -> None:
        self.actor.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in arrays["actor"].items()})
        self.warmup = bool(np.asarray(arrays["warmup"]))

    def _noise(self, shape: tuple[int, ...]) -> np.ndarray:
        white = self.rng.standard_normal(shape).astype(np.float32)
        if self.cfg.noise_type == "gaussian":
            return self.noise_scale * white
        if self.ou_state is None or self.ou_state.shape != shape:
            self.ou_state = np.zeros(shape, np.float32)
        dt = 1e-2  # the DDPG paper's OU process: theta 0.15, dt 0.01
        self.ou_state += self.cfg.ou_theta * -self.ou_state * dt + self.noise_scale * np.sqrt(dt) * white
        return self.ou_state.copy()

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self.warmup:
            actions = self.rng.uniform(self.low, self.high, (len(obs), len(self.low))).astype(np.float32)
        else:
            mu = self.actor(torch.from_numpy(obs.astype(np.float32))).numpy()
            actions = np.clip(mu + self._noise(mu.shape) * self.half_range, self.low, self.high)
        return actions, {"actions": actions}

    @torch.no_grad()
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self.actor(torch.from_numpy(obs.astype(np.float32))).numpy()

    def episode_done(self, done: np.ndarray) -> None:
        if self.ou_state is not None:
            self.ou_state[done] = 0.0


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


# -- learner side ---------------------------------------------------------------------------------------


def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    with torch.no_grad():
        for target_param, source_param in zip(target.parameters(), source.parameters(), strict=True):
            target_param.lerp_(source_param, tau)


class DDPGLearner:
    def __init__(self, obs_space: spaces.Box, act_space: spaces.Box, cfg: DDPGConfig, device: torch.device) -> None:
        obs_dim, act_dim = _dims(obs_space, act_space)
        self.cfg = cfg
        self.device = device
        torch.manual_seed(cfg.seed)
        hidden = list(cfg.hidden_sizes)
        self.actor = DeterministicActor(obs_dim, act_space, hidden).to(device)
        self.critics = nn.ModuleList(
            [Critic(obs_dim, act_dim, hidden) for _ in range(2 if cfg.twin_critics else 1)]
        ).to(device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critics_target = copy.deepcopy(self.critics).requires_grad_(False)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr, foreach=True)
        self.critic_optimizer = torch.optim.Adam(self.critics.parameters(), lr=cfg.critic_lr, foreach=True)
        self.generator = torch.Generator(device=device).manual_seed(cfg.seed)  # target policy smoothing
        self.updates = 0
        self.last_actor_loss = float("nan")

    def _tensors(self, arrays: dict[str, Any]) -> dict[str, torch.Tensor]:
        keys = ("obs", "actions", "rewards", "next_obs", "discounts")
        out = {k: torch.as_tensor(np.asarray(arrays[k], np.float32), device=self.device) for k in keys}
        out["weights"] = (
            torch.as_tensor(np.asarray(arrays["weights"], np.float32), device=self.device)
            if "weights" in arrays
            else torch.ones_like(out["rewards"])
        )
        return out

    @torch.no_grad()
    def _target(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        next_actions = self.actor_target(b["next_obs"])
        if self.cfg.target_policy_noise > 0:
            scale = self.actor.action_scale
            noise = torch.randn(next_actions.shape, generator=self.generator, device=self.device)
            clip = self.cfg.target_noise_clip
            noise = (noise * self.cfg.target_policy_noise).clamp(-clip, clip)
            low, high = self.actor.action_bias - scale, self.actor.action_bias + scale
            next_actions = torch.max(torch.min(next_actions + noise * scale, high), low)
        next_q = torch.stack([critic(b["next_obs"], next_actions) for critic in self.critics_target]).min(0).values
        return b["rewards"] + b["discounts"] * next_q

    def update(self, arrays: dict[str, Any]) -> tuple[dict[str, float], np.ndarray]:
        """One gradient step of the critic(s) on a sampled batch (and of the actor every `policy_delay`-th);
        returns statistics and the new priorities |TD error| of the batch's transitions. A non-finite critic
        loss skips the step (`nonfinite_skipped` = 1, no priorities)."""
        cfg = self.cfg
        b = self._tensors(arrays)
        target = self._target(b)
        q_values = [critic(b["obs"], b["actions"]) for critic in self.critics]
        # Importance weights correct prioritized sampling's bias (all ones for uniform replay).
        critic_loss = sum((b["weights"] * (q - target) ** 2).mean() for q in q_values)
        if not torch.isfinite(critic_loss):  # diverged: skip the step, keep the networks finite
            nan = float("nan")
            stats = {"critic_loss": nan, "actor_loss": nan, "q_mean": nan, "td_error_mean": nan}
            return {**stats, "nonfinite_skipped": 1.0}, np.empty(0)
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        if cfg.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.critics.parameters(), cfg.max_grad_norm)
        self.critic_optimizer.step()
        self.updates += 1

        if self.updates % cfg.policy_delay == 0:
            actor_loss = -self.critics[0](b["obs"], self.actor(b["obs"])).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            if cfg.max_grad_norm is not None:
                nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.max_grad_norm)
            self.actor_optimizer.step()
            self.last_actor_loss = actor_loss.item()
            if cfg.target_update_period == 0:
                soft_update(self.actor_target, self.actor, cfg.tau)
                soft_update(self.critics_target, self.critics, cfg.tau)
        if cfg.target_update_period and self.updates % cfg.target_update_period == 0:
            self.actor_target.load_state_dict(self.actor.state_dict())
            self.critics_target.load_state_dict(self.critics.state_dict())

        td_errors = (q_values[0] - target).detach().abs().cpu().numpy()
        stats = {
            "critic_loss": critic_loss.item(),
            "actor_loss": self.last_actor_loss,
            "q_mean": q_values[0].detach().mean().item(),
            "td_error_mean": float(td_errors.mean()),
            "nonfinite_skipped": 0.0,
        }
        return stats, td_errors

    # -- parameters and checkpoints -----------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        """The actor's weights, and whether actors should still act uniformly at random (no update yet)."""
        actor = {k: v.detach().cpu().numpy() for k, v in self.actor.state_dict().items()}
        return {"actor": actor, "warmup": np.array(self.updates == 0)}

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
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critics.load_state_dict(state["critics"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.critics_target.load_state_dict(state["critics_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])


def make_policy(
    obs_space: spaces.Box, act_space: spaces.Box, cfg: DDPGConfig, actor_index: int, num_actors: int = 1
) -> DDPGPolicy:
    return DDPGPolicy(obs_space, act_space, cfg, actor_index, num_actors)


def make_collector(
    envs: gym.vector.VectorEnv, policy: DDPGPolicy, cfg: DDPGConfig, actor_index: int, chunk_steps: int
) -> NStepCollector:
    return NStepCollector(RolloutCollector(envs, policy, chunk_steps, actor_index), cfg.n_step, cfg.gamma)


def make_learner(
    obs_space: spaces.Box, act_space: spaces.Box, cfg: DDPGConfig, device: torch.device, *, compile: bool = False
) -> DDPGLearner:
    del compile  # no compiled path yet: the update runs eagerly
    return DDPGLearner(obs_space, act_space, cfg, device)
