"""Replay samplers, TorchRL-style: which of a storage's slots a reply takes (replay/buffers.py holds the data). Each
keeps the `Sampler` protocol and its state as a snapshot holds it (`capture`, `restored`): a prioritized sampler's
books are a `TypedDict`, the others have none. Numpy only.
"""

from __future__ import annotations

from typing import Any, Protocol, Self, TypedDict, TypeVar, cast

import numpy as np

from surreal.replay.buffers import ChunkFifo, TransitionStorage
from surreal.replay.snapfile import ShardState
from surreal.replay.sumtree import SumTree

MAX_PRIORITY = 1e6  # |TD error| above this counts as this (priorities are finite: anything else is refused)
Picked = tuple[np.ndarray, np.ndarray | None]  # the slots a reply takes and, from a prioritized sampler, their weights
Part = tuple[dict[str, Any], dict[str, list[np.ndarray]]]  # a sampler's books and arrays in a snapshot

S = TypeVar("S", contravariant=True)


class Sampler(Protocol[S]):
    """Which slots of a storage `S` a reply takes (TorchRL's `Sampler`), and what it keeps per slot."""

    weighted: bool  # its replies carry importance weights
    updates: int  # priority updates applied: with the storage's books, what says whether a snapshot is due

    def on_add(self, slots: np.ndarray) -> None:
        """The storage wrote `slots`."""

    def sample(self, storage: S, batch_size: int, rng: np.random.Generator) -> Picked: ...

    def update_priorities(self, storage: S, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> int:
        """How many applied; ValueError for an update this sampler cannot apply."""

    def capture(self, size: int) -> Part:
        """Its state over the storage's `size` slots, as a snapshot writes it."""

    def restored(self, state: ShardState, size: int) -> Self:
        """A new sampler of the same settings holding what `state` holds over `size` slots."""


class Unprioritized:
    """A sampler that keeps nothing per slot: no priorities to update, no state."""

    weighted = False
    updates = 0
    kind = ""

    def on_add(self, slots: np.ndarray) -> None:
        del slots

    def update_priorities(self, storage: object, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> int:
        raise ValueError(f"a {self.kind} replay has no priorities")

    def capture(self, size: int) -> Part:
        return {}, {}

    def restored(self, state: ShardState, size: int) -> Self:
        return self


class InOrder(Unprioritized):
    """Whole chunks in arrival order, each once: as many of the oldest as a reply of `batch_size` transitions
    carries (`ChunkFifo.fitting`). Nothing drawn."""

    kind = "fifo"

    def sample(self, storage: ChunkFifo, batch_size: int, rng: np.random.Generator) -> Picked:
        return np.arange(storage.fitting(batch_size)), None


class UniformSampler(Unprioritized):
    """Slots uniformly with replacement over the filled part; the ring fills [0, size) before it wraps."""

    kind = "uniform"

    def sample(self, storage: TransitionStorage, batch_size: int, rng: np.random.Generator) -> Picked:
        if storage.size == 0:
            raise ValueError("cannot sample from an empty storage")
        return rng.integers(0, storage.size, size=batch_size, dtype=np.int64), None


class PriorityBooks(TypedDict):
    """A prioritized sampler's books in a snapshot (each slot's priority is the array `priorities`)."""

    max_priority: float


class PrioritizedSampler:
    """Proportional prioritization (Schaul et al. 2016): P(i) = p_i / sum_k p_k with p = (|delta| + eps)^alpha.

    New transitions enter at the largest priority seen so far, so each is likely to be replayed at least
    once before the learner has scored it. `beta` may be reassigned at any time: annealing it towards 1
    is the learner's choice.
    """

    weighted = True

    def __init__(self, capacity: int, alpha: float, beta: float, eps: float) -> None:
        if alpha < 0 or beta < 0:
            raise ValueError(f"alpha and beta must be >= 0 (got {alpha}, {beta})")
        if not eps > 0:  # a zero priority makes a slot unreachable and the weights' normaliser zero
            raise ValueError(f"eps must be > 0 (got {eps})")
        self.tree = SumTree(capacity)
        self.alpha = alpha
        self.beta = beta
        self.eps = eps
        self.max_priority = 1.0  # of |delta| + eps, before the alpha exponent
        self.updates = 0

    def on_add(self, slots: np.ndarray) -> None:
        self.tree.update(slots, np.full(len(slots), self.max_priority**self.alpha))

    def sample(self, storage: TransitionStorage, batch_size: int, rng: np.random.Generator) -> Picked:
        """Stratified: [0, total) cut into `batch_size` equal segments, one uniform draw in each, which
        keeps a batch spread over the priority mass. Returns (slots, float32 importance weights)."""
        if storage.size == 0:
            raise ValueError("cannot sample from an empty storage")
        segment = self.tree.total / batch_size
        slots = self.tree.find_prefix_sum((np.arange(batch_size) + rng.random(batch_size)) * segment)
        # w_i = (N P(i))^-beta / max_j w_j, and the largest weight is that of the smallest priority, so
        # N and the total cancel: w_i = (p_min / p_i)^beta.
        weights = (self.tree.min / self.tree.get(slots)) ** self.beta
        return slots, weights.astype(np.float32)

    def update_priorities(
        self, storage: TransitionStorage, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray
    ) -> int:
        """Set p = (min(|priority|, MAX_PRIORITY) + eps)^alpha where `storage.ids[slots] == ids`; returns how
        many applied. The clamp keeps every importance weight meaningful whatever a client sends: one huge
        priority would otherwise shrink every other slot's share, and so its weight, to nothing.

        Entries for slots overwritten since they were sampled (or never written) are skipped: their
        priority was computed for a transition that is no longer there. More entries than one reply carries (a
        learner sends those of a sample it was served, never more) are refused.
        """
        if len(slots) > storage.max_batch(self.weighted):
            raise ValueError(f"{len(slots)} priorities: more than a reply of this shard carries")
        slots = np.asarray(slots, dtype=np.int64)
        ids = np.asarray(ids, dtype=np.uint64)
        priorities = np.asarray(priorities, dtype=np.float64)
        if not (slots.ndim == 1 and slots.shape == ids.shape == priorities.shape):
            raise ValueError(f"slots {slots.shape}, ids {ids.shape}, priorities {priorities.shape} must match")
        if slots.size and (slots.min() < 0 or slots.max() >= storage.capacity):
            raise ValueError(f"slot out of range [0, {storage.capacity})")
        if not np.all(np.isfinite(priorities)):
            raise ValueError("priorities must be finite")
        current = (storage.ids[slots] == ids) & (ids != 0)
        fresh = np.minimum(np.abs(priorities[current]), MAX_PRIORITY) + self.eps
        if fresh.size:
            self.max_priority = max(self.max_priority, float(fresh.max()))
            self.tree.update(slots[current], fresh**self.alpha)
        self.updates += int(fresh.size)
        return int(fresh.size)

    def capture(self, size: int) -> Part:
        books: PriorityBooks = {"max_priority": self.max_priority}
        return dict(books), {"priorities": [self.tree.head(size)]}

    def restored(self, state: ShardState, size: int) -> PrioritizedSampler:
        sampler = PrioritizedSampler(self.tree.capacity, self.alpha, self.beta, self.eps)
        sampler.tree.update(np.arange(size), state.arrays["priorities"])
        sampler.max_priority = float(cast(PriorityBooks, state.books)["max_priority"])
        sampler.updates = self.updates
        return sampler
