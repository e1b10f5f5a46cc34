"""bench.atari_curve's channel measurement, plaintext and over CURVE, and how it reads what a system run's replay
shard served over: what the CURVE figures on docs/security.md stand on."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from bench.atari_curve import channel, wire_logged

from surreal.proto.curve import CurveKeys
from surreal.proto.wire import PER_CHUNK


def small_frame_chunk() -> dict[str, object]:
    """A chunk shaped as PPO's frames-once chunks (a few frames, their indices), small enough to send fast."""
    T, K = 4, 2
    base = (np.arange(K) * (T + 4))[None, :, None] + np.arange(T)[:, None, None] + np.arange(4)[None, None, :]
    return {
        PER_CHUNK: {"frames": np.zeros((K * (T + 4), 84, 84), np.uint8)},
        "obs_index": base.astype(np.int32),
        "next_index": (base + 1).astype(np.int32),
        "rewards": np.zeros((T, K), np.float32),
    }


def test_the_channel_carries_every_chunk_both_ways_and_leaves_the_affinity_as_it_was() -> None:
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    for keys in (None, CurveKeys.generate()):
        got = channel(small_frame_chunk(), 8, keys)
        assert got["chunks_per_s"] > 0
        assert got["sender_cpu_s_per_chunk"] > 0 and got["receiver_cpu_s_per_chunk"] > 0
    if before is not None:
        assert os.sched_getaffinity(0) == before


def test_wire_logged_reads_what_the_replay_shard_served_over(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "replay-0.log"
    log.write_text("INFO serving shard 0 (fifo, capacity 4096) experience ipc:///x over CURVE, metrics :7001\n")
    assert wire_logged(tmp_path) == "CURVE"
    log.write_text(
        "INFO serving shard 0 experience tcp://127.0.0.1:1 over plaintext (no SURREAL_CURVE_DIR), metrics :9\n"
    )
    assert wire_logged(tmp_path) == "plaintext (no SURREAL_CURVE_DIR)"
    log.write_text("INFO starting\n")
    assert wire_logged(tmp_path) == "not logged"
