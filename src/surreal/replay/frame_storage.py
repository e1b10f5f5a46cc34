"""An off-policy replay of image observations that stores each frame once (frames.py's `FrameRing`).

Chunks of pixel observations arrive as the on-policy path sends them (runtime/frame_chunks.py: `per_chunk/frames`
each distinct frame once, `obs_index` and `next_index` per step), so a stored transition is its scalar fields plus two
stacks of absolute frame numbers (2S int64), and the frames sit in one ring of their own. A sampled batch's `obs` and
`next_obs` are rebuilt from the numbers by two gathers, bit for bit the stacks the env returned, whatever episode
ends or wrap-arounds lie between. For a 4 x 84 x 84 stack that is about 7 kB a transition instead of the 56 kB of two
whole stacks (bench/frames.py measures both).

The frame ring holds `FRAME_SLACK` more frames than the replay holds transitions (a chunk's first stack brings S-1
frames from before it, a reset stores its stack whole). When ingest overwrites frames that the oldest transitions
still name (episodes much shorter than a chunk, for instance), those transitions are evicted with them, whole chunks
at a time from the old end: the stored transitions stay the newest `size` of the ring, a sample is drawn over them
only (`reply` maps the sampler's offsets onto them), and `FrameRing.gather` refuses any stack that names an
overwritten frame, so a stale stack is never served. Uniform sampling only (replay/shard.py refuses `prioritized`
with frames: an evicted slot would keep its priority).

A snapshot copies the stored rows (in ring order, oldest first) and the frames they name, so it holds exactly what
could be sampled; unlike `TransitionStorage`'s it is a copy, not a guard band over the live ring.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, TypedDict, cast

import numpy as np

from surreal.frames import FrameChunk, FrameRing, as_planes
from surreal.proto.codec import Limits
from surreal.proto.frame_fields import FRAMES, FRAMES_FIELD, NEXT_INDEX, OBS_INDEX
from surreal.proto.wire import PER_CHUNK, SAMPLE_ARRAYS, WEIGHTS, Chunk, Field, Fields, TransitionReply
from surreal.replay.buffers import (
    DEFAULT_CAPACITY_BYTES,
    DEFAULT_REPLY,
    REPLY_HEADER_RESERVE,
    ReplayStats,
    TransitionStorage,
    flatten_time_major,
)
from surreal.replay.snapfile import Capture, ShardState

FRAME_SLACK = 0.1  # frames the ring holds beyond one per transition, as a share of the capacity
ABSOLUTE = np.dtype(np.int64)  # a stored stack's frame numbers: counted from the ring's first frame, never reused


def has_frames(layout: Fields | None) -> bool:
    """Whether a declared layout's chunks carry frames and indices (`proto/frame_fields.py`)."""
    return layout is not None and FRAMES_FIELD in layout


def frame_capacity(capacity: int) -> int:
    """The frames a replay of `capacity` transitions keeps."""
    return capacity + math.ceil(capacity * FRAME_SLACK)


def row_fields(layout: Fields) -> Fields:
    """One stored transition's fields: the layout's per-step fields, the indices as absolute frame numbers."""
    stack = layout[OBS_INDEX].shape
    rows = {name: f for name, f in layout.items() if name != FRAMES_FIELD}
    rows[OBS_INDEX] = rows[NEXT_INDEX] = Field(ABSOLUTE, stack)
    return rows


def stored_nbytes(layout: Fields, capacity: int) -> int:
    """What a replay of `capacity` transitions of `layout` allocates: the rows, and the frames once each where the
    layout carries frames."""
    rows = row_fields(layout) if has_frames(layout) else layout
    total = capacity * sum(f.dtype.itemsize * math.prod(f.shape) for f in rows.values())
    if has_frames(layout):
        frame = layout[FRAMES_FIELD]
        total += frame_capacity(capacity) * frame.dtype.itemsize * math.prod(frame.shape)
    return total


class FrameBooks(TypedDict):
    """A frame replay's books in a snapshot (its arrays: `data/<name>` rows oldest first, `ids`, `frames` from
    `frames_from` on, and `chunk_ends`, the eviction books)."""

    size: int
    added: int
    served: int
    frames_from: int
    frames_end: int


