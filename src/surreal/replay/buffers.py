"""Replay storages, TorchRL-style: a storage holds a shard's data, a sampler (replay/samplers.py) picks from it.

- `ChunkFifo`: on-policy. Whole `Chunk`s, as validated on arrival, served once each in arrival order; with the
  experiment's declared layout (`replay.layout`), a chunk that differs (a frame of another shape or dtype, an index
  past its frames) is refused on arrival, before it takes any of the queue's bytes.
- `TransitionStorage`: off-policy ring buffer of transitions, laid out at start by the experiment's declared layout
  (`replay.layout`, which the launcher resolves), so no peer's first chunk decides what every later one must look
  like: one that differs is refused like any other.

Both keep the `Storage` protocol replay/shard.py composes with a sampler, and their state as a snapshot holds it
(`capture`, `restored`; replay/snapshot.py writes and reads it), their books a `TypedDict`. proto/wire.py frames
the replies. Numpy only: the replay image never carries torch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypedDict, cast

import numpy as np

from surreal.proto.codec import Limits, ProtocolError, flatten, header_cost, unflatten
from surreal.proto.wire import (
    IDS,
    PER_ENV,
    SAMPLE_ARRAYS,
    SLOTS,
    WEIGHTS,
    Chunk,
    Fields,
    FifoReply,
    ShardReport,
    TransitionReply,
    check_fields,
    chunk_from_meta,
    chunk_meta,
    is_per_chunk,
    lead_dims,
)
from surreal.replay.snapfile import Capture, ShardState

REPLY_HEADER_RESERVE = 4096  # header bytes a FIFO reply needs besides its chunks' (progress, ids, name prefixes)
DEFAULT_CAPACITY_BYTES = 4 << 30
DEFAULT_REPLY = Limits()  # a receiver with the protocol's default limits
NO_SLOTS = np.zeros(0, np.int64)


def flatten_time_major(arrays: dict[str, Any]) -> dict[str, np.ndarray]:
    """A chunk's [T, K, ...] arrays (nested dicts allowed) -> [T*K, ...] transitions keyed by a/b paths
    (the codec's names), every array sharing the chunk's leading [T, K] (`lead_dims`). A chunk with `PER_ENV`
    arrays (a recurrent policy's, whose steps only make sense in sequence) is no set of transitions, nor is one with
    `PER_CHUNK` arrays (frames its steps index): ValueError."""
    if PER_ENV in arrays:
        raise ValueError(f"a chunk with {PER_ENV} arrays is learned from whole, not as separate transitions")
    t, k = lead_dims(arrays)
    leaves = flatten(arrays)
    if any(is_per_chunk(name) for name, _ in leaves):
        raise ValueError("a chunk of frames and their indices is not stored as separate transitions")
    return {name: array.reshape(t * k, *array.shape[2:]) for name, array in leaves}


class ReplayStats(TypedDict):
    """A storage's books in transitions (the role's metrics): added = size + served + dropped for a FIFO; a ring
    serves with replacement and `dropped` counts those overwritten."""

    size: int
    capacity: int
    added: int
    served: int
    dropped: int


class Storage(Protocol):
    """Where a shard's data lives (TorchRL's `Storage`): chunks in, a reply out of the slots a sampler picked."""

    capacity: int
    served_once: bool  # each item is served once: a snapshot restored after a kill would serve some again

    def add(self, chunk: Chunk, transitions: int) -> np.ndarray:
        """Store `chunk` (validated, `transitions` its T*K); the slots written, oldest first, which the sampler
        tracks. Raises `ProtocolError` (no reply could carry it) or ValueError (this storage cannot hold it), and
        then holds and counts nothing of it."""

    def ready(self, threshold: int) -> bool:
        """Whether a request waiting for `threshold` transitions can be answered now."""

    def refusal(self, batch_size: int, weighted: bool) -> str | None:
        """Why no reply of `batch_size` (with importance weights, if `weighted`) could ever be made; None if one can."""

    def reply(self, report: ShardReport, slots: np.ndarray, weights: np.ndarray | None) -> FifoReply | TransitionReply:
        """The reply holding `slots` (a sampler's pick), counted as served."""

    def stats(self) -> ReplayStats: ...

    def capture(self, guard: int) -> Capture:
        """Its state now, as a snapshot writes it; `guard`: rows of a ring copied ahead of its cursor."""

    def restored(self, state: ShardState) -> Self:
        """A new storage of the same settings holding what `state` (a capture, read back) holds; KeyError, TypeError
        or ValueError when it does not fit."""

    def describe(self) -> str:
        """What the role's start line says of it beside its mode and capacity."""


# -- on-policy ------------------------------------------------------------------------------------------


@dataclass
class FifoItem:
    """A held chunk and what it costs a reply: frames, bytes, and header bytes (its metadata and specs)."""

    chunk: Chunk
    transitions: int
    frames: int
    nbytes: int
    header_bytes: int


class FifoEntry(TypedDict):
    """A held chunk in a snapshot's books (its arrays are `fifo/<i>/<name>`): its metadata as the wire carries it."""

    meta: dict[str, Any]
    transitions: int


class FifoBooks(TypedDict):
    items: list[FifoEntry]
    added: int
    served: int
    dropped: int
    dropped_chunks: int


class ChunkFifo:
    """On-policy queue of whole chunks: PPO/ES must learn from each chunk once and in the order the
    actors produced them, so nothing is sampled or split; when the learner falls behind, the oldest
    (most off-policy) data goes first. Its sampler is `InOrder` (replay/samplers.py)."""

    served_once = True

    def __init__(
        self,
        capacity_transitions: int,
        capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
        reply: Limits = DEFAULT_REPLY,
        layout: Fields | None = None,
    ) -> None:
        """`layout`: the fields every chunk must hold (`replay.layout`); None takes any well-formed chunk and leaves
        the check to the learner."""
        if capacity_transitions < 1:
            raise ValueError(f"capacity must be >= 1 (got {capacity_transitions})")
        self.capacity = capacity_transitions
        self.capacity_bytes = capacity_bytes
        self.reply_limits = reply  # the receiver's limits: every reply must pass its decode
        self.layout = layout
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

    def add(self, chunk: Chunk, transitions: int) -> np.ndarray:
        """Append a chunk. One that no reply could carry, or that differs from the layout, is refused
        (`ProtocolError`), so it is never lost later; one larger than the whole capacity could never be held, so it is
        dropped (counted)."""
        if transitions < 0:
            raise ValueError(f"transitions must be >= 0 (got {transitions})")
        leaves = flatten(chunk.arrays)
        if self.layout is not None:
            check_fields(dict(leaves), self.layout, 2, "bad_chunk_fields")
        nbytes = sum(array.nbytes for _, array in leaves)
        header = header_cost(chunk_meta(chunk, chunk.incarnation), chunk.arrays)
        item = FifoItem(chunk, transitions, len(leaves), nbytes, header)
        if not self._fits([item]):
            raise ProtocolError("too_large_for_reply", f"{item.nbytes} bytes, {item.frames} frames")
        self.added_transitions += transitions
        if transitions > self.capacity or item.nbytes > self.capacity_bytes:
            self.dropped_transitions += transitions
            self.dropped_chunks += 1
            return NO_SLOTS
        while self.size + transitions > self.capacity or self.size_bytes + item.nbytes > self.capacity_bytes:
            oldest = self._items.popleft()
            self.size -= oldest.transitions
            self.size_bytes -= oldest.nbytes
            self.dropped_transitions += oldest.transitions
            self.dropped_chunks += 1
        self._items.append(item)
        self.size += transitions
        self.size_bytes += item.nbytes
        return NO_SLOTS  # a FIFO's sampler tracks nothing

    def _fits(self, items: list[FifoItem]) -> bool:
        """Whether one reply can carry `items` within the receiver's frame, byte and header limits."""
        header = REPLY_HEADER_RESERVE + sum(item.header_bytes for item in items)
        return (
            sum(item.frames for item in items) <= self.reply_limits.max_frames
            and header <= self.reply_limits.max_header_bytes
            and header + sum(item.nbytes for item in items) <= self.reply_limits.max_bytes
        )

    def fitting(self, max_transitions: int) -> int:
        """How many of the oldest chunks one reply takes: at least one if any is held (a chunk bigger than the
        request must still flow, or it would block the queue), then more while they fit in `max_transitions` and
        in the receiver's limits; the rest waits for the next request."""
        taken: list[FifoItem] = []
        transitions = 0
        for item in self._items:
            if taken and (transitions + item.transitions > max_transitions or not self._fits([*taken, item])):
                break
            taken.append(item)
            transitions += item.transitions
        return len(taken)

    def take(self, count: int) -> list[Chunk]:
        """The `count` oldest chunks, served: they leave the queue."""
        taken = [self._items.popleft() for _ in range(count)]
        transitions = sum(item.transitions for item in taken)
        self.size -= transitions
        self.size_bytes -= sum(item.nbytes for item in taken)
        self.served_transitions += transitions
        return [item.chunk for item in taken]

    def ready(self, threshold: int) -> bool:
        del threshold  # a FIFO reply is "what there is, at least one chunk"
        return bool(self._items)

    def refusal(self, batch_size: int, weighted: bool) -> str | None:
        """A FIFO reply carries at most the whole FIFO: a bigger batch is no request an honest learner makes (the
        config holds `algo.batch_size` to the capacity)."""
        del weighted
        return "over_capacity" if batch_size > self.capacity else None

    def reply(self, report: ShardReport, slots: np.ndarray, weights: np.ndarray | None) -> FifoReply:
        del weights
        return FifoReply(report, self.take(len(slots)))

    def stats(self) -> ReplayStats:
        return {
            "size": self.size,
            "capacity": self.capacity,
            "added": self.added_transitions,
            "served": self.served_transitions,
            "dropped": self.dropped_transitions,
        }

    def capture(self, guard: int) -> Capture:
        """The held chunks' metadata and arrays (referenced: a held chunk is never written to) and the books."""
        del guard
        entries: list[FifoEntry] = []
        arrays: dict[str, list[np.ndarray]] = {}
        for i, item in enumerate(self._items):
            entries.append({"meta": chunk_meta(item.chunk, item.chunk.incarnation), "transitions": item.transitions})
            arrays.update((f"fifo/{i}/{name}", [array]) for name, array in flatten(item.chunk.arrays))
        books: FifoBooks = {
            "items": entries,
            "added": self.added_transitions,
            "served": self.served_transitions,
            "dropped": self.dropped_transitions,
            "dropped_chunks": self.dropped_chunks,
        }
        return Capture(books, arrays, self.size)

    def restored(self, state: ShardState) -> ChunkFifo:
        """Each chunk's metadata is checked again as the wire checks it (`chunk_from_meta`)."""
        books = cast(FifoBooks, state.books)
        fifo = ChunkFifo(self.capacity, self.capacity_bytes, self.reply_limits, self.layout)
        for i, entry in enumerate(books["items"]):
            prefix = f"fifo/{i}/"
            arrays = unflatten(
                [(name.removeprefix(prefix), a) for name, a in state.arrays.items() if name.startswith(prefix)]
            )
            transitions = int(entry["transitions"])
            fifo.add(chunk_from_meta(arrays, entry["meta"], transitions), transitions)
        fifo.added_transitions, fifo.served_transitions = int(books["added"]), int(books["served"])
        fifo.dropped_transitions, fifo.dropped_chunks = int(books["dropped"]), int(books["dropped_chunks"])
        return fifo

    def describe(self) -> str:
        return ", chunks held to replay.layout" if self.layout else ""


# -- off-policy -----------------------------------------------------------------------------------------


class Overrun(RuntimeError):
    """Ingest overwrote more of the ring than the guard band held while a snapshot was being read from it."""


class RingBooks(TypedDict):
    """A ring's books in a snapshot (its arrays are `data/<name>` and `ids`, slots [0, size))."""

    size: int
    cursor: int
    added: int
    served: int


class TransitionStorage:
    """Ring buffer of transitions: one preallocated [capacity, ...] array per key, laid out by the declared
    `layout` (else by the first batch), so an add is at most two slice copies per key (one at the wrap) and a
    gather one fancy index. A reply is a transition batch (nested keys as in the chunk) plus `slots` (int64) and
    `ids` (uint64) to send back with priorities, and from a prioritized sampler `weights` (float32).

    `ids[slot]` is the global insertion number (from 1; 0 = never written) of the transition in the slot.
    A learner sends back (slot, id) with its new priorities; an id that no longer matches means the slot
    was overwritten in between and the priority belongs to a transition that is gone.
    """

    served_once = False

    def __init__(
        self,
        capacity: int,
        capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
        reply: Limits = DEFAULT_REPLY,
        layout: Fields | None = None,
    ) -> None:
        """`reply`: the receiver's limits: a layout whose batches could not pass them is refused (at once when it is
        declared, else at the first chunk: `add`), and so is a batch size whose reply would exceed them
        (`max_batch`). `layout`: one transition's fields (name, dtype, shape), allocated now; ValueError when
        `capacity` of them would exceed `capacity_bytes`. None: the first batch lays the storage out."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 (got {capacity})")
        if layout is not None and len(layout) + len(SAMPLE_ARRAYS) > reply.max_frames:
            raise ValueError(f"a layout of {len(layout)} fields: a reply of them exceeds {reply.max_frames} frames")
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self.reply_limits = reply
        self.layout = layout
        self.data: dict[str, np.ndarray] = {}
        self.ids = np.zeros(capacity, dtype=np.uint64)
        self.size = 0
        self.added = 0  # transitions ever offered, including any overwritten within one oversized batch
        self.served = 0
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

    def add(self, chunk: Chunk, transitions: int) -> np.ndarray:
        """The chunk's transitions, flattened time-major (its metadata travels with the actor's metrics)."""
        reserved = SAMPLE_ARRAYS.keys() & chunk.arrays.keys()
        if reserved:
            raise ValueError(f"chunk keys {sorted(reserved)} are reserved for the sample reply")
        flat = flatten_time_major(chunk.arrays)
        if not self.data and len(flat) + len(SAMPLE_ARRAYS) > self.reply_limits.max_frames:
            # The first chunk lays the storage out: one no reply could carry would refuse every later request.
            raise ProtocolError("too_large_for_reply", f"{len(flat)} fields")
        n = len(next(iter(flat.values())))
        if n != transitions:
            raise ValueError(f"chunk holds {n} transitions, not the {transitions} announced")
        return self.write(flat)

    def write(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
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

    def gather(self, slots: np.ndarray) -> dict[str, np.ndarray]:
        # np.take along axis 0 copies whole rows, about 3x faster than a[slots] for [N, d] arrays.
        return {k: np.take(a, slots, axis=0) for k, a in self.data.items()}

    def ready(self, threshold: int) -> bool:
        return self.size >= threshold

    def max_batch(self, weighted: bool) -> int:
        """The most transitions one reply can carry within the receiver's byte limit. With a declared layout it is
        known from the start; without one, before the first chunk only `slots`, `ids` and any `weights` are
        counted: an upper bound, which the first chunk lowers."""
        extra = sum(dtype.itemsize for name, dtype in SAMPLE_ARRAYS.items() if weighted or name != WEIGHTS)
        per_transition = extra + sum(array[:1].nbytes for array in self.data.values())
        return max(0, self.reply_limits.max_bytes - REPLY_HEADER_RESERVE) // per_transition

    def refusal(self, batch_size: int, weighted: bool) -> str | None:
        """A batch is drawn with replacement, so it may exceed what the ring holds, but its reply must pass the
        learner's byte limit: the gather, the index arrays and the reply are all sized by it."""
        return "reply_too_large" if batch_size > self.max_batch(weighted) else None

    def reply(self, report: ShardReport, slots: np.ndarray, weights: np.ndarray | None) -> TransitionReply:
        arrays = unflatten(list(self.gather(slots).items()))
        arrays[SLOTS] = slots
        arrays[IDS] = self.ids[slots]
        if weights is not None:
            arrays[WEIGHTS] = weights
        self.served += len(slots)
        return TransitionReply(report, arrays)

    def stats(self) -> ReplayStats:
        return {
            "size": self.size,
            "capacity": self.capacity,
            "added": self.added,
            "served": self.served,
            "dropped": max(0, self.added - self.capacity),
        }

    def capture(self, guard: int) -> Capture:
        """Copies only the ids and a guard band, the next `guard` rows that ingest will overwrite; every other row
        is read from the live ring when the capture is written, and `verify` raises `Overrun` if ingest went past
        the band meanwhile (replay/snapshot.py)."""
        size, capacity, added = self.size, self.capacity, self.added
        # Ingest fills the free slots, then overwrites the snapshot's rows from `first` on, in ring order.
        free = capacity - size
        first = (self.cursor + free) % capacity
        guarded = min(guard, size)
        band = (first + np.arange(guarded)) % capacity
        arrays: dict[str, list[np.ndarray]] = {}
        for key, live in self.data.items():
            copy = np.take(live, band, axis=0)
            if first + guarded <= size:  # the band lies inside [0, size)
                pieces = [live[:first], copy, live[first + guarded : size]]
            else:  # a full ring's band wraps past its end: `head` of its rows at the end, the rest at the start
                head = size - first
                pieces = [copy[head:], live[guarded - head : first], copy[:head]]
            arrays[f"data/{key}"] = pieces
        arrays["ids"] = [self.ids[:size].copy()]
        books: RingBooks = {"size": size, "cursor": self.cursor, "added": added, "served": self.served}

        def verify() -> None:
            # Read on the snapshot thread once it is done reading: an add counts itself before it writes a row.
            written = self.added - added
            if written > free + guarded:
                raise Overrun(f"{written} transitions arrived, the guard band held {free + guarded}")

        return Capture(books, arrays, size, verify)

    def restored(self, state: ShardState) -> TransitionStorage:
        """`len(ids)` transitions in slots [0, len(ids)), as the ring lays them out (it fills [0, size) before it
        wraps, so that is all of its used part), into the declared layout if any: a snapshot of other fields (a
        shard a hostile first chunk laid out before layouts were declared) does not fit."""
        books = cast(RingBooks, state.books)
        ring = TransitionStorage(self.capacity, self.capacity_bytes, self.reply_limits, self.layout)
        size, added, cursor = len(state.arrays["ids"]), int(books["added"]), int(books["cursor"])
        if not 0 <= size <= self.capacity or not 0 <= cursor < self.capacity or added < size:
            raise ValueError(f"cannot restore {size} transitions, cursor {cursor}, into capacity {self.capacity}")
        if size < self.capacity and cursor != size:
            raise ValueError(f"a ring holding {size} of {self.capacity} has its cursor at {size}, not {cursor}")
        ring.load_rows(state, size)
        ring.size, ring.added, ring.cursor, ring.served = size, added, cursor, int(books["served"])
        return ring

    def load_rows(self, state: ShardState, size: int) -> None:
        """A snapshot's `size` rows (`ids`, `data/<name>`) into slots [0, size) of this new storage; ValueError when
        they do not fit its layout."""
        data = {name.removeprefix("data/"): a for name, a in state.arrays.items() if name.startswith("data/")}
        if size and (
            any(len(a) != size for a in data.values()) or self._check({k: a[:1] for k, a in data.items()}) != 1
        ):
            raise ValueError(f"every array must hold {size} transitions")
        for key, array in data.items():
            self.data[key][:size] = array
        self.ids[:size] = state.arrays["ids"].astype(np.uint64)

    def describe(self) -> str:
        return ", laid out by replay.layout" if self.layout else ", laid out by its first chunk"
