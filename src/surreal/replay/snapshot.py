"""Replay snapshots: a shard's contents, priorities and books on disk, so a restarted shard is not empty.

What is captured (`ReplayShard.capture`: each storage and sampler captures its own, replay/buffers.py and
replay/samplers.py):

- transitions (uniform, prioritized): the used part of every storage array, the insertion ids, the cursor
  and counters, and for a prioritized sampler each slot's priority and the largest seen. A snapshot is taken
  every `replay.snapshot_interval_s` and on SIGTERM; a shard killed outright loses what arrived after its
  last one, and may sample again what it had served since, which is what replay does anyway.
- FIFO (PPO, ES): the held chunks, on SIGTERM only, and the snapshot is removed once restored. A FIFO serves
  each chunk once: a periodic snapshot restored after a kill would serve again every chunk served since.

Neither ingest nor memory pays for a write. A capture, on the shard's loop, copies only what is small or what
ingest is about to overwrite: the ids and priorities (8 bytes a slot each), the books, and a guard band, the
next `guard` slots of the snapshot that the ring's cursor will reach. The snapshot thread then checksums and
writes every other row straight from the live ring while actors keep writing into it: their writes are
sequential from the cursor, so they land in the guard band (copied) or beyond the used part, never in a row
being read. If ingest outran the guard band before the thread finished reading, the file is discarded before
it is renamed into place, and the next attempt has a guard twice as large. So the snapshot is exactly the
state at capture, the loop's pause is a few memcpys, and the extra memory is the guard band and 16 bytes a
slot, not a second ring. A held FIFO chunk is never written to, so its arrays are referenced, not copied.

`SnapshotStore` keeps the newest `KEEP` files in the shard's folder (a crash mid-write leaves the previous
one) and restores the newest good one; a corrupt or foreign file is renamed aside with one log line.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from surreal.replay.buffers import Overrun
from surreal.replay.shard import ReplayShard
from surreal.replay.snapfile import Capture, ShardState, SnapshotError, read_snapshot, write_snapshot

KEEP = 2
PATTERN = re.compile(r"^replay-(\d{10})\.snap$")
GUARD_ROWS = 1 << 16  # the first guard band: ~0.5 s of ingest at 100k transitions/s, 11 MB of HalfCheetah rows


# -- the folder -----------------------------------------------------------------------------------------


class SnapshotStore:
    """One shard's snapshot folder: `replay-<n>.snap`, numbered upwards, the newest `KEEP` kept.

    `identity` says what the shard is (experiment, buffer kind, capacity, shard index); a snapshot written
    under another identity is foreign and never restored.
    """

    def __init__(
        self, directory: Path, identity: dict[str, Any], on_change: Callable[[], object] | None = None
    ) -> None:
        """`on_change`: called after each save and clear, on the thread that did it (a mirror to a bucket)."""
        self.directory, self.on_change = Path(directory), on_change
        self.identity = json.loads(json.dumps(identity, default=str))  # as a header holds it: equal compares equal
        self.directory.mkdir(parents=True, exist_ok=True)
        for partial in self.directory.glob(".replay-*.snap.tmp"):  # a write cut short by a crash
            partial.unlink(missing_ok=True)

    def paths(self) -> list[Path]:
        """Snapshots in the folder, oldest first."""
        found = [(int(m.group(1)), p) for p in self.directory.iterdir() if (m := PATTERN.match(p.name))]
        return [p for _, p in sorted(found)]

    def save(self, captured: Capture) -> tuple[Path, int]:
        """Write `captured` as the newest snapshot and drop the oldest beyond `KEEP`; returns (path, bytes).
        A write that fails (a full disk, an `Overrun`) leaves no file behind."""
        existing = self.paths()
        number = int(PATTERN.match(existing[-1].name).group(1)) + 1 if existing else 1  # type: ignore[union-attr]
        path = self.directory / f"replay-{number:010d}.snap"
        try:
            size = write_snapshot(path, self.identity, captured.books, captured.arrays, captured.verify)
        except BaseException:
            path.with_name(f".{path.name}.tmp").unlink(missing_ok=True)  # the atomic writer's temporary
            raise
        for old in self.paths()[:-KEEP]:
            old.unlink(missing_ok=True)
        if self.on_change is not None:
            self.on_change()
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
        if self.on_change is not None:
            self.on_change()


# -- when, and on which thread --------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """One snapshot on disk: `pause_s` the shard's loop spent capturing, `total_s` from capture to rename."""

    path: Path
    transitions: int
    nbytes: int
    pause_s: float
    total_s: float


WRITER_NICE = 10  # the snapshot thread's niceness above the shard's loop: about a tenth of a core it shares


