"""Replay storage and samplers, composed TorchRL-style: storage holds data, a sampler picks slots.

- `ChunkFifo`: on-policy. Whole time-major chunks, served once each in arrival order, oldest dropped
  (and counted) when the capacity in transitions would be exceeded.
- `TransitionStorage`: off-policy ring buffer of transitions, preallocated from the first batch, with a
  monotonic insertion id per slot so a priority update for a slot that was overwritten since it was
  sampled can be recognised and ignored.
- `UniformSampler` / `PrioritizedSampler`: which slots a batch takes (and, for the latter, importance
  weights and priority updates, Schaul et al. 2016).
- `make_replay`: the facade the replay server talks to, the same for every mode.
Numpy only: the replay image never carries torch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from surreal.replay.sumtree import SumTree


def _leaves(arrays: dict[str, Any], prefix: str = "") -> list[tuple[str, np.ndarray]]:
    out: list[tuple[str, np.ndarray]] = []
    for key, value in arrays.items():
        if isinstance(value, dict):
            out.extend(_leaves(value, f"{prefix}{key}/"))
        else:
            out.append((f"{prefix}{key}", np.asarray(value)))
    return out


def flatten_time_major(arrays: dict[str, Any]) -> dict[str, np.ndarray]:
    """[T, K, ...] chunk arrays -> [T*K, ...] transitions, keyed by their a/b paths."""
    return {name: a.reshape(a.shape[0] * a.shape[1], *a.shape[2:]) for name, a in _leaves(arrays)}


# -- on-policy ------------------------------------------------------------------------------------------


@dataclass
class FifoItem:
    arrays: dict[str, Any]
    meta: dict[str, Any]
    transitions: int
    frames: int  # arrays in the chunk: what it costs in a reply's frame budget


class ChunkFifo:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.items: deque[FifoItem] = deque()
        self.size = 0
        self.added = 0
        self.served = 0
        self.dropped = 0
        self.dropped_chunks = 0

    def add(self, arrays: dict[str, Any], meta: dict[str, Any], transitions: int) -> None:
        if transitions > self.capacity:
            self.dropped += transitions
            self.dropped_chunks += 1
            return
        while self.size + transitions > self.capacity:
            oldest = self.items.popleft()
            self.size -= oldest.transitions
            self.dropped += oldest.transitions
            self.dropped_chunks += 1
        self.items.append(FifoItem(arrays, meta, transitions, len(_leaves(arrays))))
        self.size += transitions
        self.added += transitions

    def take(self, max_transitions: int, max_frames: int | None = None) -> list[FifoItem]:
        """Whole chunks in arrival order: at least one if any is held, then more while they fit in
        `max_transitions` and (when given) `max_frames` arrays, the receiver's frame limit."""
        taken: list[FifoItem] = []
        total = frames = 0
        while self.items and (
            not taken
            or (
                total + self.items[0].transitions <= max_transitions
                and (max_frames is None or frames + self.items[0].frames <= max_frames)
            )
        ):
            item = self.items.popleft()
            taken.append(item)
            total += item.transitions
            frames += item.frames
        self.size -= total
        self.served += total
        return taken


# -- off-policy -----------------------------------------------------------------------------------------


