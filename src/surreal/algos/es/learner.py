"""OpenAI Evolution Strategies (Salimans et al. 2017), distributed over the shared roles.

theta is a flat parameter vector of a small tanh MLP with a deterministic output. Each generation the
actors evaluate antithetic pairs theta + sigma * eps and theta - sigma * eps, where eps is a slice of a
Gaussian noise table that every process builds from the same seed, so only the slice's offset and the two
returns travel. The learner turns the returns into centered ranks (fitness shaping), estimates the
gradient, applies weight decay and an Adam step to theta, merges the observation statistics the actors
gathered and publishes theta. Results computed for an older theta are useless to this update: they are
dropped and counted, and actors run in lock-step with the versions (the "lockstep" rule,
runtime/regimes/versions.py).
Numpy only: the policy is small enough that batched matrix products beat torch's per-call overhead. Discrete actions
(CartPole) take the argmax of the MLP's outputs, one per action: the policy stays deterministic, and nothing else
changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from surreal.algos.es.config import ESConfig
from surreal.algos.inference import (
    AsFloat32,
    DeterministicPolicy,
    NormalizeObservations,
    action_head,
    description,
)
from surreal.algos.normalizer import RunningMeanStd
from surreal.algos.replica import Replica
from surreal.proto.wire import Chunk, Field, Fields
from surreal.spaces import space_dims

# -- the math ---------------------------------------------------------------------------------------------


class NoiseTable:
    """The shared Gaussian noise: the same `size` float32 numbers in every process that uses `seed`."""

    def __init__(self, size: int, seed: int) -> None:
        self.noise = np.random.default_rng(seed).standard_normal(size, dtype=np.float32)

    def get(self, offset: int, dim: int) -> np.ndarray:
        return self.noise[offset : offset + dim]

    def sample_offset(self, rng: np.random.Generator, dim: int) -> int:
        if dim > len(self.noise):
            raise ValueError(f"noise table ({len(self.noise)}) is smaller than the policy ({dim} parameters)")
        return int(rng.integers(0, len(self.noise) - dim + 1))


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Fitness shaping: each value replaced by its rank, scaled to [-0.5, 0.5] (ties broken by order)."""
    ranks = np.empty(x.size, np.float32)
    ranks[x.ravel().argsort()] = np.arange(x.size, dtype=np.float32)
    return (ranks / max(x.size - 1, 1) - 0.5).reshape(x.shape)


def es_gradient(fitness_pos: np.ndarray, fitness_neg: np.ndarray, noise: np.ndarray, sigma: float) -> np.ndarray:
    """The antithetic estimate of grad E[F(theta + sigma eps)]: sum_i (F+_i - F-_i) eps_i / (2 n sigma).

    With raw returns it estimates the gradient of the Gaussian-smoothed objective; with centered ranks,
    the direction the paper follows."""
    weights = np.asarray(fitness_pos, np.float32) - np.asarray(fitness_neg, np.float32)
    return (weights @ noise) / (2.0 * len(weights) * sigma)


