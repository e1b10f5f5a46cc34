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

What PPO sends (`ppo`, Pong): chunks its collector makes with the CNN policy acting (`make_collector`, 8 envs x 128
steps, preset=ppo-atari's), each frame once, as the wire carries them (the bytes of the encoded message's frames) and
as the FIFO holds them (`ChunkFifo`'s bytes per transition), against the same chunks with whole float32 stacks (what
PPO's chunks were before frames; the FIFO held those as they came).

Compression end to end (`compression`, `--end-to-end`): a serial loop of PPO on Pong, collect -> encode -> frames ->
decode -> `PPOLearner.update` (preset=ppo-atari, one chunk a batch), with the frame bytes compressed after encoding and
decompressed after decoding (lz4, zstd level 1) or not, the configurations interleaved over `--rounds` (each round
starting with the next): env steps/s of the whole loop and of its actor side (collect and send) alone, and the
milliseconds the compression and decompression themselves take a chunk. The wire carries no compression
(src/surreal does not compress): this measures what it would cost and save where the bytes never leave the box.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

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


def ppo_chunks(chunks: int, seed: int) -> tuple[list[Any], Any, Any]:
    """`chunks` consecutive chunks of PPO's collector on Pong (preset=ppo-atari's 8 envs x 128 steps, the CNN policy
    acting), the policy, and the experiment's algorithm config."""
    import torch

    from surreal.algos.ppo.config import PPOConfig
    from surreal.algos.ppo.policy import PPOPolicy, make_collector
    from surreal.config import algo_config, load_config
    from surreal.envs import make_vec_env

    torch.set_num_threads(1)
    experiment = load_config(["preset=ppo-atari", "env=ALE/Pong-v5"])
    cfg = cast(PPOConfig, algo_config(experiment))
    envs = make_vec_env("ALE/Pong-v5", experiment.topology.envs_per_actor, seed)
    policy = PPOPolicy(envs.single_observation_space, envs.single_action_space, cfg, 0)
    collector = make_collector(envs, policy, cfg, 0, experiment.actor.chunk_steps)
    return [collector.collect(0) for _ in range(chunks)], collector, cfg


def wire_bytes(chunk: Any) -> int:
    """The bytes of an experience message's frames as an actor sends it (header and arrays)."""
    from surreal.proto.channels import frames_of
    from surreal.proto.wire import encode_chunk

    return sum(memoryview(frame).nbytes for frame in frames_of(encode_chunk(chunk, "")))


def ppo_bytes(chunks: list[Any]) -> dict[str, Any]:
    """PPO's chunks on the wire and in the FIFO, each frame once against whole float32 stacks."""
    from surreal.proto.codec import Limits
    from surreal.proto.wire import Chunk
    from surreal.replay.buffers import ChunkFifo
    from surreal.runtime.frame_chunks import unpack

    def fifo_bytes(chunks: list[Any]) -> float:
        # Limits no chunk meets: 1,024 steps of float32 stacks (231 MB) are over any reply's default 64 MiB.
        fifo = ChunkFifo(1 << 30, capacity_bytes=1 << 40, reply=Limits(max_bytes=1 << 40))
        for chunk in chunks:
            fifo.add(chunk, chunk.size)
        return fifo.size_bytes / fifo.size

    naive = []
    for chunk in chunks:
        arrays = unpack(chunk.arrays)
        arrays["obs"], arrays["next_obs"] = arrays["obs"].astype(np.float32), arrays["next_obs"].astype(np.float32)
        naive.append(Chunk(arrays, chunk.version, chunk.actor, chunk.episode_returns, chunk.episode_lengths))
    steps = sum(chunk.size for chunk in chunks)
    wire = {
        "frames": round(sum(wire_bytes(c) for c in chunks) / steps, 1),
        "naive_float32": round(sum(wire_bytes(c) for c in naive) / steps, 1),
    }
    fifo = {"frames": round(fifo_bytes(chunks), 1), "naive_float32": round(fifo_bytes(naive), 1)}
    return {
        "chunk": f"{chunks[0].arrays['obs_index'].shape[0]} steps x {chunks[0].arrays['obs_index'].shape[1]} envs",
        "chunks": len(chunks),
        "wire_bytes_per_env_step": wire,
        "wire_frames_of_84x84_per_env_step": round(wire["frames"] / FRAME, 4),
        "wire_naive_over_frames": round(wire["naive_float32"] / wire["frames"], 1),
        "fifo_bytes_per_transition": fifo,
        "fifo_naive_over_frames": round(fifo["naive_float32"] / fifo["frames"], 1),
    }


def end_to_end(chunks: int, rounds: int) -> dict[str, Any]:
    """Env steps/s of a serial PPO loop on Pong, with the frame bytes compressed on the wire or not (module
    docstring), interleaved over `rounds`; and the bytes each codec leaves of a trained-size chunk's frames."""
    import torch

    from surreal.algos.ppo.learner import PPOLearner
    from surreal.proto.channels import frames_of
    from surreal.proto.codec import decode
    from surreal.proto.wire import decode_chunk, encode_chunk

    _, collector, cfg = ppo_chunks(0, seed=5)
    spaces = collector.envs.single_observation_space, collector.envs.single_action_space
    learner = PPOLearner(*spaces, cfg, torch.device("cpu"))
    configurations: dict[str, Any] = {"none": None, **{k: v for k, v in codecs().items() if k in ("lz4", "zstd-1")}}
    loop: dict[str, list[float]] = {name: [] for name in configurations}
    actor: dict[str, list[float]] = {name: [] for name in configurations}
    sent: dict[str, list[int]] = {name: [] for name in configurations}
    codec_ms: dict[str, list[float]] = {name: [] for name in configurations}
    names = list(configurations)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # each round starts with the next one
            codec = configurations[name]
            steps, actor_s, started = 0, 0.0, time.perf_counter()
            for _ in range(chunks):
                begun = time.perf_counter()
                chunk = collector.collect(0)
                message = [bytes(memoryview(frame)) for frame in frames_of(encode_chunk(chunk, ""))]
                squeezing = time.perf_counter()
                if codec is not None:  # the sender compresses each frame of the message
                    message = [codec[0](frame) for frame in message]
                actor_s += time.perf_counter() - begun
                sent[name].append(sum(len(frame) for frame in message))
                if codec is not None:  # the receiver decompresses before it decodes
                    message = [codec[1](frame) for frame in message]
                codec_ms[name].append((time.perf_counter() - squeezing) * 1e3)
                learner.update([decode_chunk(decode(message))], 0.0)
                steps += chunk.size
            loop[name].append(steps / (time.perf_counter() - started))
            actor[name].append(steps / actor_s)
    steps = chunks * rounds * collector.chunk_size
    median = {name: round(statistics.median(rates), 1) for name, rates in loop.items()}
    actor_median = {name: round(statistics.median(rates), 1) for name, rates in actor.items()}
    return {
        "loop": "collect 1,024 steps (8 Pong envs, the CNN acting) -> encode -> [compress each message frame] | "
        "[decompress] -> decode -> one PPOLearner.update (preset=ppo-atari) a chunk, one CPU thread; the actor side "
        "is collect, encode and compress",
        "rounds": rounds,
        "chunks_per_round": chunks,
        "env_steps_per_s": median,
        "env_steps_per_s_rounds": {name: [round(r, 1) for r in rates] for name, rates in loop.items()},
        "actor_side_env_steps_per_s": actor_median,
        "wire_bytes_per_env_step": {name: round(sum(b) / steps, 1) for name, b in sent.items()},
        "codec_ms_per_chunk": {name: round(statistics.median(ms), 2) for name, ms in codec_ms.items()},
        "loop_over_none": {name: round(median[name] / median["none"], 3) for name in median},
        "actor_side_over_none": {name: round(actor_median[name] / actor_median["none"], 3) for name in actor_median},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=4, help="chunks per game")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ppo-chunks", type=int, default=3, help="PPO chunks (8 envs x 128 steps) for the byte counts")
    parser.add_argument("--end-to-end", action="store_true", help="also the serial loop with compression or not")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the end-to-end loop")
    parser.add_argument("--loop-chunks", type=int, default=3, help="chunks per configuration and round")
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
    ppo = ppo_bytes(ppo_chunks(args.ppo_chunks, seed=1)[0])
    print("ppo", ppo, flush=True)
    compression = end_to_end(args.loop_chunks, args.rounds) if args.end_to_end else "not measured (--end-to-end)"
    print("compression", compression, flush=True)
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
            "ppo": ppo,
            "compression": compression,
        },
        Path(args.out),
    )


if __name__ == "__main__":
    main()
