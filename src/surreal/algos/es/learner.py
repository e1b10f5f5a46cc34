"""ES's learner side (Salimans et al. 2017): the returns of each antithetic pair theta +- sigma * eps turned into
centered ranks (fitness shaping), the gradient estimated from them and the shared noise table, weight decay and an
Adam step on theta, and the observation statistics the actors gathered merged in. Results computed for an older theta
are useless to an update: the versions regime's lockstep rule (runtime/regimes/versions.py) drops and counts them.
NumPy only; Discrete actions (CartPole) take the argmax of the MLP's outputs, one per action.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from surreal.algos.es.config import ESConfig
from surreal.algos.es.nets import FlatMLP, NoiseTable
from surreal.algos.normalizer import RunningMeanStd
from surreal.algos.replica import ALONE, Replica
from surreal.proto.wire import Chunk
from surreal.spaces import space_dims


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


class ESLearner:
    def __init__(
        self,
        obs_space: spaces.Space[Any],
        act_space: spaces.Space[Any],
        cfg: ESConfig,
        device: torch.device,
        *,
        compile: bool = False,
        replica: Replica = ALONE,
    ) -> None:
        """An ES update is one matrix-vector product in NumPy on the CPU: no device, nothing to compile, nor to split
        among ranks (config validation refuses `learner.replicas` > 1)."""
        del device, compile, replica
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
