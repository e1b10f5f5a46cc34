"""A learner's place in a data-parallel group (`learner.replicas=K`): which share of every minibatch it computes,
and the all-reduce that averages its gradients with the other ranks' in each optimizer step. These are hooks around
an algorithm's step, which calls them whether or not it has company: a learner alone is `ALONE`, rank 0 of a group
of one, whose hooks do nothing, so no algorithm asks whether it runs in a group.

Every rank holds the same parameters and draws the same random numbers (same seed, state synchronized at the
group's start); each computes the loss on its 1/K of a minibatch, and the gradients averaged over the ranks are
those of the whole minibatch (every loss is a mean over equal shares). Clipping and the optimizer step then run on
identical gradients, so the ranks stay identical without ever sending parameters.

An explicit all-reduce, not DistributedDataParallel: the losses call the networks' own methods (value,
log-probabilities, stacked critics), not one module's `forward` that DDP's hooks follow; a small network's
gradients are one buffer, so one collective per step is all DDP's buckets would do; and the step stays the
algorithm's own function, its loss compiled as before. A rank's step is not captured as a CUDA graph: a
collective inside a graph would tie the communicator to the replayed graph and outlive the timeouts that keep a
lost rank from hanging the others. What must agree across ranks travels in the same buffer: a step that went
non-finite on any rank is skipped on all of them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Replica:
    """Rank `rank` of `size` in torch.distributed's default group (the learner group's gradient group,
    roles/learner_group.py)."""

    rank: int
    size: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is not in a group of {self.size}")

    def share(self, n: int) -> slice:
        """This rank's rows of `n` (a multiple of `size`): the ranks' shares, in rank order, make all `n`."""
        if n % self.size:
            raise ValueError(f"{n} rows do not split into {self.size} equal shares")
        each = n // self.size
        return slice(self.rank * each, (self.rank + 1) * each)

    def share_of(self, minibatch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """This rank's rows (along the first dimension) of every tensor of `minibatch`; alone, the minibatch itself."""
        if self.size == 1:
            return minibatch
        rows = self.share(len(next(iter(minibatch.values()))))
        return {k: v[rows] for k, v in minibatch.items()}

    def mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` averaged over the ranks, in place (a sum, then divided: gloo has no average); a group of one has
        nothing to average."""
        if self.size == 1:
            return tensor
        dist.all_reduce(tensor)
        return tensor.div_(self.size)

    def average_gradients(self, parameters: Iterable[torch.Tensor]) -> None:
        """Average the gradients of `parameters` over the ranks, in one all-reduce."""
        if self.size > 1:
            self._average(self._grads(parameters), None)

    def average_gradients_agreeing(self, parameters: Iterable[torch.Tensor], bad: torch.Tensor) -> torch.Tensor:
        """`average_gradients`, with `bad` (a boolean: this rank's step went non-finite) in the same buffer; returns
        whether it went bad on any rank, so that every rank skips the same steps."""
        if self.size == 1:
            return bad
        averaged = self._average(self._grads(parameters), bad)
        assert averaged is not None
        return averaged > 0

    @staticmethod
    def _grads(parameters: Iterable[torch.Tensor]) -> list[torch.Tensor]:
        """The gradients of the trainable `parameters`; one without a gradient gets zeros (as on every rank)."""
        grads = []
        for p in parameters:
            if p.requires_grad:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                grads.append(p.grad)
        return grads

    def _average(self, grads: list[torch.Tensor], flag: torch.Tensor | None) -> torch.Tensor | None:
        """All-reduce `grads` (and `flag`, as a number) as one flat buffer, averaged, copied back into `grads`;
        returns the averaged flag."""
        extra = [] if flag is None else [flag.reshape(1).to(grads[0].dtype)]
        flat = self.mean(torch.cat([*(g.reshape(-1) for g in grads), *extra]))
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        return None if flag is None else flat[-1]

    def randn_share(
        self, shape: tuple[int, ...], dim: int, generator: torch.Generator, device: torch.device
    ) -> torch.Tensor:
        """Normal noise of `shape` (this rank's share along `dim`): the noise of the whole minibatch, drawn as a
        single learner draws it, cut to this rank's rows, so K ranks draw exactly what one learner would."""
        if self.size == 1:
            return torch.randn(shape, generator=generator, device=device)
        whole = list(shape)
        whole[dim] *= self.size
        noise = torch.randn(whole, generator=generator, device=device)
        return noise.narrow(dim, self.rank * shape[dim], shape[dim]).contiguous()


ALONE = Replica(0, 1)  # a learner without a group


def bytes_from_rank_0(payload: bytes | None, limit: int, group: Any = None) -> bytes:
    """`payload` (rank 0's; None on the others) on every rank of `group`: its length, then its bytes, each one
    collective bounded by the group's timeout. A length outside 1..`limit` is refused before anything is allocated
    for it. The learner group's orders and its state at the start travel this way (roles/learner_group.py)."""
    size = torch.tensor([0 if payload is None else len(payload)], dtype=torch.int64)
    dist.broadcast(size, 0, group=group)
    n = int(size.item())
    if not 0 < n <= limit:
        raise ValueError(f"a message of {n} bytes from rank 0 (limit {limit})")
    buffer = (
        torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        if payload is not None
        else torch.empty(n, dtype=torch.uint8)
    )
    dist.broadcast(buffer, 0, group=group)
    return payload if payload is not None else buffer.numpy().tobytes()


def end_group_process(code: int) -> NoReturn:
    """End a process that joined a gloo group with exit status `code`, skipping the interpreter's shutdown.

    gloo's worker threads drop their hold on a collective's tensors after the collective has completed, and
    dropping it takes the GIL. `destroy_process_group` does not join those threads, so one that is still waiting
    for the GIL when the interpreter finalizes aborts the whole process ("terminate called without an active
    exception", SIGABRT): a rank that finished cleanly would be reported as crashed, at random and more often on a
    busy machine. Everything the process writes is flushed first; its sockets and files the kernel closes.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
