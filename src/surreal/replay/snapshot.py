"""Replay snapshots: a shard's contents, priorities and books on disk, so a restarted shard is not empty.

What is captured, per buffer:

- transitions (uniform, prioritized): the used part of every storage array, the insertion ids, the cursor
  and counters, and for a prioritized sampler each slot's priority and the largest seen. A snapshot is taken
  every `replay.snapshot_interval_s` and on SIGTERM; a shard killed outright loses what arrived after its
  last one, and may sample again what it had served since, which is what replay does anyway.
- FIFO (PPO, ES): the held chunks, on SIGTERM only, and the snapshot is removed once restored. A FIFO serves
  each chunk once: a periodic snapshot restored after a kill would serve again every chunk served since.

Ingest never waits for a write. The slow parts run on one background thread: the bulk copy of the ring
(while actors keep writing into it), the checksum and the write. Then, on the shard's loop, `finish` copies
again only the slots written during the bulk copy (the ring range ending at the cursor: writes are
sequential), plus the ids and priorities (8 bytes a slot). That makes the snapshot exactly the state at
`finish`, and the loop's pause proportional to what arrived meanwhile, not to the capacity. A held FIFO
chunk is never written to, so its arrays are referenced, not copied.

`SnapshotStore` keeps the newest `KEEP` files in the shard's folder (a crash mid-write leaves the previous
one) and restores the newest good one; a corrupt or foreign file is renamed aside with one log line.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from surreal.proto.codec import flatten, unflatten
from surreal.replay.buffers import (
    ChunkFifo,
    FifoReplay,
    PrioritizedSampler,
    Replay,
    TransitionReplay,
    TransitionStorage,
)
from surreal.replay.snapfile import ShardState, SnapshotError, read_snapshot, write_snapshot

KEEP = 2
PATTERN = re.compile(r"^replay-(\d{10})\.snap$")


# -- capture and restore --------------------------------------------------------------------------------


class Capture(Protocol):
    def copy(self) -> None:
        """The bulk of the copy; runs on the snapshot thread while the shard keeps ingesting."""

    def finish(self) -> ShardState:
        """On the shard's loop: fix up what ingest changed during `copy`; the state as of now."""


def _ring_ranges(start: int, count: int, capacity: int) -> list[tuple[int, int]]:
    """The `count` slots from `start` on a ring of `capacity`, as one or two [lo, hi) ranges."""
    head = min(count, capacity - start)
    return [(start, start + head), (0, count - head)]


class TransitionCapture:
    def __init__(self, replay: TransitionReplay) -> None:
        storage = replay.storage
        self.replay, self.added, self.size = replay, storage.added, storage.size
        # Capacity rows, of which only the first `size` are ever touched: untouched pages cost no memory.
        self.out = {key: np.empty_like(live) for key, live in storage.data.items()}

    def copy(self) -> None:
        for key, live in self.replay.storage.data.items():
            np.copyto(self.out[key][: self.size], live[: self.size])  # numpy drops the GIL for the memcpy

    def finish(self) -> ShardState:
        replay, storage = self.replay, self.replay.storage
        written = min(storage.added - self.added, storage.capacity)
        for lo, hi in _ring_ranges((storage.cursor - written) % storage.capacity, written, storage.capacity):
            for key, live in storage.data.items():
                self.out[key][lo:hi] = live[lo:hi]
        size = storage.size
        arrays = {f"data/{key}": out[:size] for key, out in self.out.items()}
        arrays["ids"] = storage.ids[:size].copy()
        books: dict[str, Any] = {
            "size": size,
            "cursor": storage.cursor,
            "added": storage.added,
            "served": replay.served,
        }
        if isinstance(replay.sampler, PrioritizedSampler):
            arrays["priorities"] = replay.sampler.tree.get(np.arange(size))
            books["max_priority"] = replay.sampler.max_priority
        return ShardState(books, arrays)


class FifoCapture:
    def __init__(self, replay: FifoReplay) -> None:
        fifo = replay.fifo
        items: list[dict[str, Any]] = []
        arrays: dict[str, np.ndarray] = {}
        for i, item in enumerate(fifo.items):
            items.append({"meta": item.meta, "transitions": item.n_transitions})
            arrays.update((f"fifo/{i}/{name}", array) for name, array in flatten(item.arrays))
        books = {
            "items": items,
            "added": fifo.added_transitions,
            "served": fifo.served_transitions,
            "dropped": fifo.dropped_transitions,
            "dropped_chunks": fifo.dropped_chunks,
        }
        self.state = ShardState(books, arrays)

    def copy(self) -> None:
        """Nothing to copy: a held chunk's arrays are never written to."""

    def finish(self) -> ShardState:
        return self.state


