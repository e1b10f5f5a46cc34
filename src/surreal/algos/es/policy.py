"""ES's actor side: the policy (theta and the observation statistics as the learner published them, acting
deterministically), the collector that evaluates antithetic perturbation pairs, and the fields its chunks hold."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from torch import nn

from surreal.algos.es.config import ESConfig
from surreal.algos.es.nets import FlatMLP, NoiseTable
from surreal.algos.inference import AsFloat32, DeterministicPolicy, NormalizeObservations, action_head, description
from surreal.algos.normalizer import RunningMeanStd
from surreal.proto.wire import Chunk, Field, Fields
from surreal.spaces import space_dims


class ESPolicy:
    """theta and the observation statistics as the learner published them; acts deterministically."""

    numpy_forward = True  # its deterministic actions are NumPy's (load_policy runs them, not the torch module)

    def __init__(self, obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: ESConfig) -> None:
        obs_dim, act_dim = space_dims(cfg, obs_space, act_space)
        self.cfg = cfg
        self.net = FlatMLP(obs_dim, act_dim, list(cfg.hidden_sizes))
        self.theta = np.zeros(self.net.dim, np.float32)
        self.obs_rms = RunningMeanStd((obs_dim,))
        self.act_space = act_space

    def load_params(self, arrays: dict[str, Any]) -> None:
        self.theta = np.asarray(arrays["theta"], np.float32).copy()
        self.obs_rms.load(arrays["obs_norm"])

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        return self.obs_rms.normalize(obs, self.cfg.obs_clip) if self.cfg.obs_norm else obs.astype(np.float32)

    def act_with(self, thetas: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Env actions of K policies on K observations: a Box's outputs clipped to its bounds, or a Discrete's
        argmax (shifted by the space's start)."""
        outputs = self.net.forward(thetas, self.normalize(obs))
        space = self.act_space
        if isinstance(space, spaces.Discrete):
            return outputs.argmax(-1) + space.start
        return np.clip(outputs, space.low, space.high)  # type: ignore[attr-defined]  # a Box

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self.act_with(np.broadcast_to(self.theta, (len(obs), self.net.dim)), obs)

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        actions = self.act_deterministic(obs)
        return actions, {"actions": actions.astype(np.float32)}

    def params(self) -> dict[str, Any]:
        """The blob `load_params` takes, as this policy holds it."""
        return {"theta": self.theta.copy(), "obs_norm": self.obs_rms.state()}

    def inference_module(self) -> nn.Module:
        """`act_deterministic` as torch layers (algos/inference.py). Its matrix products are torch's, not NumPy's
        einsum: equal to `act_deterministic` to float32 rounding, not bit for bit, which is why `load_policy` runs
        ES through `act_deterministic` itself (`numpy_forward`) and uses this module only to export."""
        cfg = self.cfg
        preprocess = NormalizeObservations(self.obs_rms, cfg.obs_clip) if cfg.obs_norm else AsFloat32()
        network = self.net.torch_layers(self.theta)
        return DeterministicPolicy(preprocess, network, action_head(self.act_space)[0]).eval()

    def describe(self) -> dict[str, Any]:
        """The network, action head and normalizer, as the policy artifact's header states them."""
        cfg = self.cfg
        network = {"kind": "mlp", "hidden_sizes": list(cfg.hidden_sizes), "activation": "tanh"}
        return description(network, self.act_space, cfg.obs_norm, cfg.obs_clip)

    def episode_done(self, done: np.ndarray) -> None:
        del done

    def sampling_state(self) -> dict[str, Any]:
        return {}  # deterministic: the perturbations are the collector's draws

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        del state