class TransitionStorage:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.data: dict[str, np.ndarray] = {}
        self.ids = np.zeros(capacity, dtype=np.uint64)
        self.cursor = 0
        self.size = 0
        self.next_id = 1  # 0 marks a slot never written

    def _allocate(self, batch: dict[str, np.ndarray]) -> None:
        self.data = {k: np.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype) for k, v in batch.items()}

    def add(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """Write N transitions (every array [N, ...]); returns the slots written."""
        lengths = {len(v) for v in batch.values()}
        if len(lengths) != 1:
            raise ValueError("all arrays of a batch must have the same length")
        n = lengths.pop()
        if not self.data:
            self._allocate(batch)
        if batch.keys() != self.data.keys():
            raise ValueError(f"batch keys {sorted(batch)} differ from the stored {sorted(self.data)}")
        for key, value in batch.items():
            stored = self.data[key]
            if value.shape[1:] != stored.shape[1:] or value.dtype != stored.dtype:
                raise ValueError(
                    f"{key}: {value.dtype}{value.shape[1:]} differs from stored {stored.dtype}{stored.shape[1:]}"
                )
        if n > self.capacity:  # only the newest `capacity` transitions can be kept
            batch = {k: v[n - self.capacity:] for k, v in batch.items()}
            self.next_id += n - self.capacity
            n = self.capacity
        slots = (self.cursor + np.arange(n)) % self.capacity
        first = min(n, self.capacity - self.cursor)
        for key, value in batch.items():  # at most two slice copies, at the wrap
            self.data[key][self.cursor:self.cursor + first] = value[:first]
            self.data[key][: n - first] = value[first:]
        self.ids[slots] = np.arange(self.next_id, self.next_id + n, dtype=np.uint64)
        self.next_id += n
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        return slots

    def gather(self, slots: np.ndarray) -> dict[str, np.ndarray]:
        return {k: v[slots] for k, v in self.data.items()}


class UniformSampler:
    def sample(self, storage: TransitionStorage, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, storage.size, size=batch_size)


class PrioritizedSampler:
    """Proportional prioritization: P(i) = p_i^alpha / sum_k p_k^alpha, stratified over batch segments."""

    def __init__(self, capacity: int, alpha: float, beta: float, eps: float) -> None:
        self.tree = SumTree(capacity)
        self.alpha = alpha
        self.beta = beta
        self.eps = eps
        self.max_priority = 1.0  # new transitions are sampled at least once at the highest priority

    def on_add(self, slots: np.ndarray) -> None:
        self.tree.update(slots, np.full(len(slots), self.max_priority ** self.alpha))

    def sample(
        self, storage: TransitionStorage, batch_size: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        total = self.tree.total
        bounds = np.arange(batch_size + 1) * (total / batch_size)
        slots = self.tree.find_prefix_sum(rng.uniform(bounds[:-1], bounds[1:]))
        probabilities = self.tree.get(slots) / total
        # w_i = (N P(i))^-beta, normalised by the largest weight in the buffer (that of the min priority).
        max_weight = (storage.size * self.tree.min / total) ** -self.beta
        weights = (storage.size * probabilities) ** -self.beta / max_weight
        return slots, weights.astype(np.float32)

    def update_priorities(
        self, storage: TransitionStorage, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray
    ) -> int:
        if not np.all(np.isfinite(priorities)):
            raise ValueError("priorities must be finite")
        if len(slots) and (slots.min() < 0 or slots.max() >= storage.capacity):
            raise ValueError("slot out of range")
        current = storage.ids[slots] == ids  # skip slots overwritten since they were sampled
        fresh_priorities = np.abs(priorities[current]) + self.eps
        if fresh_priorities.size:
            self.max_priority = max(self.max_priority, float(fresh_priorities.max()))
            self.tree.update(slots[current], fresh_priorities ** self.alpha)
        return int(current.sum())


# -- the facade -----------------------------------------------------------------------------------------


class FifoReplay:
    mode = "fifo"

    def __init__(self, capacity: int) -> None:
        self.fifo = ChunkFifo(capacity)

    def add_chunk(self, arrays: dict[str, Any], meta: dict[str, Any], transitions: int) -> None:
        self.fifo.add(arrays, meta, transitions)

    def ready(self, batch_size: int) -> bool:
        del batch_size  # a FIFO reply is "what there is, at least one chunk"
        return bool(self.fifo.items)

    def sample(self, batch_size: int, max_frames: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        items = self.fifo.take(batch_size, max_frames)
        arrays = {str(i): item.arrays for i, item in enumerate(items)}
        meta = {"chunks": [item.meta for item in items], "transitions": sum(i.transitions for i in items)}
        return arrays, meta

    def update_priorities(self, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> int:
        raise ValueError("a FIFO replay has no priorities")

    def stats(self) -> dict[str, int]:
        f = self.fifo
        return {"size": f.size, "capacity": f.capacity, "added": f.added, "served": f.served, "dropped": f.dropped}


class TransitionReplay:
    def __init__(self, capacity: int, sampler: UniformSampler | PrioritizedSampler, seed: int) -> None:
        self.storage = TransitionStorage(capacity)
        self.sampler = sampler
        self.mode = "prioritized" if isinstance(sampler, PrioritizedSampler) else "uniform"
        self.rng = np.random.default_rng(seed)
        self.added = 0
        self.served = 0

    def add_chunk(self, arrays: dict[str, Any], meta: dict[str, Any], transitions: int) -> None:
        del meta
        slots = self.storage.add(flatten_time_major(arrays))
        if isinstance(self.sampler, PrioritizedSampler):
            self.sampler.on_add(slots)
        self.added += transitions

    def ready(self, batch_size: int) -> bool:
        return self.storage.size >= batch_size

    def sample(self, batch_size: int, max_frames: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        del max_frames  # a transition batch has one frame per stored key, far below any limit
        if isinstance(self.sampler, PrioritizedSampler):
            slots, weights = self.sampler.sample(self.storage, batch_size, self.rng)
        else:
            slots, weights = self.sampler.sample(self.storage, batch_size, self.rng), None
        arrays: dict[str, Any] = {}
        for name, value in self.storage.gather(slots).items():  # rebuild a/b paths as nested dicts
            *branches, leaf = name.split("/")
            node = arrays
            for branch in branches:
                node = node.setdefault(branch, {})
            node[leaf] = value
        arrays["slots"] = slots.astype(np.int64)
        arrays["ids"] = self.storage.ids[slots]
        if weights is not None:
            arrays["weights"] = weights
        self.served += batch_size
        return arrays, {"transitions": batch_size}

    def update_priorities(self, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> int:
        if not isinstance(self.sampler, PrioritizedSampler):
            raise ValueError("a uniform replay has no priorities")
        return self.sampler.update_priorities(self.storage, slots, ids, priorities)

    def stats(self) -> dict[str, int]:
        overwritten = max(0, self.added - self.storage.capacity)
        return {"size": self.storage.size, "capacity": self.storage.capacity, "added": self.added,
                "served": self.served, "dropped": overwritten}


def make_replay(mode: str, capacity: int, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
                seed: int = 0) -> FifoReplay | TransitionReplay:
    if mode == "fifo":
        return FifoReplay(capacity)
    if mode == "uniform":
        return TransitionReplay(capacity, UniformSampler(), seed)
    if mode == "prioritized":
        return TransitionReplay(capacity, PrioritizedSampler(capacity, alpha, beta, eps), seed)
    raise ValueError(f"unknown replay mode {mode!r}: fifo, uniform or prioritized")
