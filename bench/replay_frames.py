"""Bytes per transition in the off-policy replay of pixels (replay/frame_storage.py), with a 1 M-transition capacity
configured, against the naive layout (two whole uint8 stacks a transition, `TransitionStorage`).

    nice -n 5 python -m bench.replay_frames          # writes bench/results/replay-frames.2core.json

For each observation kind, a `ReplayShard` of `--capacity` (1,000,000) transitions is built from the layout SAC's
actors declare (`chunk_fields`: each frame once, the stacks' indices), which allocates the rows and the frame ring
(NumPy zeros: pages become resident as they are written). Chunks collected from the env (uniformly random actions,
`actor.chunk_steps` steps x 4 envs, packed as the actors pack them) are then added through the wire's decoding until
`--fill` transitions are stored, cycling over the collected chunks, and the process's resident memory is read before
and after: its growth over the transitions stored is the measured bytes a transition; the 1 M figure is that times a
million (the ring's frames are written in order, so a full replay is the same pages, all of them). Beside it: what the
storage allocates for the 1 M capacity (`stored_nbytes`, the frame ring sized 1.1 frames a transition), and the naive
layout's bytes (two stacks and the scalar fields a transition).

- `atari`: 4 x 84 x 84 grayscale stacks (ALE/Pong-v5, the standard preprocessing): the issue's target, <= 8 GB for 1 M;
- `pixels`: 3 x (3 x 84 x 84) RGB stacks (InvertedPendulum-v5, `env.kwargs.pixels=true`), what DrQ-SAC stores.

Atari's actions are Discrete, which SAC does not take: its chunks are given a one-float action field, so the rows are
SAC's; the frames are what matters. Sampling cost is measured too (`sample_us`: one reply of 256 transitions, its
stacks rebuilt by two gathers).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._runs import RESULTS, emit, machine_at_end
from bench.frames import RandomPolicy

OUT = RESULTS / "replay-frames.2core.json"
ENVS, CHUNK_STEPS = 4, 256


def resident_bytes() -> int:
    """This process's resident set, from /proc (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class UniformBox(RandomPolicy):
    """Uniform actions in a Box (the pendulum's), with what SAC's collector records."""

    def __init__(self, low: np.ndarray, high: np.ndarray, envs: int, seed: int) -> None:
        super().__init__(0, envs, seed)
        self.low, self.high = low, high

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        actions = self.rng.uniform(self.low, self.high, (self.envs, len(self.low))).astype(np.float32)
        return actions, {"actions": actions}


class AsOneFloat(RandomPolicy):
    """Random Atari actions recorded as one float each (SAC's action field)."""

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        actions = self.rng.integers(0, self.n, self.envs)
        return actions, {"actions": actions.astype(np.float32)[:, None]}


def chunks_of(kind: str, count: int, seed: int) -> tuple[list[Any], Any, Any]:
    """`count` chunks of SAC's transitions (each frame once), and the observation and action spaces they use."""
    from gymnasium import spaces

    from surreal.algos.offpolicy import NStepCollector
    from surreal.envs import make_vec_env
    from surreal.runtime.rollout import RolloutCollector

    act_space: Any
    if kind == "atari":
        envs = make_vec_env("ALE/Pong-v5", ENVS, seed)
        policy: RandomPolicy = AsOneFloat(int(envs.single_action_space.n), ENVS, seed)  # type: ignore[attr-defined]
        act_space, planes = spaces.Box(-1.0, 1.0, (1,), np.float32), 1
    else:
        envs = make_vec_env("InvertedPendulum-v5", ENVS, seed, {"pixels": True})
        act_space = envs.single_action_space
        policy, planes = UniformBox(act_space.low, act_space.high, ENVS, seed), 3
    collector = NStepCollector(RolloutCollector(envs, policy, CHUNK_STEPS, 0), 1, 0.99, planes)
    chunks = [collector.collect(0) for _ in range(count)]
    obs_space = envs.single_observation_space
    envs.close()
    return chunks, obs_space, act_space


def measure(kind: str, capacity: int, fill: int, seed: int) -> dict[str, Any]:
    from surreal.algos.offpolicy import chunk_fields
    from surreal.algos.sac.config import SACConfig
    from surreal.proto.channels import frames_of
    from surreal.proto.codec import Limits, decode
    from surreal.proto.wire import encode_chunk
    from surreal.replay.frame_storage import FrameStorage, stored_nbytes
    from surreal.replay.shard import ReplayShard

    chunks, obs_space, act_space = chunks_of(kind, 6, seed)
    fields = chunk_fields(obs_space, act_space, SACConfig(frame_planes=3 if kind == "pixels" else 1))
    messages = [frames_of(encode_chunk(chunk, "")) for chunk in chunks]
    before_allocation = resident_bytes()
    shard = ReplayShard("uniform", capacity, seed=seed, capacity_bytes=1 << 40, layout=fields)
    storage = shard.storage
    assert isinstance(storage, FrameStorage)
    allocated_resident = resident_bytes() - before_allocation
    before = resident_bytes()
    started = time.perf_counter()
    added = 0
    while storage.size < fill:
        added += shard.add(decode(messages[added // chunks[0].size % len(messages)], Limits()))
    add_s = time.perf_counter() - started
    grown = resident_bytes() - before
    frame = fields["per_chunk/frames"]
    frame_bytes = frame.dtype.itemsize * int(np.prod(frame.shape))
    scalar_bytes = sum(f.dtype.itemsize * int(np.prod(f.shape)) for k, f in fields.items() if "index" not in k)
    scalar_bytes -= frame_bytes
    naive = 2 * int(np.prod(obs_space.shape)) + scalar_bytes
    measured = grown / storage.size
    timings = []
    for _ in range(20):
        t = time.perf_counter()
        shard.sample(256)
        timings.append(time.perf_counter() - t)
    return {
        "observation": list(obs_space.shape),
        "frame": list(frame.shape),
        "capacity": capacity,
        "stored": storage.size,
        "frames_per_transition": round(storage.ring.end / storage.added, 4),
        "resident_bytes_per_transition": round(measured, 1),
        "resident_at_allocation_bytes": allocated_resident,
        "naive_bytes_per_transition": naive,
        "ratio_naive_over_measured": round(naive / measured, 2),
        "gb_per_million_measured": round(measured * 1e6 / 1e9, 2),
        "gb_per_million_allocated": round(stored_nbytes(fields, 1_000_000) / 1e9, 2),
        "gb_per_million_naive": round(naive * 1e6 / 1e9, 2),
        "add_us_per_transition": round(add_s / added * 1e6, 2),
        "sample_256_us": round(float(np.median(timings)) * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--fill", type=int, default=100_000, help="transitions stored before the resident set is read")
    parser.add_argument("--kinds", nargs="+", default=["atari", "pixels"], choices=["atari", "pixels"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    rows = {kind: measure(kind, args.capacity, args.fill, args.seed) for kind in args.kinds}
    emit({"bench": "replay_frames", "machine": machine_at_end(), "fill": args.fill, "kinds": rows}, Path(args.out))


if __name__ == "__main__":
    main()