class FrameStorage(TransitionStorage):
    """A transition ring whose observations are frame numbers into a `FrameRing` (module docstring)."""

    def __init__(
        self,
        capacity: int,
        capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
        reply: Limits = DEFAULT_REPLY,
        layout: Fields | None = None,
    ) -> None:
        """`layout`: the declared fields, with frames (`has_frames`); ValueError when the rows and the frames
        would exceed `capacity_bytes`."""
        if layout is None or not has_frames(layout):
            raise ValueError("a frame replay needs a declared layout of frames and indices")
        need = stored_nbytes(layout, capacity)
        if need > capacity_bytes:
            raise ValueError(f"{capacity} transitions of frames take {need} bytes, more than {capacity_bytes}")
        self.frame = layout[FRAMES_FIELD]
        self.stack = layout[OBS_INDEX].shape[0]
        super().__init__(capacity, capacity_bytes, reply, row_fields(layout))
        self.declared = layout
        self.ring = FrameRing(frame_capacity(capacity), self.frame.shape, self.frame.dtype)
        # Per stored chunk: (the insertion number of its last transition, the oldest frame any of them names).
        self.chunks: deque[tuple[int, int]] = deque()

    def add(self, chunk: Chunk, transitions: int) -> np.ndarray:
        """The chunk's frames into the ring, its transitions (with absolute frame numbers) into the rows; then the
        oldest transitions whose frames were overwritten are evicted."""
        arrays = chunk.arrays
        reserved = SAMPLE_ARRAYS.keys() & arrays.keys()
        if reserved:
            raise ValueError(f"chunk keys {sorted(reserved)} are reserved for the sample reply")
        per_chunk = arrays.get(PER_CHUNK, {})
        if set(per_chunk) != {FRAMES} or OBS_INDEX not in arrays or NEXT_INDEX not in arrays:
            raise ValueError("a chunk for a frame replay carries per_chunk/frames, obs_index and next_index")
        frames = FrameChunk(per_chunk[FRAMES], arrays[OBS_INDEX], arrays[NEXT_INDEX])
        frames.check(self.frame.shape, self.stack, self.frame.dtype)
        if len(frames.frames) > self.ring.capacity:
            raise ValueError(f"a chunk of {len(frames.frames)} frames does not fit a ring of {self.ring.capacity}")
        rest = {k: v for k, v in arrays.items() if k not in (PER_CHUNK, OBS_INDEX, NEXT_INDEX)}
        # The rows' shapes first (nothing written yet): a mismatch leaves the ring as it was.
        flat = flatten_time_major({**rest, OBS_INDEX: frames.obs_index, NEXT_INDEX: frames.next_index})
        if len(flat[OBS_INDEX]) != transitions:
            raise ValueError(f"chunk holds {len(flat[OBS_INDEX])} transitions, not the {transitions} announced")
        self._check({k: (a.astype(ABSOLUTE) if k in (OBS_INDEX, NEXT_INDEX) else a) for k, a in flat.items()})
        obs_index, next_index = self.ring.add(frames)
        k = obs_index.shape[1]
        flat[OBS_INDEX] = obs_index.reshape(-1, self.stack) if k else obs_index.reshape(0, self.stack)
        flat[NEXT_INDEX] = next_index.reshape(-1, self.stack) if k else next_index.reshape(0, self.stack)
        slots = self.write(flat)
        if transitions:
            self.chunks.append((self.added, int(min(obs_index.min(), next_index.min()))))
        self._evict()
        return slots

    def _evict(self) -> None:
        """Forget the chunks whose frames the ring overwrote (their transitions leave the stored range) and those
        the rows overwrote anyway."""
        while self.chunks and self.chunks[0][1] < self.ring.oldest:
            last, _ = self.chunks.popleft()
            self.size = min(self.size, self.added - last)
        while self.chunks and self.chunks[0][0] <= self.added - self.capacity:
            self.chunks.popleft()

    def stored_slots(self, offsets: np.ndarray) -> np.ndarray:
        """Offsets into the stored range (the sampler's draws in [0, size)) as ring slots: the stored transitions
        are the newest `size`, ending at the cursor."""
        return (self.cursor - self.size + np.asarray(offsets, np.int64)) % self.capacity

    def gather(self, slots: np.ndarray) -> dict[str, np.ndarray]:
        """The rows at `slots` with `obs` and `next_obs` rebuilt from the frames (ValueError for a stack that names
        an overwritten frame: never served)."""
        rows = {k: np.take(a, slots, axis=0) for k, a in self.data.items()}
        frame_ndim = len(self.frame.shape)
        rows["obs"] = as_planes(self.ring.gather(rows.pop(OBS_INDEX)), frame_ndim)
        rows["next_obs"] = as_planes(self.ring.gather(rows.pop(NEXT_INDEX)), frame_ndim)
        return rows

    def max_batch(self, weighted: bool) -> int:
        """A reply carries each transition's rows and its two stacks whole."""
        extra = sum(dtype.itemsize for name, dtype in SAMPLE_ARRAYS.items() if weighted or name != WEIGHTS)
        rows = sum(a[:1].nbytes for name, a in self.data.items() if name not in (OBS_INDEX, NEXT_INDEX))
        stacks = 2 * self.stack * self.frame.dtype.itemsize * math.prod(self.frame.shape)
        return max(0, self.reply_limits.max_bytes - REPLY_HEADER_RESERVE) // (extra + rows + stacks)

    def reply(self, report: Any, slots: np.ndarray, weights: np.ndarray | None) -> TransitionReply:
        if weights is not None:
            raise ValueError("a frame replay samples uniformly")
        return super().reply(report, self.stored_slots(slots), None)

    def stats(self) -> ReplayStats:
        return {**super().stats(), "dropped": self.added - self.size}

    def capture(self, guard: int) -> Capture:
        """A copy of the stored rows, oldest first, and of the frames from the oldest one they name."""
        del guard
        slots = self.stored_slots(np.arange(self.size))
        arrays: dict[str, list[np.ndarray]] = {f"data/{k}": [np.take(a, slots, axis=0)] for k, a in self.data.items()}
        arrays["ids"] = [self.ids[slots]]
        first = self.ring.end
        if self.size:
            first = int(min(arrays[f"data/{OBS_INDEX}"][0].min(), arrays[f"data/{NEXT_INDEX}"][0].min()))
        numbers = np.arange(first, self.ring.end)
        arrays["frames"] = [self.ring.frames[numbers % self.ring.capacity]]
        arrays["chunk_ends"] = [np.array(self.chunks, np.int64).reshape(-1, 2)]
        books: FrameBooks = {
            "size": self.size,
            "added": self.added,
            "served": self.served,
            "frames_from": first,
            "frames_end": self.ring.end,
        }
        return Capture(books, arrays, self.size)

    def restored(self, state: ShardState) -> FrameStorage:
        """The rows into slots [0, size), the frames at their numbers; ValueError for a snapshot that does not fit
        (another layout, more than the capacity, a stack naming a frame it lacks)."""
        books = cast(FrameBooks, state.books)
        storage = FrameStorage(self.capacity, self.capacity_bytes, self.reply_limits, self.declared)
        size, first, end = len(state.arrays["ids"]), int(books["frames_from"]), int(books["frames_end"])
        frames = state.arrays["frames"]
        if (
            not 0 <= size <= self.capacity
            or not 0 <= end - first <= storage.ring.capacity
            or len(frames) != end - first
        ):
            raise ValueError(f"cannot restore {size} transitions and {len(frames)} frames into this replay")
        storage.load_rows(state, size)
        storage.ring.end = end
        storage.ring.frames[np.arange(first, end) % storage.ring.capacity] = frames
        if size and not all(storage.ring.valid(storage.data[k][:size]).all() for k in (OBS_INDEX, NEXT_INDEX)):
            raise ValueError("a stored stack names a frame the snapshot does not hold")
        storage.size, storage.cursor = size, size % self.capacity
        storage.added, storage.served = int(books["added"]), int(books["served"])
        storage.chunks = deque((int(a), int(b)) for a, b in state.arrays["chunk_ends"])
        return storage

    def describe(self) -> str:
        return f", each frame once ({self.ring.capacity} frames of {self.frame.shape})"
