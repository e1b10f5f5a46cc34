"""Why a parameter fetch was slow: bench.fleet lines up the fetches its actors timed above SLOW_MS against what
else happened on the box at that moment.

A fetch's latency, as a simulated actor times it, is the ps's service time plus everything between the two
processes: the actor's own process taking the answer off its socket late (its event loop busy with other actors, a
garbage collection, the kernel running something else), the ps waiting for a core, a disk write stalling the
box. A percentile cannot say which. So each simulated-fleet process keeps a `LoopTrace` (its slow fetches, its
loop's stalls and its collections, in CLOCK_MONOTONIC seconds, which every process on the box shares), bench.fleet
samples a `Timeline` every second (each process's CPU and run-queue wait, the box's pressure-stall totals, the
replay shards' snapshots), and `explain` counts, of the slow fetches, those that overlap each kind of event, and
compares the sampled signals in the seconds that held a slow fetch with the other seconds.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SLOW_MS = 50.0  # issue #23's bound on the ps fetch p99
STALL_MS = 10.0  # a fleet loop busy this long in one turn, or woken this much later than it asked, is recorded
GC_MS = 1.0  # collections at least this long are recorded (every generation-2 one is)
KEEP = 20_000  # events of each kind kept per process (the newest)
PRESSURE = ("cpu", "io", "memory")  # /proc/pressure files: microseconds some task stalled on each


class LoopTrace:
    """One simulated-fleet process's slow fetches, loop stalls and garbage collections, as (start, end) pairs."""

    def __init__(self) -> None:
        self.slow: deque[tuple[float, float, str]] = deque(maxlen=KEEP)  # "at_once" or "fanout"
        self.stalls: deque[tuple[float, float, str]] = deque(maxlen=KEEP)  # "busy" or "late"
        self.gcs: deque[tuple[float, float, int]] = deque(maxlen=KEEP)
        self._gc_started = 0.0
        gc.callbacks.append(self._on_gc)

    def fetch(self, start: float, answered: float, kind: str) -> None:
        """A fetch timed as bench.fleet_actors times it: from its request leaving (`at_once`) or from its blob's
        first arrival in this process (`fanout`) to its answer coming off the socket."""
        if (answered - start) * 1000 >= SLOW_MS:
            self.slow.append((start, answered, kind))

    def turn(self, asked_until: float, woke: float, done: float) -> None:
        """One loop turn: it polled until `asked_until` at the latest, the poll returned at `woke`, and the turn's
        work ended at `done`."""
        if (woke - asked_until) * 1000 >= STALL_MS:
            self.stalls.append((asked_until, woke, "late"))
        if (done - woke) * 1000 >= STALL_MS:
            self.stalls.append((woke, done, "busy"))

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = time.monotonic()
        if phase == "start":
            self._gc_started = now
        elif (now - self._gc_started) * 1000 >= GC_MS or info.get("generation") == 2:
            self.gcs.append((self._gc_started, now, info.get("generation", -1)))

    def to_json(self) -> dict[str, Any]:
        return {"slow": list(self.slow), "stalls": list(self.stalls), "gcs": list(self.gcs)}