def capture(replay: Replay) -> Capture | None:
    """A capture of `replay`'s state, or None when it holds nothing worth a file."""
    if isinstance(replay, TransitionReplay):
        return TransitionCapture(replay) if replay.storage.size else None
    if isinstance(replay, FifoReplay):
        return FifoCapture(replay) if replay.fifo.num_chunks else None
    raise TypeError(f"no snapshot for {type(replay).__name__}")


def change_token(replay: Replay) -> tuple[int, ...]:
    """Equal tokens: nothing a snapshot holds has changed in between."""
    extra = (replay.priority_updates,) if isinstance(replay, TransitionReplay) else ()
    return (*replay.stats().values(), *extra)


def restore(replay: Replay, state: ShardState) -> int:
    """Put `state` into `replay` (a fresh one) all at once: built aside, swapped in only when complete, so a
    state that does not fit raises (KeyError, TypeError, ValueError) and leaves `replay` as it was. Returns
    the transitions restored."""
    books, arrays = state.books, state.arrays
    if isinstance(replay, TransitionReplay):
        storage = TransitionStorage(replay.storage.capacity, replay.storage.capacity_bytes)
        data = {name.removeprefix("data/"): a for name, a in arrays.items() if name.startswith("data/")}
        storage.restore(data, arrays["ids"].astype(np.uint64), int(books["added"]), int(books["cursor"]))
        sampler = replay.sampler
        if isinstance(sampler, PrioritizedSampler):
            sampler = PrioritizedSampler(storage.capacity, sampler.alpha, sampler.beta, sampler.eps)
            sampler.tree.update(np.arange(storage.size), arrays["priorities"])
            sampler.max_priority = float(books["max_priority"])
        replay.storage, replay.sampler, replay.served = storage, sampler, int(books["served"])
        return storage.size
    if isinstance(replay, FifoReplay):
        old = replay.fifo
        fifo = ChunkFifo(old.capacity, old.capacity_bytes, old.reply)
        for i, item in enumerate(books["items"]):
            prefix = f"fifo/{i}/"
            chunk = [(name.removeprefix(prefix), a) for name, a in arrays.items() if name.startswith(prefix)]
            fifo.add(unflatten(chunk), item["meta"], int(item["transitions"]))
        fifo.added_transitions, fifo.served_transitions = int(books["added"]), int(books["served"])
        fifo.dropped_transitions, fifo.dropped_chunks = int(books["dropped"]), int(books["dropped_chunks"])
        replay.fifo = fifo
        return fifo.size
    raise TypeError(f"no snapshot for {type(replay).__name__}")


# -- the folder -----------------------------------------------------------------------------------------


class SnapshotStore:
    """One shard's snapshot folder: `replay-<n>.snap`, numbered upwards, the newest `keep` kept.

    `identity` says what the shard is (experiment, buffer kind, capacity, shard index); a snapshot written
    under another identity is foreign and never restored.
    """

    def __init__(self, directory: Path, identity: dict[str, Any], keep: int = KEEP) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.directory, self.keep = Path(directory), keep
        self.identity = json.loads(json.dumps(identity, default=str))  # as a header holds it: equal compares equal
        self.directory.mkdir(parents=True, exist_ok=True)
        for partial in self.directory.glob(".replay-*.snap.tmp"):  # a write cut short by a crash
            partial.unlink(missing_ok=True)

    def paths(self) -> list[Path]:
        """Snapshots in the folder, oldest first."""
        found = [(int(m.group(1)), p) for p in self.directory.iterdir() if (m := PATTERN.match(p.name))]
        return [p for _, p in sorted(found)]

    def save(self, state: ShardState) -> tuple[Path, int]:
        """Write `state` as the newest snapshot and drop the oldest beyond `keep`; returns (path, bytes)."""
        existing = self.paths()
        number = int(PATTERN.match(existing[-1].name).group(1)) + 1 if existing else 1  # type: ignore[union-attr]
        path = self.directory / f"replay-{number:010d}.snap"
        size = write_snapshot(path, self.identity, state)
        for old in self.paths()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path, size

    def restore(self, apply: Callable[[ShardState], object], log: logging.Logger) -> Path | None:
        """Read the newest snapshot and hand it to `apply`; one that fails either way is renamed aside as
        `<name>.corrupt` or `<name>.foreign` with one log line, and the one before it is tried. Returns the
        path restored, None if none was."""
        for path in reversed(self.paths()):
            try:
                apply(read_snapshot(path, self.identity))
                return path
            except SnapshotError as exc:
                reason, detail = exc.reason, str(exc)
            except (OSError, KeyError, TypeError, ValueError, IndexError) as exc:  # books that do not fit
                reason, detail = "corrupt", f"{type(exc).__name__}: {exc}"
            aside = path.with_name(f"{path.name}.{reason}")
            path.replace(aside)
            log.warning("replay snapshot %s not restored (%s): set aside as %s", path.name, detail, aside.name)
        return None

    def clear(self) -> None:
        """Remove every snapshot (a FIFO's, once restored: its chunks are served once)."""
        for path in self.paths():
            path.unlink(missing_ok=True)