class Adam:
    """Adam on a flat numpy vector (the paper's optimizer for theta)."""

    def __init__(self, dim: int, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> None:
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = np.zeros(dim, np.float32)
        self.v = np.zeros(dim, np.float32)
        self.t = 0

    def step(self, theta: np.ndarray, grad: np.ndarray) -> np.ndarray:
        """Returns the new theta, a step *down* `grad`."""
        self.t += 1
        self.m = (self.beta1 * self.m + (1 - self.beta1) * grad).astype(np.float32)
        self.v = (self.beta2 * self.v + (1 - self.beta2) * grad * grad).astype(np.float32)
        step = self.lr * np.sqrt(1 - self.beta2**self.t) / (1 - self.beta1**self.t)
        return (theta - step * self.m / (np.sqrt(self.v) + self.eps)).astype(np.float32)


# -- the policy: a flat-parameter MLP -------------------------------------------------------------------


class FlatMLP:
    """A tanh MLP whose weights are views into one flat vector; evaluates K parameter vectors on K inputs
    at once (one perturbed policy per environment)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int]) -> None:
        sizes = [obs_dim, *hidden_sizes, act_dim]
        self.shapes = [(n_out, n_in) for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True)]
        self.dim = sum(o * i + o for o, i in self.shapes)

    def init(self, rng: np.random.Generator) -> np.ndarray:
        """The paper's normalized-column init: rows of unit norm (0.01 for the output layer), zero biases."""
        parts = []
        for layer, (n_out, n_in) in enumerate(self.shapes):
            std = 0.01 if layer == len(self.shapes) - 1 else 1.0
            w = rng.standard_normal((n_out, n_in)).astype(np.float32)
            parts += [(w * std / np.linalg.norm(w, axis=1, keepdims=True)).ravel(), np.zeros(n_out, np.float32)]
        return np.concatenate(parts)

    def forward(self, thetas: np.ndarray, x: np.ndarray) -> np.ndarray:
        """thetas [K, dim], x [K, obs_dim] -> [K, act_dim]."""
        start, h = 0, x.astype(np.float32)
        for layer, (n_out, n_in) in enumerate(self.shapes):
            w = thetas[:, start : start + n_out * n_in].reshape(-1, n_out, n_in)
            start += n_out * n_in
            b = thetas[:, start : start + n_out]
            start += n_out
            h = np.einsum("koi,ki->ko", w, h) + b
            if layer < len(self.shapes) - 1:
                h = np.tanh(h)
        return h

    def torch_layers(self, theta: np.ndarray) -> nn.Sequential:
        """theta as torch Linear and Tanh layers (for export; the actors' NumPy forward is the reference)."""
        layers: list[nn.Module] = []
        start = 0
        for layer, (n_out, n_in) in enumerate(self.shapes):
            linear = nn.Linear(n_in, n_out)
            linear.weight.data = torch.from_numpy(theta[start : start + n_out * n_in].reshape(n_out, n_in).copy())
            start += n_out * n_in
            linear.bias.data = torch.from_numpy(theta[start : start + n_out].copy())
            start += n_out
            layers += [linear, nn.Tanh()] if layer < len(self.shapes) - 1 else [linear]
        return nn.Sequential(*layers).requires_grad_(False)


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


# -- actor side: evaluating perturbation pairs -----------------------------------------------------------


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


# -- learner side ---------------------------------------------------------------------------------------


class ESLearner:
    def __init__(
        self, obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: ESConfig, device: torch.device
    ) -> None:
        del device  # numpy on the CPU: an ES update is one matrix-vector product
        obs_dim, act_dim = space_dims(cfg, obs_space, act_space)
        self.cfg = cfg
        self.net = FlatMLP(obs_dim, act_dim, list(cfg.hidden_sizes))
        self.theta = self.net.init(np.random.default_rng(cfg.seed))
        self.optimizer = Adam(self.net.dim, cfg.lr)
        self.obs_rms = RunningMeanStd((obs_dim,))
        self.table = NoiseTable(cfg.noise_table_size, cfg.noise_seed)
        self.updates = 0

    def update(self, chunks: list[Chunk], progress: float) -> dict[str, float]:
        """One generation: every pair of every chunk, rank-shaped, one Adam step with weight decay."""
        del progress
        offsets = np.concatenate([np.asarray(c.arrays["noise_offsets"]).ravel() for c in chunks])
        returns = np.concatenate([np.asarray(c.arrays["returns"]).reshape(-1, 2) for c in chunks])
        noise = np.stack([self.table.get(int(o), self.net.dim) for o in offsets])
        shaped = centered_ranks(returns)
        grad = es_gradient(shaped[:, 0], shaped[:, 1], noise, self.cfg.sigma)
        old = self.theta
        self.theta = self.optimizer.step(old, -grad + self.cfg.weight_decay * old)
        if self.cfg.obs_norm:
            for c in chunks:
                count = np.asarray(c.arrays["obs_count"]).ravel()
                total = float(count.sum())
                if total > 0:
                    mean = np.asarray(c.arrays["obs_sum"]).reshape(-1, len(self.obs_rms.mean)).sum(0) / total
                    sumsq = np.asarray(c.arrays["obs_sumsq"]).reshape(-1, len(self.obs_rms.mean)).sum(0) / total
                    self.obs_rms.merge(total, mean, np.maximum(sumsq - mean**2, 0.0))
        self.updates += 1
        return {
            "population_return_mean": float(returns.mean()),
            "population_return_max": float(returns.max()),
            "pairs": float(len(offsets)),
            "grad_norm": float(np.linalg.norm(grad)),
            "update_ratio": float(np.linalg.norm(self.theta - old) / (np.linalg.norm(old) + 1e-8)),
            "theta_norm": float(np.linalg.norm(self.theta)),
            "lr": float(self.optimizer.lr),
        }

    def params(self) -> dict[str, Any]:
        return {"theta": self.theta.copy(), "obs_norm": self.obs_rms.state()}

    def state_dict(self) -> dict[str, Any]:
        """Only tensors and numbers (torch weights_only load); the noise table is rebuilt from its seed."""
        return {
            "theta": torch.from_numpy(self.theta.copy()),
            "adam_m": torch.from_numpy(self.optimizer.m.copy()),
            "adam_v": torch.from_numpy(self.optimizer.v.copy()),
            "adam_t": self.optimizer.t,
            "obs_rms": {k: torch.as_tensor(v) for k, v in self.obs_rms.state().items()},
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.theta = state["theta"].numpy().copy()
        self.optimizer.m, self.optimizer.v = state["adam_m"].numpy().copy(), state["adam_v"].numpy().copy()
        self.optimizer.t = int(state["adam_t"])
        self.obs_rms.load({k: v.numpy() for k, v in state["obs_rms"].items()})
        self.updates = int(state["updates"])


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


def make_learner(
    obs_space: spaces.Space[Any],
    act_space: spaces.Space[Any],
    cfg: ESConfig,
    device: torch.device,
    *,
    compile: bool = False,
    replica: Replica | None = None,
) -> ESLearner:
    """ES's update is one matrix-vector product on the CPU: nothing to compile, nor to split among ranks (config
    validation refuses `learner.replicas` > 1)."""
    del compile
    if replica is not None:
        raise ValueError("ES has no gradient update to split among learner ranks")
    return ESLearner(obs_space, act_space, cfg, device)


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


if TYPE_CHECKING:  # mypy checks this module against the interface the roles call
    from surreal.algos.es import learner as _this
    from surreal.algos.interface import Algorithm

    _CHECKED: Algorithm = _this