def run_queue_wait_s(pid: int) -> float | None:
    """Seconds this process's threads have waited for a core (/proc/PID/schedstat, the kernel's run delay)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def pressure_totals() -> dict[str, float]:
    """Seconds some task on the box has stalled on CPU, IO and memory since boot ({} without PSI)."""
    out = {}
    for kind in PRESSURE:
        try:
            some = Path(f"/proc/pressure/{kind}").read_text().splitlines()[0]
        except (OSError, IndexError):
            continue
        out[kind] = int(some.rsplit("total=", 1)[1]) / 1e6
    return out


@dataclass
class Timeline:
    """Per-second samples: (monotonic time, {signal: cumulative value}). Signals: `cpu:<process>` and
    `wait:<process>` (CPU and run-queue seconds), `pressure:<kind>`, `snapshots:<shard>` and `snapshot_s:<shard>`
    (snapshots written, and the last one's seconds from capture to rename)."""

    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def add(self, at: float, values: dict[str, float]) -> None:
        self.samples.append((at, values))

    def rates(self) -> list[tuple[float, float, dict[str, float]]]:
        """(start, end, {signal: increase per second}) of each sampled interval (for the cumulative signals)."""
        out = []
        for (t0, v0), (t1, v1) in zip(self.samples, self.samples[1:], strict=False):
            span = max(t1 - t0, 1e-9)
            out.append((t0, t1, {k: (v1[k] - v0[k]) / span for k in v1 if k in v0 and not k.startswith("snapshot_s")}))
        return out

    def snapshot_windows(self) -> list[tuple[float, float]]:
        """When each replay snapshot was being written, as closely as one-second samples tell: from its duration
        before the earliest moment it can have ended, to the sample that counted it."""
        windows = []
        for (t0, v0), (t1, v1) in zip(self.samples, self.samples[1:], strict=False):
            for key in v1:
                if key.startswith("snapshots:") and v1[key] > v0.get(key, v1[key]):
                    seconds = v1.get("snapshot_s:" + key.split(":", 1)[1], 0.0)
                    windows.append((t0 - seconds, t1))
        return windows


def overlaps(start: float, end: float, spans: Sequence[tuple[float, ...]]) -> bool:
    return any(s[0] < end and s[1] > start for s in spans)


def explain(fleets: dict[str, dict[str, Any]], timeline: Timeline, window: tuple[float, float]) -> dict[str, Any]:
    """What the slow fetches (those sent inside `window`) overlapped, and the sampled signals in the seconds that
    held one against the other seconds. `fleets`: each fleet process's `LoopTrace.to_json()`, by process name."""
    kinds = ("own_loop_busy", "own_loop_late", "own_gc", "replay_snapshot")
    counts = dict.fromkeys(kinds, 0)
    snapshots = timeline.snapshot_windows()
    slow: list[tuple[float, float]] = []
    by_kind: dict[str, int] = {}
    none_of_these, latencies = 0, []
    for trace in fleets.values():
        busy = [s for s in trace["stalls"] if s[2] == "busy"]
        late = [s for s in trace["stalls"] if s[2] == "late"]
        for sent, answered, kind in trace["slow"]:
            if not window[0] <= sent <= window[1]:
                continue
            slow.append((sent, answered))
            by_kind[kind] = by_kind.get(kind, 0) + 1
            latencies.append((answered - sent) * 1000)
            hits = {
                "own_loop_busy": overlaps(sent, answered, busy),
                "own_loop_late": overlaps(sent, answered, late),
                "own_gc": overlaps(sent, answered, trace["gcs"]),
                "replay_snapshot": overlaps(sent, answered, snapshots),
            }
            for kind, hit in hits.items():
                counts[kind] += hit
            none_of_these += not any(hits.values())
    intervals = [r for r in timeline.rates() if window[0] <= r[0] and r[1] <= window[1]]
    held = [rates for t0, t1, rates in intervals if overlaps(t0, t1, slow)]
    others = [rates for t0, t1, rates in intervals if not overlaps(t0, t1, slow)]
    signals = sorted({k for _, _, rates in intervals for k in rates if not k.startswith("snapshots:")})

    def mean(rows: list[dict[str, float]], key: str) -> float | None:
        values = [r[key] for r in rows if key in r]
        return round(1000 * sum(values) / len(values), 1) if values else None  # ms per second

    in_fleet = lambda key: sum(len(t[key]) for t in fleets.values())  # noqa: E731
    return {
        "threshold_ms": SLOW_MS,
        "count": len(slow),
        "by_kind": by_kind,
        "max_ms": round(max(latencies), 1) if latencies else None,
        "overlapping": counts,
        "none_of_these": none_of_these,
        "seconds_with_slow": len(held),
        "seconds_without": len(others),
        # ms per second of each signal: CPU and run-queue wait of every process, the box's pressure stalls
        "signals_ms_per_s": {k: {"with_slow": mean(held, k), "without": mean(others, k)} for k in signals},
        "fleet_loop_stalls": in_fleet("stalls"),
        "fleet_gcs": in_fleet("gcs"),
        "replay_snapshots": len(snapshots),
    }
