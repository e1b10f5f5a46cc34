"""bench/fleet_trace.py: slow fetches lined up against the fleet's loop stalls, its collections, replay snapshots
and the per-second signals. Synthetic events, so every verdict is exact."""

from __future__ import annotations

import gc
import os

from bench.fleet_trace import LoopTrace, Timeline, explain, pressure_totals, run_queue_wait_s


def test_loop_trace_keeps_only_slow_fetches_long_turns_and_collections():
    trace = LoopTrace()
    try:
        trace.fetch(10.0, 10.049, "at_once")  # 49 ms: fast enough
        trace.fetch(10.0, 10.051, "at_once")
        trace.fetch(11.0, 11.2, "fanout")
        trace.turn(asked_until=20.0, woke=20.005, done=20.009)  # woke 5 ms late, busy 4 ms: nothing
        trace.turn(asked_until=21.0, woke=21.02, done=21.05)  # 20 ms late, then 30 ms busy
        gc.collect()  # a full (generation 2) collection is always kept
        kept = trace.to_json()
    finally:
        gc.callbacks.remove(trace._on_gc)
    assert kept["slow"] == [(10.0, 10.051, "at_once"), (11.0, 11.2, "fanout")]
    assert kept["stalls"] == [(21.0, 21.02, "late"), (21.02, 21.05, "busy")]
    assert [g[2] for g in kept["gcs"]][-1:] == [2] and all(g[0] <= g[1] for g in kept["gcs"])


def timeline() -> Timeline:
    """Ten one-second samples. In second 3-4 the ps waits 200 ms for a core (20 ms in the others); the shard
    counts a 0.5 s snapshot at 6.0."""
    tl = Timeline()
    wait, snapshots = 0.0, 0.0
    for t in range(10):
        tl.add(float(t), {"wait:ps-0": wait, "snapshots:replay-0": snapshots, "snapshot_s:replay-0": 0.5})
        wait += 0.2 if t == 3 else 0.02
        snapshots += 1 if t == 5 else 0
    return tl


def test_explain_counts_what_each_slow_fetch_overlapped_and_compares_the_seconds():
    fleets = {
        "fleet-a": {
            "slow": [
                (1.10, 1.20, "at_once"),  # during its own loop's busy turn
                (3.20, 3.30, "at_once"),  # nothing of its own: the second the ps waited for a core
                (5.70, 5.80, "fanout"),  # inside the snapshot's window (4.5 .. 6.0)
                (20.0, 20.1, "at_once"),  # outside the measured window: not counted
            ],
            "stalls": [(1.15, 1.25, "busy"), (8.0, 8.1, "late")],
            "gcs": [],
        },
        "fleet-b": {"slow": [(7.50, 7.56, "at_once")], "stalls": [], "gcs": [(7.52, 7.53, 2)]},
    }
    out = explain(fleets, timeline(), (0.0, 9.0))
    assert out["count"] == 4 and out["by_kind"] == {"at_once": 3, "fanout": 1}
    assert out["max_ms"] == 100.0
    assert out["overlapping"] == {"own_loop_busy": 1, "own_loop_late": 0, "own_gc": 1, "replay_snapshot": 1}
    assert out["none_of_these"] == 1
    assert out["seconds_with_slow"] == 4 and out["seconds_without"] == 5
    # the ps's run-queue wait: 200 ms in one of the four seconds with a slow fetch, 20 ms in every other second
    assert out["signals_ms_per_s"]["wait:ps-0"] == {"with_slow": 65.0, "without": 20.0}
    assert out["fleet_loop_stalls"] == 2 and out["fleet_gcs"] == 1 and out["replay_snapshots"] == 1


def test_the_box_signals_read_this_process_and_the_kernels_pressure_files():
    waited = run_queue_wait_s(os.getpid())
    assert waited is None or waited >= 0.0
    assert run_queue_wait_s(2**22 + 1) is None  # above pid_max's ceiling: no such process
    totals = pressure_totals()
    assert set(totals) <= {"cpu", "io", "memory"} and all(v >= 0 for v in totals.values())