# -- when, and on which thread --------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """One snapshot on disk: `pause_s` the shard's loop spent in `finish`, `total_s` from capture to rename."""

    path: Path
    transitions: int
    nbytes: int
    pause_s: float
    total_s: float


class Snapshots:
    """Snapshots of one shard's replay: `tick` from the shard's loop (periodic ones, when `interval_s` > 0),
    `final` on the way out (SIGTERM). One snapshot at a time; its slow parts run on a thread of its own."""

    def __init__(self, store: SnapshotStore, replay: Replay, interval_s: float, log: logging.Logger) -> None:
        self.store, self.replay, self.interval_s, self.log = store, replay, interval_s, log
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replay-snapshot")
        self.due = time.monotonic() + interval_s
        self.token = change_token(replay)  # what the newest snapshot holds (a restored shard's: what it read)
        self.capture: Capture | None = None
        self.copying: Future[None] | None = None
        self.writing: Future[tuple[Path, int]] | None = None
        self.started = 0.0
        self.pause_s = 0.0
        self.transitions = 0

    def tick(self, now: float) -> Written | None:
        """Advance the snapshot in flight by what is ready, or start one when due; never blocks on the thread.
        Returns the snapshot just written, if one was."""
        if self.copying is not None and self.copying.done():
            self.copying.result()
            self._finish()
        elif self.writing is not None and self.writing.done():
            self.due = now + self.interval_s
            return self._written()
        elif self.copying is None and self.writing is None and self.interval_s > 0 and now >= self.due:
            self.due = now + self.interval_s
            if change_token(self.replay) != self.token and (capture := self._begin()) is not None:
                self.copying = self.executor.submit(capture.copy)
        return None

    def final(self) -> Written | None:
        """Everything the shard holds on disk before it exits, synchronously: an unchanged shard writes
        nothing again, a copy in flight is finished as it is, a write in flight is waited for."""
        written = None
        if self.copying is not None:
            self.copying.result()
            self._finish()
        if self.writing is not None:
            written = self._written()
        if change_token(self.replay) == self.token or (capture := self._begin()) is None:
            return written
        capture.copy()
        self._finish()
        return self._written()

    def close(self) -> None:
        self.executor.shutdown(wait=True)

    def _begin(self) -> Capture | None:
        self.started = time.perf_counter()
        self.capture = capture(self.replay)
        return self.capture

    def _finish(self) -> None:
        assert self.capture is not None
        start = time.perf_counter()
        state = self.capture.finish()
        self.token = change_token(self.replay)
        self.pause_s = time.perf_counter() - start
        self.transitions = self.replay.stats()["size"]
        self.capture, self.copying = None, None
        self.writing = self.executor.submit(self.store.save, state)

    def _written(self) -> Written | None:
        assert self.writing is not None
        future, self.writing = self.writing, None
        try:
            path, nbytes = future.result()
        except OSError as exc:  # a full or failing disk: the shard keeps serving, the next snapshot tries again
            self.token = ()
            self.log.warning("replay snapshot failed: %s", exc)
            return None
        total = time.perf_counter() - self.started
        return Written(path, self.transitions, nbytes, self.pause_s, total)
