"""Replay snapshot benchmark: what persisting a full HalfCheetah-sized shard costs, and that ingest goes on.

    python -m bench.replay_snapshot [--transitions 1000000] [--out bench/results/replay_snapshot.json]

A shard of `--transitions` DDPG transitions shaped like HalfCheetah's (obs 17, act 6, float32: obs, actions,
rewards, next_obs, discounts; 168 bytes plus its 8-byte id), full, for each of uniform and prioritized:

(a) ingest: chunks of 1,000 transitions offered at `--rate` (20,000/s, over 100x a 2-core DDPG run's env
    steps) by a loop that also ticks the periodic snapshot, as the role's loop does -> how late the latest
    chunk went in with no snapshot and while one is in flight (and how many went in meanwhile), the loop's
    pause to capture (ids, priorities, the guard band), and the snapshot's seconds from capture to rename
    (checksum, write and fsync on the snapshot thread, reading the live ring)
(b) final: the synchronous snapshot a SIGTERM writes (what the grace period must hold) -> final_write_s
(c) load: restore into a fresh shard, the file dropped from the page cache first (POSIX_FADV_DONTNEED on
    that file only) -> load_s; bytes on disk.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._runs import emit, machine
from surreal.proto.codec import Message
from surreal.proto.wire import Chunk, encode_chunk
from surreal.replay.buffers import TransitionStorage
from surreal.replay.shard import ReplayShard
from surreal.replay.snapshot import Snapshots, SnapshotStore

OBS, ACT = 17, 6
CHUNK = 1000
log = logging.getLogger("bench.replay_snapshot")


def chunk(rng: np.random.Generator) -> Message:
    """One actor message of DDPG n-step transitions, time-major [T, 1, ...]."""
    arrays = {
        "obs": rng.standard_normal((CHUNK, 1, OBS), dtype=np.float32),
        "actions": rng.standard_normal((CHUNK, 1, ACT), dtype=np.float32),
        "rewards": rng.standard_normal((CHUNK, 1), dtype=np.float32),
        "next_obs": rng.standard_normal((CHUNK, 1, OBS), dtype=np.float32),
        "discounts": np.full((CHUNK, 1), 0.99, np.float32),
    }
    return encode_chunk(Chunk(arrays, 0, 0), "bench")


def full_shard(mode: str, transitions: int) -> ReplayShard:
    shard = ReplayShard(mode, transitions)
    rng = np.random.default_rng(0)
    data = [chunk(rng) for _ in range(8)]  # reused: content does not matter, bytes do
    for i in range(transitions // CHUNK):
        shard.add(data[i % len(data)])
    if mode == "prioritized":  # priorities that differ slot to slot, as a learner's would, a sample's worth at a time
        assert isinstance(shard.storage, TransitionStorage)
        for start in range(0, transitions, 4096):
            slots = np.arange(start, min(start + 4096, transitions))
            shard.update_priorities(slots, shard.storage.ids[slots], rng.exponential(1.0, len(slots)))
    return shard


def ingest(replay: ReplayShard, snapshots: Snapshots | None, rate: float, seconds: float) -> dict[str, float]:
    """Add a chunk every CHUNK / `rate` s for `seconds` (with `snapshots`: until one snapshot is written),
    ticking the schedule in between as the role's loop does; how late the latest chunk went in is the stall."""
    rng = np.random.default_rng(1)
    data = [chunk(rng) for _ in range(8)]
    added, latest, written = 0, 0.0, None
    start = due = time.perf_counter()
    while written is None and (snapshots is not None or due - start < seconds):
        now = time.perf_counter()
        if now >= due:
            latest = max(latest, now - due)
            replay.add(data[added % len(data)])
            added += 1
            due += CHUNK / rate
        else:
            time.sleep(min(due - now, 0.001))
        if snapshots is not None:
            written = snapshots.tick(time.monotonic())
    out = {"transitions": added * CHUNK, "transitions_per_s": added * CHUNK / (time.perf_counter() - start)}
    out["latest_chunk_s"] = latest
    if written is not None:
        out.update(snapshot_s=written.total_s, pause_s=written.pause_s)
    return out


def drop_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measure(mode: str, transitions: int, rate: float, folder: Path) -> dict[str, Any]:
    replay = full_shard(mode, transitions)
    store = SnapshotStore(folder / mode, {"bench": mode})
    baseline = ingest(replay, None, rate, 3.0)
    snapshots = Snapshots(store, replay, interval_s=1e-9, log=log)  # due at once
    during = ingest(replay, snapshots, rate, 0.0)
    replay.add(chunk(np.random.default_rng(2)))  # something new for the final one
    start = time.perf_counter()
    final = snapshots.final()
    final_write_s = time.perf_counter() - start
    snapshots.close()
    assert final is not None
    drop_from_page_cache(final.path)
    fresh = ReplayShard(mode, transitions)
    start = time.perf_counter()
    assert store.restore(fresh.restore, log) == final.path
    load_s = time.perf_counter() - start
    assert fresh.stats() == replay.stats()
    return {
        "transitions": transitions,
        "bytes_on_disk": final.nbytes,
        "bytes_per_transition": final.nbytes / transitions,
        "ingest_rate_asked": rate,
        "ingest_transitions_per_s": baseline["transitions_per_s"],
        "ingest_latest_chunk_s": baseline["latest_chunk_s"],
        "ingest_during_snapshot_transitions": during["transitions"],
        "ingest_during_snapshot_latest_chunk_s": during["latest_chunk_s"],
        "periodic_snapshot_s": during["snapshot_s"],
        "periodic_loop_pause_s": during["pause_s"],
        "final_write_s": final_write_s,
        "load_s": load_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=20_000, help="transitions/s offered during the snapshot")
    parser.add_argument("--dir", type=Path, help="where the snapshots go (default: a temporary folder)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    result: dict[str, Any] = {
        "benchmark": "replay_snapshot",
        "machine": machine(),
        "obs": OBS,
        "act": ACT,
        "load_avg_1m_before": os.getloadavg()[0],  # the box is shared: a busy one makes every figure slower
    }
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for mode in ("uniform", "prioritized"):
            row = measure(mode, args.transitions, args.rate, Path(folder))
            result[mode] = row
            print(
                f"{mode}: {row['bytes_on_disk'] / 1e6:.0f} MB; final write {row['final_write_s']:.2f} s, "
                f"load {row['load_s']:.2f} s; periodic {row['periodic_snapshot_s']:.2f} s with the loop paused "
                f"{row['periodic_loop_pause_s'] * 1e3:.1f} ms; ingest {row['ingest_transitions_per_s']:,.0f}/s, "
                f"{row['ingest_during_snapshot_transitions']:,} added during it, latest chunk "
                f"{row['ingest_latest_chunk_s'] * 1e3:.1f} / "
                f"{row['ingest_during_snapshot_latest_chunk_s'] * 1e3:.1f} ms",
                flush=True,
            )
    result["load_avg_1m_after"] = os.getloadavg()[0]
    emit(result, args.out)


if __name__ == "__main__":
    main()
