"""CURVE at pixel bandwidth: PPO's Pong chunks through the actor's experience channel, plaintext and over CURVE,
interleaved round by round, and what CURVE's CPU time per env step is against an actor's own.

    nice -n 5 python -m bench.atari_curve               # writes bench/results/atari-curve.2core.json

- **the chunk**: one real chunk of the ppo-atari preset (8 envs x 128 steps of `ALE/Pong-v5`, PPO's CNN policy
  acting), collected first by `make_collector` as an actor does, each frame once (runtime/frame_chunks.py): about 7.2
  KB an env step, 7.4 MB a chunk. Collecting it (pinned to core 0, one torch thread) also times the actor: its CPU
  seconds per env step, CNN forward and env stepping, nothing sent (`actor_s_per_env_step`).
- **the channel**: `--chunks` copies of it sent by the actor's own `ExperienceSender` (a process pinned to core 0,
  spawned) to a PULL socket that decodes every message (this process, pinned to core 1), as a replay shard's
  experience port takes them; plaintext, then over CURVE with a fresh pair of keys (proto/curve.py, as `surreal run`
  and the chart make them). Each side's CPU seconds (every thread of the process, ZMQ's I/O thread where the cipher
  runs included) over the chunks it handled, and the chunks per second the channel carried.

- **the system** (`--system-rounds`, default 2; 0 leaves it out): `surreal run preset=ppo-atari env=ALE/Pong-v5`,
  one actor, the learner on the CPU, for `--system-seconds`, as bench/atari_ppo.py runs it (env frames/s from the
  learner's rows after the first two updates), over CURVE (`surreal run` itself) and in plaintext
  (bench/plaintext_run.py: the same launch with the keys left out, as the chart's `curve.enabled=false`), the two
  one after the other in each round; `wire_logged` is what the replay shard's log says it served over.

What CURVE costs: `curve_added_cpu_s_per_env_step`, the sender's and the receiver's CPU seconds per env step over
CURVE less plaintext's (medians of the rounds). A pixel chunk crosses two such hops in a run (actor to the replay's
FIFO, FIFO to the learner), so `curve_share_of_actor` = 2 x that / the actor's CPU per env step: the share of an actor
core's work that CURVE adds where actors bind (a CPU fleet with a learner that keeps up); where the learner binds
(this 2-core box's CPU learner: bench/atari_ppo.py) it is CPU taken from whatever shares the cores, at the run's
rate. `channel_env_steps_per_s` is each channel's ceiling, for scale against the actors' rate. Absolute figures move
with the box's load (noted after each round); the same-round ratios are the ones to trust.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path
from typing import Any

import zmq

from bench._runs import RESULTS, emit, in_spawned_process, machine_at_end
from bench.atari_envs import ENV_ID, pin
from bench.atari_ppo import pong_collector, system
from bench.protocol import send_chunks
from surreal.proto.channels import bind_socket
from surreal.proto.codec import Limits, decode, flatten
from surreal.proto.curve import CurveKeys, WireContext

OUT = RESULTS / "atari-curve.2core.json"


def _collect() -> tuple[dict[str, Any], int, float]:
    """One chunk of the ppo-atari preset (its 8 envs x 128 steps) after a warm-up chunk, and the actor's CPU seconds
    per env step for it."""
    collector = pong_collector(8, 128)
    started = time.process_time()
    chunk = collector.collect(0)
    return chunk.arrays, chunk.env_steps, (time.process_time() - started) / chunk.env_steps


def _sender(address: str, count: int, keys: CurveKeys | None, arrays: dict[str, Any], out: Any) -> None:
    """`count` chunks through the actor's sender, each retried until taken; CPU seconds until every one is on its way
    (the context's termination waits for ZMQ's I/O thread to have sent them, cipher included)."""
    pin([0])
    started = time.process_time()
    send_chunks(address, count, keys, arrays, hwm=4)
    out.put(time.process_time() - started)


def channel(arrays: dict[str, Any], count: int, keys: CurveKeys | None) -> dict[str, float]:
    """Chunks/s through one experience channel (the first message starts the clock), and each side's CPU seconds per
    chunk. The receiver (this process) is pinned to core 1 while it measures, the sender to core 0."""
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    pin([1] if (os.cpu_count() or 1) >= 2 else [0])
    try:
        return _channel(arrays, count, keys)
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)


def _channel(arrays: dict[str, Any], count: int, keys: CurveKeys | None) -> dict[str, float]:
    ctx = WireContext(keys)
    pull = bind_socket(ctx, zmq.PULL, "tcp://127.0.0.1:0", rcvhwm=4)
    address = pull.getsockopt_string(zmq.LAST_ENDPOINT)
    spawn = mp.get_context("spawn")
    out = spawn.Queue()
    proc = spawn.Process(target=_sender, args=(address, count, keys, arrays, out))
    proc.start()
    limits = Limits(max_bytes=64 * 1024 * 1024)
    cpu_started = time.process_time()
    decode(pull.recv_multipart(copy=False), limits)
    started = time.perf_counter()
    for _ in range(count - 1):
        decode(pull.recv_multipart(copy=False), limits)
    elapsed = time.perf_counter() - started
    receiver_cpu = time.process_time() - cpu_started
    sender_cpu = out.get(timeout=600)
    proc.join(timeout=60)
    pull.close(0)
    ctx.term()
    return {
        "chunks_per_s": (count - 1) / elapsed,
        "sender_cpu_s_per_chunk": sender_cpu / count,
        "receiver_cpu_s_per_chunk": receiver_cpu / count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=120, help="chunks sent per measurement")
    parser.add_argument("--system-rounds", type=int, default=2, help="rounds of the two system runs (0: none)")
    parser.add_argument("--system-seconds", type=float, default=120.0, help="each system run's window")
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    arrays, env_steps, actor_s = in_spawned_process(_collect, timeout_s=900)
    chunk_bytes = sum(a.nbytes for _, a in flatten(arrays))
    print(f"chunk: {env_steps} env steps, {chunk_bytes:,} bytes; actor {actor_s * 1e6:,.0f} us CPU an env step")
    keys = CurveKeys.generate()
    taken: dict[str, list[dict[str, float]]] = {"plaintext": [], "curve": []}
    loads = []
    for r in range(args.rounds):
        for wire, wire_keys in (("plaintext", None), ("curve", keys)):
            got = channel(arrays, args.chunks, wire_keys)
            taken[wire].append({k: round(v, 6) for k, v in got.items()})
            print(
                f"round {r + 1} {wire}: {got['chunks_per_s']:.1f} chunks/s, CPU a chunk: sender "
                f"{got['sender_cpu_s_per_chunk'] * 1e3:.1f} ms, "
                f"receiver {got['receiver_cpu_s_per_chunk'] * 1e3:.1f} ms",
                flush=True,
            )
        loads.append(round(os.getloadavg()[0], 1))
    median = {wire: {k: statistics.median(g[k] for g in rounds) for k in rounds[0]} for wire, rounds in taken.items()}

    def per_step(wire: str) -> float:
        m = median[wire]
        return (m["sender_cpu_s_per_chunk"] + m["receiver_cpu_s_per_chunk"]) / env_steps

    added = per_step("curve") - per_step("plaintext")
    rounds_rate_ratio = [
        round(c["chunks_per_s"] / p["chunks_per_s"], 3) for p, c in zip(taken["plaintext"], taken["curve"], strict=True)
    ]
    result = {
        "bench": "atari_curve",
        "machine": machine_at_end(),
        "load_average_after_each_round": loads,
        "shared_box": "other work ran on the same cores: absolute rates move with it; trust the same-round ratios",
        "zmq": f"pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}, CURVE {zmq.has('curve')}",
        "game": ENV_ID,
        "chunk": {
            "env_steps": env_steps,
            "bytes": chunk_bytes,
            "bytes_per_env_step": round(chunk_bytes / env_steps, 1),
        },
        "actor_s_per_env_step": round(actor_s, 7),
        "rounds": args.rounds,
        "chunks_per_measurement": args.chunks,
        "median": median,
        "every_round": taken,
        "channel_env_steps_per_s": {w: round(m["chunks_per_s"] * env_steps, 1) for w, m in median.items()},
        "channel_mbytes_per_s": {w: round(m["chunks_per_s"] * chunk_bytes / 1e6, 1) for w, m in median.items()},
        "curve_over_plaintext_rate": round(median["curve"]["chunks_per_s"] / median["plaintext"]["chunks_per_s"], 3),
        "curve_over_plaintext_rate_rounds": rounds_rate_ratio,
        "cpu_s_per_env_step": {"plaintext": round(per_step("plaintext"), 8), "curve": round(per_step("curve"), 8)},
        "curve_added_cpu_s_per_env_step": round(added, 8),
        "curve_share_of_actor": round(2 * added / actor_s, 4),
    }
    print(
        f"CURVE adds {added * 1e6:.1f} us of CPU an env step a hop ({result['curve_share_of_actor']:.1%} of an actor's "
        f"{actor_s * 1e6:.0f} us over two hops); channel CURVE / plaintext {result['curve_over_plaintext_rate']:.2f}",
        flush=True,
    )
    if args.system_rounds:
        result["system"] = systems(args.system_rounds, args.system_seconds, args.runs_root)
    emit(result, args.out)


def wire_logged(run_dir: Path) -> str:
    """What the replay shard's start-up line says it served over ("CURVE", or plaintext's reason)."""
    log = run_dir / "logs" / "replay-0.log"
    lines = [line for line in log.read_text().splitlines() if " over " in line and "serving" in line]
    return lines[0].rsplit(" over ", 1)[1].split(", metrics")[0] if lines else "not logged"


def systems(rounds: int, seconds: float, runs_root: Path) -> dict[str, Any]:
    """`rounds` of the ppo-atari system in plaintext and over CURVE, one after the other; each run's figures, the
    medians, and each round's CURVE / plaintext frames/s."""
    runs: dict[str, list[dict[str, Any]]] = {"plaintext": [], "curve": []}
    for r in range(rounds):
        for wire, module in (("plaintext", "bench.plaintext_run"), ("curve", "surreal")):
            got = system(1, "cpu", seconds, [], runs_root, module)
            got["wire_logged"] = wire_logged(Path(got["run_dir"]))
            got["load_average_at_end"] = round(os.getloadavg()[0], 1)
            runs[wire].append(got)
            print(
                f"system round {r + 1} {wire} ({got['wire_logged']}): {got['frames_per_s']:,.0f} frames/s, "
                f"{got['learner_update_s']} s an update",
                flush=True,
            )
    ratios = [
        round(c["frames_per_s"] / p["frames_per_s"], 3) for p, c in zip(runs["plaintext"], runs["curve"], strict=True)
    ]
    return {
        "actors": 1,
        "device": "cpu",
        "seconds": seconds,
        "frames_per_s_median": {w: statistics.median(g["frames_per_s"] for g in rs) for w, rs in runs.items()},
        "curve_over_plaintext_frames_per_s_rounds": ratios,
        "curve_over_plaintext_frames_per_s": round(statistics.median(ratios), 3),
        "runs": runs,
    }


if __name__ == "__main__":
    main()
