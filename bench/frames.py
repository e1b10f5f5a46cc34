"""Bytes per env step of a chunk of Atari frames, naively and as each frame once (surreal/frames.py), with and
without lz4 / zstd compression of the frame bytes, and what each costs in microseconds per chunk.

    nice -n 5 python -m bench.frames                          # writes bench/results/frames.2core.json

Chunks are what an actor collects today (`RolloutCollector`, uniformly random actions, `actor.chunk_steps=256`,
4 envs), of Pong and of Breakout (training envs, machado preset), kept as uint8. For each chunk:

- `naive_float32`: obs and next_obs as the collector's float32 stacks (what PPO's chunk carries today);
- `naive_uint8`: the same stacks as uint8 (8 frames an env step);
- `frames`: `split(obs, next_obs)`: each frame once plus two int32 index arrays; `frames_per_step` counts frames;
- `lz4` / `zstd-1` / `zstd-3`: the frame bytes compressed (the indices left as they are), with the microseconds to
  compress and to decompress one chunk;
- `split_us` / `rebuild_us`: `split` on the actor, `obs()` + `next_obs()` where the stacks are used.

The replay figures are per stored transition: a frame ring's share (frames per step x a frame) plus the transition's
2 x 4 int64 frame numbers, against two whole uint8 stacks, and what a million transitions take each way.
Timings are medians over `--repeats` passes on a box shared with other work (the byte counts do not move).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench._runs import RESULTS, emit, machine_at_end
from surreal.frames import FrameChunk, split

OUT = RESULTS / "frames.2core.json"
GAMES = ("ALE/Pong-v5", "ALE/Breakout-v5")
CHUNK_STEPS, ENVS, STACK = 256, 4, 4
FRAME = 84 * 84


class RandomPolicy:
    def __init__(self, n: int, envs: int, seed: int) -> None:
        self.n, self.envs, self.rng = n, envs, np.random.default_rng(seed)

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return self.rng.integers(0, self.n, self.envs), {}

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self.act(obs)[0]

    def episode_done(self, done: np.ndarray) -> None:
        pass

    def sampling_state(self) -> dict[str, Any]:
        return {}

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        pass


def collect(env_id: str, chunks: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """`chunks` consecutive chunks of (obs, next_obs) as uint8 stacks, as an actor collects them."""
    from surreal.envs import make_vec_env
    from surreal.runtime.rollout import RolloutCollector

    envs = make_vec_env(env_id, ENVS, seed)
    actions = int(envs.single_action_space.n)  # type: ignore[attr-defined]  # Discrete
    collector = RolloutCollector(envs, RandomPolicy(actions, ENVS, seed), CHUNK_STEPS, 0)
    out = []
    for _ in range(chunks):
        arrays = collector.collect(0).arrays
        out.append((arrays["obs"].astype(np.uint8), arrays["next_obs"].astype(np.uint8)))
    envs.close()
    return out


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The median microseconds of `repeats` calls, and the last call's result."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - started) * 1e6)
    return round(statistics.median(times), 1), result


def codecs() -> dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]]:
    """The compressors measured: whichever of lz4 and zstandard are installed."""
    found: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {}
    try:
        import lz4.frame

        found["lz4"] = (lz4.frame.compress, lz4.frame.decompress)
    except ImportError:
        pass
    try:
        import zstandard

        for level in (1, 3):
            compressor, decompressor = zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor()
            found[f"zstd-{level}"] = (compressor.compress, decompressor.decompress)
    except ImportError:
        pass
    return found


def measure(obs: np.ndarray, next_obs: np.ndarray, repeats: int) -> dict[str, Any]:
    steps = obs.shape[0] * obs.shape[1]
    split_us, chunk = timed(lambda: split(obs, next_obs), repeats)
    assert isinstance(chunk, FrameChunk)
    rebuild_us, _ = timed(lambda: (chunk.obs(), chunk.next_obs()), repeats)
    index_bytes = chunk.obs_index.nbytes + chunk.next_index.nbytes
    row: dict[str, Any] = {
        "env_steps": steps,
        "frames": len(chunk.frames),
        "frames_per_step": round(len(chunk.frames) / steps, 4),
        "bytes_per_step": {
            "naive_float32": (obs.nbytes + next_obs.nbytes) * 4 / steps,
            "naive_uint8": (obs.nbytes + next_obs.nbytes) / steps,
            "frames": round(chunk.nbytes / steps, 1),
        },
        "split_us": split_us,
        "rebuild_us": rebuild_us,
    }
    raw = chunk.frames.tobytes()
    for name, (compress, decompress) in codecs().items():
        compress_us, packed = timed(lambda c=compress: c(raw), repeats)  # type: ignore[misc]
        decompress_us, unpacked = timed(lambda d=decompress, p=packed: d(p), repeats)  # type: ignore[misc]
        assert unpacked == raw
        row["bytes_per_step"][name] = round((len(packed) + index_bytes) / steps, 1)
        row[f"{name}_compress_us"], row[f"{name}_decompress_us"] = compress_us, decompress_us
    return row


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over a game's chunks, and the layouts' bytes per step in frames (84 x 84 bytes)."""
    out: dict[str, Any] = {
        "chunks": len(rows),
        "frames_per_step": statistics.median(r["frames_per_step"] for r in rows),
    }
    layouts = rows[0]["bytes_per_step"]
    out["bytes_per_step"] = {k: round(statistics.median(r["bytes_per_step"][k] for r in rows), 1) for k in layouts}
    out["frames_of_84x84_per_step"] = {k: round(v / FRAME, 4) for k, v in out["bytes_per_step"].items()}
    for key in rows[0]:
        if key.endswith("_us"):
            out[key] = round(statistics.median(r[key] for r in rows), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=4, help="chunks per game")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    games = {}
    for game in GAMES:
        rows = [measure(obs, next_obs, args.repeats) for obs, next_obs in collect(game, args.chunks, seed=1)]
        games[game] = summary(rows)
        print(game, games[game], flush=True)
    frames_per_step = max(g["frames_per_step"] for g in games.values())
    per_transition = {
        "naive_uint8": 2 * STACK * FRAME,
        "frame_ring": round(frames_per_step * FRAME + 2 * STACK * 8, 1),
    }
    emit(
        {
            "bench": "frames",
            "machine": machine_at_end(),
            "shared_box": "other work ran on the same cores: microseconds move with it; bytes do not",
            "chunk": f"actor.chunk_steps={CHUNK_STEPS} x {ENVS} envs, stacks of {STACK} 84x84 uint8 frames",
            "games": games,
            "wire_target": "at most 1.1 frames of 84x84 uint8 per env step before compression",
            "replay_bytes_per_transition": per_transition,
            "replay_gb_per_million_transitions": {k: round(v * 1e6 / 1e9, 2) for k, v in per_transition.items()},
        },
        Path(args.out),
    )


if __name__ == "__main__":
    main()
