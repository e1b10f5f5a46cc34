"""Replay storage and samplers, composed TorchRL-style: storage holds data, a sampler picks slots.

- `ChunkFifo`: on-policy. Whole time-major chunks, served once each in arrival order, oldest dropped
  (and counted) when the capacity in transitions or bytes would be exceeded; a reply packs chunks only up
  to the receiver's limits, and a chunk that could never fit one is refused when it arrives.
- `TransitionStorage`: off-policy ring buffer of transitions, preallocated at start from the experiment's declared
  layout (the algorithm's chunk fields over the env's spaces: `replay.layout`, which the launcher resolves) or, where
  none was declared, from the first batch, with a monotonic insertion id per slot so a priority update for a slot
  that was overwritten since it was sampled can be recognised and ignored. With a layout, no peer's first chunk
  decides what every later one must look like: one that differs is refused like any other.
- `UniformSampler` / `PrioritizedSampler`: which slots a batch takes (and, for the latter, importance
  weights and priority updates, Schaul et al. 2016).
- `make_replay`: the facade replay/shard.py talks to, the same `Replay` interface for every mode; the FIFO is
  read with `take` (whole chunks), a transition replay with `sample` (a batch). proto/wire.py frames replies.

Numpy only: the replay image never carries torch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from surreal.proto.codec import Limits, ProtocolError, flatten, header_cost, unflatten
from surreal.proto.wire import IDS, PER_ENV, SAMPLE_ARRAYS, SLOTS, WEIGHTS, Fields, lead_dims
from surreal.replay.sumtree import SumTree

MAX_PRIORITY = 1e6  # |TD error| above this counts as this (priorities are finite: anything else is refused)
REPLY_HEADER_RESERVE = 4096  # header bytes a FIFO reply needs besides its chunks' (progress, ids, name prefixes)
DEFAULT_CAPACITY_BYTES = 4 << 30
DEFAULT_REPLY = Limits()  # a receiver with the protocol's default limits


def flatten_time_major(arrays: dict[str, Any]) -> dict[str, np.ndarray]:
    """A chunk's [T, K, ...] arrays (nested dicts allowed) -> [T*K, ...] transitions keyed by a/b paths
    (the codec's names), every array sharing the chunk's leading [T, K] (`lead_dims`). A chunk with `PER_ENV`
    arrays (a recurrent policy's, whose steps only make sense in sequence) is no set of transitions: ValueError."""
    if PER_ENV in arrays:
        raise ValueError(f"a chunk with {PER_ENV} arrays is learned from whole, not as separate transitions")
    t, k = lead_dims(arrays)
    return {name: array.reshape(t * k, *array.shape[2:]) for name, array in flatten(arrays)}


# -- on-policy ------------------------------------------------------------------------------------------


@dataclass
class FifoItem:
    """A held chunk and what it costs a reply: frames, bytes, and header bytes (its metadata and specs)."""

    arrays: dict[str, Any]
    meta: dict[str, Any]
    n_transitions: int
    frames: int
    nbytes: int
    header_bytes: int


class ChunkFifo:
    """On-policy queue of whole chunks: PPO/ES must learn from each chunk once and in the order the
    actors produced them, so nothing is sampled or split; when the learner falls behind, the oldest
    (most off-policy) data goes first."""

    def __init__(
        self, capacity_transitions: int, capacity_bytes: int = DEFAULT_CAPACITY_BYTES, reply: Limits = DEFAULT_REPLY
    ) -> None:
        if capacity_transitions < 1:
            raise ValueError(f"capacity must be >= 1 (got {capacity_transitions})")
        self.capacity = capacity_transitions
        self.capacity_bytes = capacity_bytes
        self.reply = reply  # the receiver's limits: every reply must pass its decode
        self._items: deque[FifoItem] = deque()
        self.size = 0
        self.size_bytes = 0
        self.added_transitions = 0  # everything offered: added = size + served + dropped
        self.served_transitions = 0
        self.dropped_transitions = 0
        self.dropped_chunks = 0

    @property
    def num_chunks(self) -> int:
        return len(self._items)

    @property
    def items(self) -> tuple[FifoItem, ...]:
        """The held chunks, oldest first."""
        return tuple(self._items)

    def add(self, arrays: dict[str, Any], meta: dict[str, Any], n_transitions: int) -> None:
        """Append a chunk. One that no reply could carry is refused (`ProtocolError`), so it is never lost
        later; one larger than the whole capacity could never be held, so it is dropped (counted)."""
        if n_transitions < 0:
            raise ValueError(f"n_transitions must be >= 0 (got {n_transitions})")
        leaves = flatten(arrays)
        item = FifoItem(
            arrays,
            meta,
            n_transitions,
            len(leaves),
            sum(array.nbytes for _, array in leaves),
            header_cost(meta, arrays),
        )
        if not self._fits([item]):
            raise ProtocolError("too_large_for_reply", f"{item.nbytes} bytes, {item.frames} frames")
        self.added_transitions += n_transitions
        if n_transitions > self.capacity or item.nbytes > self.capacity_bytes:
            self.dropped_transitions += n_transitions
            self.dropped_chunks += 1
            return
        while self.size + n_transitions > self.capacity or self.size_bytes + item.nbytes > self.capacity_bytes:
            oldest = self._items.popleft()
            self.size -= oldest.n_transitions
            self.size_bytes -= oldest.nbytes
            self.dropped_transitions += oldest.n_transitions
            self.dropped_chunks += 1
        self._items.append(item)
        self.size += n_transitions
        self.size_bytes += item.nbytes

    def _fits(self, items: list[FifoItem]) -> bool:
        """Whether one reply can carry `items` within the receiver's frame, byte and header limits."""
        header = REPLY_HEADER_RESERVE + sum(item.header_bytes for item in items)
        return (
            sum(item.frames for item in items) <= self.reply.max_frames
            and header <= self.reply.max_header_bytes
            and header + sum(item.nbytes for item in items) <= self.reply.max_bytes
        )

    def take(self, max_transitions: int) -> list[FifoItem]:
        """Whole chunks in arrival order: at least one if any is held (a chunk bigger than the request
        must still flow, or it would block the queue), then more while they fit in `max_transitions` and
        in the receiver's limits; the rest waits for the next request."""
        taken: list[FifoItem] = []
        transitions = 0
        while self._items:
            head = self._items[0]
            if taken and (transitions + head.n_transitions > max_transitions or not self._fits([*taken, head])):
                break
            taken.append(self._items.popleft())
            transitions += head.n_transitions
            self.size_bytes -= head.nbytes
        self.size -= transitions
        self.served_transitions += transitions
        return taken


# -- off-policy -----------------------------------------------------------------------------------------


class TransitionStorage:
    """Ring buffer of transitions: one preallocated [capacity, ...] array per key, laid out by the declared
    `layout` (else by the first batch), so an add is at most two slice copies per key (one at the wrap) and a
    gather one fancy index.

    `ids[slot]` is the global insertion number (from 1; 0 = never written) of the transition in the slot.
    A learner sends back (slot, id) with its new priorities; an id that no longer matches means the slot
    was overwritten in between and the priority belongs to a transition that is gone.
    """

    def __init__(
        self, capacity: int, capacity_bytes: int = DEFAULT_CAPACITY_BYTES, layout: Fields | None = None
    ) -> None:
        """`layout`: one transition's fields (name, dtype, shape), allocated now; ValueError when `capacity` of them
        would exceed `capacity_bytes`. None: the first batch lays the storage out."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 (got {capacity})")
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self.layout = layout
        self.data: dict[str, np.ndarray] = {}
        self.ids = np.zeros(capacity, dtype=np.uint64)
        self.size = 0
        self.added = 0  # transitions ever offered, including any overwritten within one oversized batch
        self.cursor = 0  # the slot the next transition goes to: the newest `size` are the ring range ending here
        if layout is not None:
            self._allocate({name: (f.dtype, f.shape) for name, f in layout.items()})

    def _allocate(self, specs: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> None:
        per_transition = sum(dtype.itemsize * int(np.prod(shape)) for dtype, shape in specs.values())
        if per_transition * self.capacity > self.capacity_bytes:
            raise ValueError(
                f"{self.capacity} transitions of {per_transition} bytes exceed {self.capacity_bytes} bytes"
            )
        self.data = {k: np.zeros((self.capacity, *shape), dtype=dtype) for k, (dtype, shape) in specs.items()}

    def _check(self, arrays: dict[str, np.ndarray]) -> int:
        """Length N of a batch that matches the layout (allocating the layout on the first batch when none was
        declared)."""
        if not arrays:
            raise ValueError("batch has no arrays")
        if any(a.ndim == 0 for a in arrays.values()):
            raise ValueError("every array of a batch needs a leading transition dimension")
        lengths = {len(a) for a in arrays.values()}
        if len(lengths) != 1:
            raise ValueError(f"arrays of a batch differ in length: {sorted(lengths)}")
        if not self.data:
            self._allocate({k: (a.dtype, a.shape[1:]) for k, a in arrays.items()})
        if arrays.keys() != self.data.keys():
            raise ValueError(f"batch keys {sorted(arrays)} differ from the stored {sorted(self.data)}")
        for key, a in arrays.items():
            stored = self.data[key]
            if a.shape[1:] != stored.shape[1:] or a.dtype != stored.dtype:
                raise ValueError(f"{key}: {a.dtype}{a.shape[1:]} differs from stored {stored.dtype}{stored.shape[1:]}")
        return lengths.pop()

    def add(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """Write N transitions (every array [N, ...]); returns the slots written, oldest first."""
        arrays = {k: np.asarray(a) for k, a in arrays.items()}
        n = self._check(arrays)
        first_id = self.added + 1
        self.added += n
        if n > self.capacity:  # only the newest `capacity` transitions of the batch can be kept
            arrays = {k: a[n - self.capacity :] for k, a in arrays.items()}
            first_id += n - self.capacity
            n = self.capacity
        start = self.cursor
        head = min(n, self.capacity - start)  # slots before the wrap; the rest go to [0, n - head)
        for key, a in arrays.items():
            self.data[key][start : start + head] = a[:head]
            self.data[key][: n - head] = a[head:]
        ids = np.arange(first_id, first_id + n, dtype=np.uint64)
        self.ids[start : start + head] = ids[:head]
        self.ids[: n - head] = ids[head:]
        self.cursor = (start + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        return (start + np.arange(n)) % self.capacity

    def restore(self, data: dict[str, np.ndarray], ids: np.ndarray, added: int, cursor: int) -> None:
        """Refill an empty storage with what a snapshot held: `len(ids)` transitions in slots [0, len(ids)),
        as the ring lays them out (it fills [0, size) before it wraps, so that is all of its used part)."""
        size = len(ids)
        if self.size or not 0 < size <= self.capacity or not 0 <= cursor < self.capacity or added < size:
            raise ValueError(f"cannot restore {size} transitions, cursor {cursor}, into capacity {self.capacity}")
        if size < self.capacity and cursor != size:
            raise ValueError(f"a ring holding {size} of {self.capacity} has its cursor at {size}, not {cursor}")
        if any(len(a) != size for a in data.values()) or self._check({k: a[:1] for k, a in data.items()}) != 1:
            raise ValueError(f"every array must hold {size} transitions")
        for key, array in data.items():
            self.data[key][:size] = array
        self.ids[:size] = ids
        self.size, self.added, self.cursor = size, added, cursor

    def gather(self, slots: np.ndarray) -> dict[str, np.ndarray]:
        # np.take along axis 0 copies whole rows, about 3x faster than a[slots] for [N, d] arrays.
        return {k: np.take(a, slots, axis=0) for k, a in self.data.items()}


class UniformSampler:
    """Slots uniformly with replacement over the filled part; the ring fills [0, size) before it wraps."""

    def sample(self, storage: TransitionStorage, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        if storage.size == 0:
            raise ValueError("cannot sample from an empty storage")
        return rng.integers(0, storage.size, size=batch_size, dtype=np.int64)


class PrioritizedSampler:
    """Proportional prioritization (Schaul et al. 2016): P(i) = p_i / sum_k p_k with p = (|delta| + eps)^alpha.

    New transitions enter at the largest priority seen so far, so each is likely to be replayed at least
    once before the learner has scored it. `beta` may be reassigned at any time: annealing it towards 1
    is the learner's choice.
    """

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

    def on_add(self, slots: np.ndarray) -> None:
        self.tree.update(slots, np.full(len(slots), self.max_priority**self.alpha))

    def sample(
        self, storage: TransitionStorage, batch_size: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
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
        priority was computed for a transition that is no longer there.
        """
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
        return int(fresh.size)


# -- the facade -----------------------------------------------------------------------------------------


class FifoReplay:
    """Whole chunks, read with `fifo.take(batch_size)`: `batch_size` is the most transitions a reply carries."""

    def __init__(self, capacity: int, capacity_bytes: int, reply: Limits) -> None:
        self.fifo = ChunkFifo(capacity, capacity_bytes, reply)

    def add_chunk(self, arrays: dict[str, Any], meta: dict[str, Any], n_transitions: int) -> None:
        self.fifo.add(arrays, meta, n_transitions)

    def ready(self, batch_size: int) -> bool:
        del batch_size  # a FIFO reply is "what there is, at least one chunk"
        return self.fifo.num_chunks > 0

    def update_priorities(self, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> int:
        raise ValueError("a fifo replay has no priorities")

    def stats(self) -> dict[str, int]:
        f = self.fifo
        return {
            "size": f.size,
            "capacity": f.capacity,
            "added": f.added_transitions,
            "served": f.served_transitions,
            "dropped": f.dropped_transitions,
        }


class TransitionReplay:
    """Chunks flattened into transitions; a reply is a transition batch (nested keys as in the chunk)
    plus `slots` (int64) and `ids` (uint64) to send back with priorities, and for a prioritized sampler
    `weights` (float32). `dropped` counts transitions overwritten by newer ones."""

    def __init__(
        self,
        capacity: int,
        sampler: UniformSampler | PrioritizedSampler,
        seed: int,
        capacity_bytes: int,
        reply: Limits = DEFAULT_REPLY,
        layout: Fields | None = None,
    ) -> None:
        """`reply`: the receiver's limits: a layout whose batches could not pass them is refused (at once when it is
        declared, else at the first chunk: `add_chunk`), and so is a batch size whose reply would exceed them
        (`max_batch`). `layout`: one transition's fields, laid out now (`TransitionStorage`)."""
        if layout is not None and len(layout) + len(SAMPLE_ARRAYS) > reply.max_frames:
            raise ValueError(f"a layout of {len(layout)} fields: a reply of them exceeds {reply.max_frames} frames")
        self.storage = TransitionStorage(capacity, capacity_bytes, layout)
        self.sampler = sampler
        self.reply = reply
        self.rng = np.random.default_rng(seed)
        self.served = 0
        self.priority_updates = 0  # applied ones: with `added` and `served`, what tells a snapshot anything changed

    def add_chunk(self, arrays: dict[str, Any], meta: dict[str, Any], n_transitions: int) -> None:
        del meta  # episode statistics travel with the actor's metrics, not with single transitions
        reserved = SAMPLE_ARRAYS.keys() & arrays.keys()
        if reserved:
            raise ValueError(f"chunk keys {sorted(reserved)} are reserved for the sample reply")
        transitions = flatten_time_major(arrays)
        if not self.storage.data and len(transitions) + len(SAMPLE_ARRAYS) > self.reply.max_frames:
            # The first chunk lays the storage out: one no reply could carry would refuse every later request.
            raise ProtocolError("too_large_for_reply", f"{len(transitions)} fields")
        n = len(next(iter(transitions.values())))
        if n != n_transitions:
            raise ValueError(f"chunk holds {n} transitions, not the {n_transitions} announced")
        slots = self.storage.add(transitions)
        if isinstance(self.sampler, PrioritizedSampler):
            self.sampler.on_add(slots)

    def ready(self, batch_size: int) -> bool:
        return self.storage.size >= batch_size

    def max_batch(self) -> int:
        """The most transitions one reply can carry within the receiver's byte limit. With a declared layout it is
        known from the start; without one, before the first chunk only `slots`, `ids` and any `weights` are
        counted: an upper bound, which the first chunk lowers."""
        weighted = isinstance(self.sampler, PrioritizedSampler)
        extra = sum(dtype.itemsize for name, dtype in SAMPLE_ARRAYS.items() if weighted or name != WEIGHTS)
        per_transition = extra + sum(array[:1].nbytes for array in self.storage.data.values())
        return max(0, self.reply.max_bytes - REPLY_HEADER_RESERVE) // per_transition

    def sample(self, batch_size: int) -> dict[str, Any]:
        """`batch_size` transitions drawn by the sampler, with their `slots`, `ids` (and `weights`)."""
        weights: np.ndarray | None = None
        if isinstance(self.sampler, PrioritizedSampler):
            slots, weights = self.sampler.sample(self.storage, batch_size, self.rng)
        else:
            slots = self.sampler.sample(self.storage, batch_size, self.rng)
        arrays = unflatten(list(self.storage.gather(slots).items()))
        arrays[SLOTS] = slots
        arrays[IDS] = self.storage.ids[slots]
        if weights is not None:
            arrays[WEIGHTS] = weights
        self.served += batch_size
        return arrays

    def update_priorities(self, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> int:
        """Raises ValueError for a uniform replay, and for more priorities than one reply can carry (a learner
        sends those of a sample it was served, never more)."""
        if not isinstance(self.sampler, PrioritizedSampler):
            raise ValueError("a uniform replay has no priorities")
        if len(slots) > self.max_batch():
            raise ValueError(f"{len(slots)} priorities: more than a reply of this shard carries")
        applied = self.sampler.update_priorities(self.storage, slots, ids, priorities)
        self.priority_updates += applied
        return applied

    def stats(self) -> dict[str, int]:
        s = self.storage
        return {
            "size": s.size,
            "capacity": s.capacity,
            "added": s.added,
            "served": self.served,
            "dropped": max(0, s.added - s.capacity),
        }


Replay = FifoReplay | TransitionReplay  # one interface (add_chunk, ready, update_priorities, stats) for every mode


def make_replay(
    mode: str,
    capacity: int,
    alpha: float = 0.6,
    beta: float = 0.4,
    eps: float = 1e-6,
    seed: int = 0,
    capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
    reply: Limits = DEFAULT_REPLY,
    layout: Fields | None = None,
) -> Replay:
    """`fifo` (on-policy chunks), `uniform` or `prioritized` (off-policy transitions); capacity in transitions
    and in bytes; `reply`: the receiver's limits, which a FIFO reply's packing keeps to and a transition replay's
    layout and batch sizes are held to; `layout`: a transition replay's declared fields (a FIFO keeps chunks whole
    and has none: the learner checks its chunks' fields)."""
    if mode == "fifo":
        return FifoReplay(capacity, capacity_bytes, reply)
    if mode == "uniform":
        return TransitionReplay(capacity, UniformSampler(), seed, capacity_bytes, reply, layout)
    if mode == "prioritized":
        sampler = PrioritizedSampler(capacity, alpha, beta, eps)
        return TransitionReplay(capacity, sampler, seed, capacity_bytes, reply, layout)
    raise ValueError(f"unknown replay mode {mode!r}: fifo, uniform or prioritized")
