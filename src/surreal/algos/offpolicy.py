"""What DDPG's and SAC's actors share: the policy's warm-up and sampling state (`OffPolicyPolicy`), and n-step
transitions, which the actors compute themselves (`NStepCollector`), so the replay stores ready transitions and the
learner stays agnostic of episodes. What a chunk's cell and a stored transition hold is `chunk_fields`."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from surreal.algos.inference import AsFloat32, DeterministicPolicy
from surreal.proto.wire import Chunk, Field, Fields
from surreal.runtime.frame_chunks import frame_fields, pack
from surreal.runtime.rollout import Policy, RolloutCollector
from surreal.spaces import is_channels_first

if TYPE_CHECKING:
    from surreal.algos.ddpg.config import DDPGConfig
    from surreal.algos.sac.config import SACConfig


def as_input(obs: np.ndarray) -> torch.Tensor:
    """Observations as the actor network takes them: images as the uint8 they are, vectors as float32."""
    return torch.from_numpy(obs if obs.dtype == np.uint8 else obs.astype(np.float32))


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
            actions = self.explore(as_input(obs))
        return actions, {"actions": actions}

    @torch.no_grad()
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self.mean_action(as_input(obs)).numpy()

    def params(self) -> dict[str, Any]:
        """The blob `load_params` takes, as this policy holds it."""
        return {"actor": {k: v.numpy() for k, v in self.actor.state_dict().items()}, "warmup": np.array(self.warmup)}

    def inference_module(self) -> nn.Module:
        """`act_deterministic` as one torch module (algos/inference.py), over copies of the weights; images go in as
        the uint8 they are (the encoder divides them)."""
        images = getattr(self.actor, "encoder", None) is not None
        preprocess = nn.Identity() if images else AsFloat32()
        return DeterministicPolicy(preprocess, copy.deepcopy(self.mean_action)).eval()

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


def chunk_fields(obs_space: spaces.Box, act_space: spaces.Box, cfg: DDPGConfig | SACConfig) -> Fields:
    """One transition as `n_step_transitions` makes it, what a chunk's cell and a stored transition hold: what every
    sample reply the learner takes must hold, field by field (proto/wire.py `ReplyLayout`)."""
    f32, obs, act = np.dtype(np.float32), tuple(obs_space.shape), tuple(act_space.shape)
    rest = {"actions": Field(f32, act), "rewards": Field(f32), "discounts": Field(f32)}
    if is_channels_first(obs_space):  # each frame once, and the stacks' indices (runtime/frame_chunks.py)
        return {**frame_fields(obs, getattr(cfg, "frame_planes", 1)), **rest}
    return {"obs": Field(f32, obs), **rest, "next_obs": Field(f32, obs)}


class NStepCollector:
    """Wraps the rollout collector: turns each chunk into n-step transitions, carrying the last n-1 steps
    of every environment into the next chunk so no transition is cut short by a chunk boundary."""

    def __init__(self, inner: RolloutCollector, n: int, gamma: float, planes: int | None = None) -> None:
        """`planes`: image observations, packed as frames of that many planes (`frame_chunks.pack`); None: vectors."""
        self.inner = inner
        self.planes = planes
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
        transitions = n_step_transitions(raw, self.n, self.gamma)
        return Chunk(
            transitions if self.planes is None else pack(transitions, self.planes),
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


def make_collector(
    envs: gym.vector.VectorEnv, policy: Policy, cfg: DDPGConfig | SACConfig, actor_index: int, chunk_steps: int
) -> NStepCollector:
    """DDPG's and SAC's: the actors compute n-step transitions (of images: each frame once, `chunk_fields`)."""
    planes = getattr(cfg, "frame_planes", 1) if is_channels_first(envs.single_observation_space) else None
    return NStepCollector(RolloutCollector(envs, policy, chunk_steps, actor_index), cfg.n_step, cfg.gamma, planes)
