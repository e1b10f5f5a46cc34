"""`n` MLPs of one shape as one module (`StackedMLP`): DDPG's and SAC's critics, SAC's actor; with SAC's norms."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from surreal.algos.sac.config import SACConfig


class BatchRenorm(nn.Module):
    """Batch renormalization (Ioffe 2017) of `n` stacked networks' features, [n, B, F] over the batch axis.

    Training: normalize with the batch's statistics, then correct towards the running ones by r (clipped to
    [1/r_max, r_max]) and d (clipped to [-d_max, d_max]), both without gradient; plain batch norm (r = 1,
    d = 0) for the first `warmup` training passes, while the running statistics settle. Evaluation: the
    running statistics. Running statistics are not parameters: every training pass moves them, a step the
    optimizer skips included.

    A training pass only records its batch's statistics; `commit` then moves the running ones. The loss is
    what torch.compile compiles, and a compiled backward may recompute r and d from the statistics it read:
    had the pass updated them in place, it would find the new ones (measured: other gradients than eager)."""

    running_mean: torch.Tensor
    running_var: torch.Tensor
    steps: torch.Tensor
    batch_mean: torch.Tensor
    batch_var: torch.Tensor

    def __init__(self, n: int, features: int, cfg: SACConfig, eps: float = 1e-3) -> None:
        super().__init__()
        self.momentum, self.warmup, self.eps = cfg.renorm_momentum, cfg.renorm_warmup, eps
        self.r_max, self.d_max = cfg.renorm_r_max, cfg.renorm_d_max
        self.weight = nn.Parameter(torch.ones(n, 1, features))
        self.bias = nn.Parameter(torch.zeros(n, 1, features))
        self.register_buffer("running_mean", torch.zeros(n, 1, features))
        self.register_buffer("running_var", torch.ones(n, 1, features))
        self.register_buffer("steps", torch.zeros(()))
        self.register_buffer("batch_mean", torch.zeros(n, 1, features), persistent=False)
        self.register_buffer("batch_var", torch.ones(n, 1, features), persistent=False)

    def forward(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        if not train:
            return (x - self.running_mean) / torch.sqrt(self.running_var + self.eps) * self.weight + self.bias
        mean = x.mean(-2, keepdim=True)
        var = x.var(-2, unbiased=False, keepdim=True)
        std = torch.sqrt(var + self.eps)
        running_std = torch.sqrt(self.running_var + self.eps)
        warm = (self.steps >= self.warmup).to(x.dtype)
        r = warm * (std.detach() / running_std).clamp(1 / self.r_max, self.r_max) + (1 - warm)
        d = warm * ((mean.detach() - self.running_mean) / running_std).clamp(-self.d_max, self.d_max)
        with torch.no_grad():
            self.batch_mean.copy_(mean)
            self.batch_var.copy_(var)
        return ((x - mean) / std * r + d) * self.weight + self.bias

    @torch.no_grad()
    def commit(self) -> None:
        """Move the running statistics towards the last training pass's batch."""
        self.running_mean.lerp_(self.batch_mean, 1 - self.momentum)
        self.running_var.lerp_(self.batch_var, 1 - self.momentum)
        self.steps.add_(1)

    def statistics(self) -> list[torch.Tensor]:
        return [self.running_mean, self.running_var]


class StackedLayerNorm(nn.Module):
    """Layer norm over the features of `n` stacked networks, each with its own gain and bias."""

    def __init__(self, n: int, features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, 1, features))
        self.bias = nn.Parameter(torch.zeros(n, 1, features))

    def forward(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        del train
        return F.layer_norm(x, x.shape[-1:]) * self.weight + self.bias


class StackedMLP(nn.Module):
    """`n` ReLU MLPs of one shape as one module (twin critics; the actor is n = 1): each layer's weights are
    stacked [n, in, out], so all members run in one batched matmul per layer. Every member is initialized
    as nn.Linear initializes its layers. `norm` as sac/learner.py's docstring places it."""

    def __init__(self, sizes: list[int], n: int, norm: str = "none", cfg: SACConfig | None = None) -> None:
        super().__init__()
        self.n, self.norm = n, norm
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
            bound = 1.0 / math.sqrt(n_in)
            self.weights.append(nn.Parameter(torch.empty(n, n_in, n_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(n, 1, n_out).uniform_(-bound, bound)))
        hidden = sizes[1:-1]
        self.norms = nn.ModuleList()
        if norm == "layer":
            self.norms.extend(StackedLayerNorm(n, h) for h in hidden)
        elif norm == "batch_renorm":
            assert cfg is not None, "batch renormalization's settings"
            self.norms.extend(BatchRenorm(n, h, cfg) for h in [sizes[0], *hidden])

    def forward(self, x: torch.Tensor, train: bool, frozen: int = 0) -> torch.Tensor:
        """[B, in] -> [n, B, out]. `frozen`: only the first `frozen` members ([frozen, B, out]), their weights
        detached (the actor's loss differentiates through the critic's input, never into its weights)."""
        x = x.expand(frozen or self.n, *x.shape)
        norms = list(self.norms)
        if self.norm == "batch_renorm":
            x = norms.pop(0)(x, train)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            if frozen:
                weight, bias = weight[:frozen].detach(), bias[:frozen].detach()
            x = torch.baddbmm(bias, x, weight)
            if i < last:
                if self.norm == "layer":
                    x = norms[i](x, train)
                x = torch.relu(x)
                if self.norm == "batch_renorm":
                    x = norms[i](x, train)
        return x

    def statistics(self) -> list[torch.Tensor]:
        """Running statistics (batch renormalization's), which target networks follow as they follow weights."""
        return [s for norm in self.norms if isinstance(norm, BatchRenorm) for s in norm.statistics()]

    def commit(self) -> None:
        """After a training pass (one per commit): batch renormalization's running statistics move."""
        for norm in self.norms:
            if isinstance(norm, BatchRenorm):
                norm.commit()
