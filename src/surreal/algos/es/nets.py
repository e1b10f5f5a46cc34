"""ES's network and its noise: a flat-parameter tanh MLP that evaluates K parameter vectors on K inputs at once (one
perturbed policy per environment), and the Gaussian noise table every process builds from the same seed, so only a
perturbation's offset within it travels. NumPy: the policy is small enough that batched matrix products beat
torch's per-call overhead (torch only for export)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


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