def lower_thread_priority() -> None:
    """Make the calling thread WRITER_NICE steps nicer (Linux, where each thread has its own niceness; elsewhere
    nothing). A snapshot is background durability work: checksumming a large ring takes a core for a while,
    and on a node whose cores the shard shares (its loop, a ps, the learner, actors) that core should go to
    serving first. A thread may lower its own priority; a sandbox that forbids even that leaves the writer at the
    loop's (an initializer that raised would break the executor, and with it every snapshot)."""
    if sys.platform == "linux":
        tid = threading.get_native_id()
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + WRITER_NICE)


@dataclass
class SnapshotSchedule:
    """When a shard takes a snapshot, without a clock or a disk (the simulator's shards keep the same one): every
    `interval_s` (0: never periodically; a FIFO never, module docstring) and when it stops, each time only if its
    contents changed since the last (`ReplayShard.change_token`)."""

    interval_s: float
    due: float
    token: tuple[int, ...]  # what the newest snapshot holds (a restored shard's: what it read)

    @classmethod
    def of(cls, shard: ReplayShard, interval_s: float, now: float) -> SnapshotSchedule:
        interval_s = 0.0 if shard.storage.served_once else interval_s
        return cls(interval_s, now + interval_s, shard.change_token())

    def periodic(self, now: float) -> bool:
        """Whether a periodic snapshot is due at `now` (the next is then one interval away)."""
        if self.interval_s <= 0 or now < self.due:
            return False
        self.due = now + self.interval_s
        return True

    def take(self, shard: ReplayShard, guard: int) -> Capture | None:
        """The shard's capture to write now (`guard`: `ReplayShard.capture`), or None when nothing changed since the
        last snapshot or nothing is held."""
        token = shard.change_token()
        captured = None if token == self.token else shard.capture(guard)
        if captured is not None:
            self.token = token
        return captured


class Snapshots:
    """Snapshots of one shard on disk, as `SnapshotSchedule` says: `tick` from the shard's loop,
    `final` on the way out (SIGTERM). One at a time; the write runs on a thread of its own, at a lower
    priority than the loop (`lower_thread_priority`)."""

    def __init__(self, store: SnapshotStore, shard: ReplayShard, interval_s: float, log: logging.Logger) -> None:
        self.store, self.shard, self.log = store, shard, log
        self.executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="replay-snapshot", initializer=lower_thread_priority
        )
        self.schedule = SnapshotSchedule.of(shard, interval_s, time.monotonic())
        self.guard = GUARD_ROWS
        self.writing: Future[tuple[Path, int]] | None = None
        self.started = 0.0
        self.pause_s = 0.0
        self.transitions = 0

    def tick(self, now: float) -> Written | None:
        """Start a snapshot when one is due and anything changed, or collect the one written; never blocks.
        Returns the snapshot just written, if one was."""
        if self.writing is not None:
            return self._collect() if self.writing.done() else None
        if self.schedule.periodic(now):
            self._begin()
        return None

    def final(self) -> Written | None:
        """Everything the shard holds on disk before it exits, synchronously: a write in flight is waited for,
        then one more is written unless nothing changed since."""
        written = self._collect() if self.writing is not None else None
        if self._begin(inline=True):
            written = self._collect()
        return written

    def close(self) -> None:
        self.executor.shutdown(wait=True)

    def _begin(self, inline: bool = False) -> bool:
        """Capture on the loop and hand the write to the thread (`inline`: write it on the caller's, at the
        loop's priority: the last one, which the shard waits for anyway); False if there is nothing new."""
        self.started = time.perf_counter()
        captured = self.schedule.take(self.shard, self.guard)
        if captured is None:
            return False
        self.pause_s, self.transitions = time.perf_counter() - self.started, captured.transitions
        if inline:
            self.writing = Future()
            try:
                self.writing.set_result(self.store.save(captured))
            except Exception as exc:  # handled as a thread's failure is, by _collect
                self.writing.set_exception(exc)
        else:
            self.writing = self.executor.submit(self.store.save, captured)
        return True

    def _collect(self) -> Written | None:
        assert self.writing is not None
        future, self.writing = self.writing, None
        try:
            path, nbytes = future.result()
        except Overrun as exc:  # ingest outran the guard band: try again at once with one twice as large
            self.schedule.token, self.schedule.due, self.guard = (), 0.0, 2 * self.guard
            self.log.info("replay snapshot abandoned (%s): trying again with a guard of %d rows", exc, self.guard)
            return None
        except OSError as exc:  # a full or failing disk: the shard keeps serving, the next snapshot tries again
            self.schedule.token = ()
            self.log.warning("replay snapshot failed: %s", exc)
            return None
        return Written(path, self.transitions, nbytes, self.pause_s, time.perf_counter() - self.started)