class ESCollector:
    """Evaluates `pairs_per_chunk` antithetic pairs per chunk on the actor's K environments: each
    environment runs one perturbed policy, and takes the next pending episode when its episode ends."""

    def __init__(self, envs: gym.vector.VectorEnv, policy: ESPolicy, cfg: ESConfig, actor_index: int) -> None:
        self.envs = envs
        self.policy = policy
        self.cfg = cfg
        self.actor_index = actor_index
        self.chunk_size = cfg.pairs_per_chunk
        self.table = NoiseTable(cfg.noise_table_size, cfg.noise_seed)
        self.rng = np.random.default_rng([cfg.seed, actor_index])

    def collect(self, version: int) -> Chunk:
        cfg, policy, K, P = self.cfg, self.policy, self.envs.num_envs, self.cfg.pairs_per_chunk
        dim, obs_dim = policy.net.dim, policy.obs_rms.mean.shape[0]
        offsets = np.array([self.table.sample_offset(self.rng, dim) for _ in range(P)], np.int64)
        pending = [(pair, sign) for pair in range(P) for sign in (0, 1)]  # sign 0: theta + sigma eps
        returns = np.zeros((P, 2), np.float32)
        lengths = np.zeros((P, 2), np.int32)
        obs_sum, obs_sumsq = np.zeros((P, obs_dim)), np.zeros((P, obs_dim))
        slot_episode: list[tuple[int, int] | None] = [None] * K
        thetas = np.empty((K, dim), np.float32)
        slot_return, slot_length = np.zeros(K), np.zeros(K, np.int64)

        def start(slot: int) -> None:
            if not pending:
                slot_episode[slot] = None
                return
            pair, sign = pending.pop(0)
            eps = self.table.get(int(offsets[pair]), dim)
            thetas[slot] = policy.theta + (cfg.sigma if sign == 0 else -cfg.sigma) * eps
            slot_episode[slot] = (pair, sign)
            slot_return[slot], slot_length[slot] = 0.0, 0

        obs, _ = self.envs.reset()
        for slot in range(K):
            start(slot)
        steps = 0
        while any(episode is not None for episode in slot_episode):
            for slot, episode in enumerate(slot_episode):
                if episode is not None:
                    obs_sum[episode[0]] += obs[slot]
                    obs_sumsq[episode[0]] += np.square(obs[slot], dtype=np.float64)
            next_obs, rewards, terminated, truncated, _ = self.envs.step(policy.act_with(thetas, obs))
            for slot, episode in enumerate(slot_episode):
                if episode is None:
                    continue
                steps += 1
                slot_return[slot] += rewards[slot]
                slot_length[slot] += 1
                if terminated[slot] or truncated[slot]:  # SAME_STEP autoreset: next_obs starts the next one
                    returns[episode] = slot_return[slot]
                    lengths[episode] = slot_length[slot]
                    start(slot)
            obs = next_obs
        counts = lengths.sum(axis=1).astype(np.float64)
        arrays = {
            "noise_offsets": offsets[None],
            "returns": returns[None],
            "lengths": lengths[None],
            "obs_sum": obs_sum[None],
            "obs_sumsq": obs_sumsq[None],
            "obs_count": counts[None],
        }
        return Chunk(arrays, version, self.actor_index, returns.ravel().tolist(), lengths.ravel().tolist(), steps=steps)

    def state(self) -> dict[str, Any]:
        """The perturbation draws so far (every chunk starts its episodes afresh: nothing else carries over)."""
        return {"rng": self.rng.bit_generator.state}

    def load_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]


def make_policy(
    obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: ESConfig, actor_index: int, num_actors: int = 1
) -> ESPolicy:
    del actor_index, num_actors  # exploration is the perturbations, drawn by the collector
    return ESPolicy(obs_space, act_space, cfg)


def make_collector(
    envs: gym.vector.VectorEnv, policy: ESPolicy, cfg: ESConfig, actor_index: int, chunk_steps: int
) -> ESCollector:
    del chunk_steps  # a chunk is `pairs_per_chunk` whole-episode evaluations
    return ESCollector(envs, policy, cfg, actor_index)


def chunk_fields(obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: ESConfig) -> Fields:
    """One antithetic pair of an `ESCollector` chunk: what every chunk the learner takes must hold (proto/wire.py
    `ReplyLayout`), its noise offsets within the table (an offset past it would cut the perturbation short)."""
    obs_dim, act_dim = space_dims(cfg, obs_space, act_space)
    dim = FlatMLP(obs_dim, act_dim, list(cfg.hidden_sizes)).dim
    f64 = np.dtype(np.float64)
    return {
        "noise_offsets": Field(np.dtype(np.int64), (), 0, cfg.noise_table_size - dim),
        "returns": Field(np.dtype(np.float32), (2,)),
        "lengths": Field(np.dtype(np.int32), (2,), 0, None),
        "obs_sum": Field(f64, (obs_dim,)),
        "obs_sumsq": Field(f64, (obs_dim,)),
        "obs_count": Field(f64),
    }
