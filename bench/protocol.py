"""Protocol benchmark: our channels and servers against raw ZMQ, over loopback, in one run, plaintext and with CURVE.

    python -m bench.protocol [--quick] [--out bench/results/protocol.json]

(a) raw ZMQ PUSH/PULL, 1 MiB single-frame messages           -> raw_zmq_gbytes_per_s (the baseline)
(b) ExperienceSender -> PULL + decode, 1 MiB of arrays/message -> experience_gbytes_per_s, ratio_to_raw
(c) HalfCheetah-sized transitions (obs 17, act 6, f32) in chunks into one replay shard -> transitions_per_s
    (timed by the shard from its counter surreal_replay_transitions_in_total, first to last transition)
(d) sample batches out of a shard (uniform, batch 256 and 4096) -> sample_batches_per_s_{256,4096}
(e) 8 actors fetching a 1 MB parameter blob from one ps       -> param_fetch_ms_p50 / _p99
(f) libsodium's crypto_box_afternm (CURVE's cipher, XSalsa20-Poly1305) over 1 MiB on one core, in this process,
    and memmove for scale                                     -> cipher_gbytes_per_s, memmove_gbytes_per_s

Every section runs twice in the same run, plaintext and at once over CURVE with a fresh pair of keys (proto/curve.py, as
every role runs under `surreal run` and the chart): the top-level numbers are plaintext, `curve` holds the same numbers
with CURVE, and `curve_ratio` each CURVE number over its plaintext one (for latencies, plaintext over CURVE, so that
below 1 is a cost everywhere). (a) with CURVE is raw ZMQ's own ceiling with encryption: (b)'s ratio to it says what
our channel adds on top. (f) is what no channel over CURVE can beat: every byte is encrypted once by the sender's
I/O thread and decrypted once by the receiver's: where a plaintext channel at P GB/s already keeps the box's cores
busy, CURVE keeps at most C / (C + P) of it on 2 cores with the cipher at C (`curve_ratio_bound`, per channel;
`curve_bounds` says the general case).

Senders and receivers are separate processes (the machine's cores are shared as they would be by roles).
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import multiprocessing as mp
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from bench._runs import emit, machine
from surreal.launch.local import free_ports
from surreal.proto.channels import (
    ExperienceSender,
    ParamClient,
    ParamPublisher,
    SampleClient,
    bind_socket,
    connect_socket,
)
from surreal.proto.codec import Limits, decode
from surreal.proto.curve import CurveKeys, WireContext
from surreal.proto.wire import BlobMeta, Chunk, Params

MIB = 1 << 20
OBS, ACT = 17, 6


def experience_chunk(transitions: int, envs: int = 1) -> dict[str, np.ndarray]:
    """A time-major chunk shaped like an actor's (T, K) of HalfCheetah transitions."""
    T = transitions // envs
    rng = np.random.default_rng(0)
    return {
        "obs": rng.standard_normal((T, envs, OBS), dtype=np.float32),
        "next_obs": rng.standard_normal((T, envs, OBS), dtype=np.float32),
        "actions": rng.standard_normal((T, envs, ACT), dtype=np.float32),
        "rewards": rng.standard_normal((T, envs), dtype=np.float32),
        "terminated": np.zeros((T, envs), bool),
        "truncated": np.zeros((T, envs), bool),
    }


def chunk_of_bytes(nbytes: int) -> dict[str, np.ndarray]:
    """Experience-shaped arrays adding up to `nbytes` (the 1 MiB message of (b))."""
    per_transition = (2 * OBS + ACT + 1) * 4 + 2
    return experience_chunk(nbytes // per_transition)


# -- (a) and (b): push throughput ------------------------------------------------------------------------


def _raw_pusher(address: str, count: int, keys: CurveKeys | None) -> None:
    ctx = WireContext(keys)
    sock = connect_socket(ctx, zmq.PUSH, [address], sndhwm=8)
    payload = np.random.default_rng(0).integers(0, 255, MIB, dtype=np.uint8).tobytes()
    for _ in range(count):
        sock.send(payload, copy=False)
    sock.close(linger=-1)
    ctx.term()


def send_chunks(address: str, count: int, keys: CurveKeys | None, arrays: dict[str, np.ndarray], hwm: int) -> None:
    """`count` chunks of `arrays` through the actor's own sender, each retried until the receiver takes it."""
    ctx = WireContext(keys)
    sender = ExperienceSender(ctx, [address], hwm=hwm)
    for i in range(count):
        while not sender.send(Chunk(arrays, version=i, actor=0), "bench", timeout_s=5.0):
            pass
    sender.sock.close(linger=-1)
    ctx.term()


def push_throughput(pusher, count: int, decode_messages: bool, keys: CurveKeys | None) -> float:
    """GB/s received by a PULL socket fed by `pusher` in another process (over CURVE with `keys`)."""
    ctx = WireContext(keys)
    pull = bind_socket(ctx, zmq.PULL, "tcp://127.0.0.1:0", rcvhwm=8)
    address = pull.getsockopt_string(zmq.LAST_ENDPOINT)
    proc = mp.get_context("fork").Process(target=pusher, args=(address, count, keys))
    proc.start()
    received = 0
    frames = pull.recv_multipart(copy=False)  # start the clock at the first message
    started = time.perf_counter()
    for _ in range(count - 1):
        frames = pull.recv_multipart(copy=False)
        if decode_messages:
            message = decode(frames)
            received += sum(a.nbytes for a in message.arrays.values())
        else:
            received += sum(len(f) for f in frames)
    elapsed = time.perf_counter() - started
    proc.join(timeout=30)
    pull.close(0)
    ctx.term()
    return received / elapsed / 1e9


# -- (c) and (d): a replay shard ------------------------------------------------------------------------


def _replay_server(
    exp: str, sample: str, capacity: int, target: int, ready, stop_event, ingest, keys: CurveKeys | None
) -> None:
    """A replay shard that also times its own ingest: from its first transition in to its `target`-th, read
    from its counter `surreal_replay_transitions_in_total` (where ingest happens, not in a reply)."""
    from surreal.replay.shard import ReplayShard
    from surreal.roles.replay import ReplayServer

    ctx = WireContext(keys)
    server = ReplayServer(ctx, exp, sample, ReplayShard("uniform", capacity))
    labels = dict(server.metrics.labels)
    ready.set()
    first: tuple[float, float] | None = None
    while not stop_event.is_set():
        server.poll_once(0.05)
        if first is None or first[1] < target:
            count = server.metrics.registry.get_sample_value("surreal_replay_transitions_in_total", labels) or 0.0
            now = time.perf_counter()
            if first is None and count > 0:
                first = (now, count)
            elif first is not None and count >= target:
                ingest.put((count - first[1]) / (now - first[0]))
                first = (now, count)  # reported once
    server.close()
    ctx.term()


def replay_numbers(quick: bool, keys: CurveKeys | None) -> dict[str, float]:
    fork = mp.get_context("fork")
    exp, sample = (f"tcp://127.0.0.1:{port}" for port in free_ports(2))
    ready, stop_event, ingest = fork.Event(), fork.Event(), fork.Queue()
    capacity = 1_000_000
    chunk_size, chunks = 1000, 300 if quick else 1000
    target = chunks * chunk_size
    server = fork.Process(target=_replay_server, args=(exp, sample, capacity, target, ready, stop_event, ingest, keys))
    server.start()
    ready.wait(30)
    ctx = WireContext(keys)
    sampler = SampleClient(ctx, [sample], Limits(), prefetch=4)
    try:
        # (c): transitions in, timed by the shard itself from its own counter (decode, validation and storage
        # writes included). Sample replies only report progress about once a second: timing them measured
        # their cadence, not the ingest.
        pusher = fork.Process(target=send_chunks, args=(exp, chunks, keys, experience_chunk(chunk_size), 16))
        pusher.start()
        transitions_per_s = float(ingest.get(timeout=120))
        pusher.join(timeout=30)
        result = {"transitions_per_s": transitions_per_s, "chunk_transitions": chunk_size}
        # (d): batches out, `prefetch` requests in flight.
        for batch in (256, 4096):
            window = 2.0 if quick else 5.0
            while sampler.next(batch, 0.0) is not None:  # drain replies to the old batch size
                pass
            count, started = 0, time.perf_counter()
            while time.perf_counter() - started < window:
                if sampler.next(batch, 1.0) is not None:
                    count += 1
            result[f"sample_batches_per_s_{batch}"] = count / (time.perf_counter() - started)
        return result
    finally:
        sampler.close()
        ctx.term()
        stop_event.set()
        server.join(timeout=10)


# -- (e): parameter fetch latency -----------------------------------------------------------------------


def _ps_server(learner: str, bind: str, ready, stop_event, keys: CurveKeys | None) -> None:
    from surreal.roles.ps import ParamServer

    ctx = WireContext(keys)
    server = ParamServer(ctx, learner, bind)
    ready.set()
    while not stop_event.is_set():
        server.poll_once(0.05)
    server.close()
    ctx.term()


def _fetching_actor(address: str, fetches: int, out, keys: CurveKeys | None) -> None:
    ctx = WireContext(keys)
    client = ParamClient(ctx, [address], Limits())
    latencies = []
    for _ in range(fetches):
        started = time.perf_counter()
        reply = client.fetch(-1, "", 10.0)  # never "not modified": every fetch moves the full blob
        if isinstance(reply, Params):
            latencies.append((time.perf_counter() - started) * 1000)
    out.put(latencies)
    client.close()
    ctx.term()


def param_fetch_numbers(quick: bool, keys: CurveKeys | None, actors: int = 8) -> dict[str, float]:
    fork = mp.get_context("fork")
    learner, bind = (f"tcp://127.0.0.1:{port}" for port in free_ports(2))
    ready, stop_event, out = fork.Event(), fork.Event(), fork.Queue()
    ctx = WireContext(keys)
    publisher = ParamPublisher(ctx, learner)
    publisher.publish(BlobMeta(1, "bench"), {"policy": {"w": np.ones(MIB // 4, np.float32)}})
    server = fork.Process(target=_ps_server, args=(learner, bind, ready, stop_event, keys))
    server.start()
    ready.wait(30)
    probe = ParamClient(ctx, [bind], Limits())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        publisher.service()
        reply = probe.fetch(-1, "", 0.2)
        if isinstance(reply, Params):
            break
    fetches = 50 if quick else 300
    procs = [fork.Process(target=_fetching_actor, args=(bind, fetches, out, keys)) for _ in range(actors)]
    for p in procs:
        p.start()
    latencies = np.concatenate([out.get(timeout=300) for _ in procs])
    for p in procs:
        p.join(timeout=30)
    probe.close()
    publisher.close()
    ctx.term()
    stop_event.set()
    server.join(timeout=10)
    return {
        "param_fetch_ms_p50": float(np.percentile(latencies, 50)),
        "param_fetch_ms_p99": float(np.percentile(latencies, 99)),
        "param_fetches": int(latencies.size),
        "param_blob_bytes": MIB,
        "param_fetch_actors": actors,
    }


ACTOR_CHUNK_STEPS, ACTOR_CHUNK_ENVS = 64, 8  # an actor's chunk with the defaults (actor.chunk_steps, 8 envs)


def push_numbers(quick: bool, keys: CurveKeys | None) -> dict[str, float]:
    """(a) and (b): 1 MiB messages, and (b) again in an actor's own chunks (64 steps x 8 envs of HalfCheetah,
    85 KB), where a message's fixed costs weigh more than its bytes."""
    messages = 300 if quick else 1000
    raw = push_throughput(_raw_pusher, messages, False, keys)
    experience = push_throughput(partial(send_chunks, arrays=chunk_of_bytes(MIB), hwm=8), messages, True, keys)
    actor_chunk = experience_chunk(ACTOR_CHUNK_STEPS * ACTOR_CHUNK_ENVS, ACTOR_CHUNK_ENVS)
    actor_chunks = push_throughput(partial(send_chunks, arrays=actor_chunk, hwm=64), 10 * messages, True, keys)
    return {
        "raw_zmq_gbytes_per_s": raw,
        "experience_gbytes_per_s": experience,
        "ratio_to_raw": experience / raw,
        "experience_actor_chunk_gbytes_per_s": actor_chunks,
    }


def report(wire: str, result: dict[str, float], section: str) -> None:
    if section == "push":
        raw, experience = result["raw_zmq_gbytes_per_s"], result["experience_gbytes_per_s"]
        line = (
            f"(a) raw {raw:.2f} GB/s  (b) experience {experience:.2f} GB/s  ratio {experience / raw:.2f}, in an "
            f"actor's chunks {result['experience_actor_chunk_gbytes_per_s']:.2f} GB/s"
        )
    elif section == "replay":
        line = (
            f"(c) {result['transitions_per_s']:,.0f} transitions/s into one shard  (d) "
            f"{result['sample_batches_per_s_256']:.0f} batches/s of 256, "
            f"{result['sample_batches_per_s_4096']:.0f} of 4096"
        )
    else:
        line = (
            f"(e) 1 MB param fetch with 8 actors: p50 {result['param_fetch_ms_p50']:.2f} ms, "
            f"p99 {result['param_fetch_ms_p99']:.2f} ms"
        )
    print(f"[{wire}] {line}", flush=True)


# -- (f): the cipher itself -----------------------------------------------------------------------------


def libsodium() -> ctypes.CDLL | None:
    """The libsodium libzmq's CURVE runs on: the copy bundled with pyzmq's wheel, else the system's; None if
    neither loads (a pyzmq built on another CURVE backend)."""
    bundled = Path(zmq.__file__).parent.parent / "pyzmq.libs"
    for path in [*sorted(bundled.glob("libsodium*")), ctypes.util.find_library("sodium")]:
        if path:
            try:
                lib = ctypes.CDLL(str(path))
            except OSError:
                continue
            if lib.sodium_init() >= 0:
                return lib
    return None


def cipher_numbers(quick: bool) -> dict[str, float]:
    """GB/s of crypto_box_afternm (what libzmq calls on every CURVE frame) and of memmove, 1 MiB at a time on one
    core, best of three; empty without libsodium."""
    lib = libsodium()
    if lib is None:
        return {}
    zero = 32  # crypto_box_ZEROBYTES: the cipher works on the message behind 32 zero bytes, as libzmq lays it out
    plain, boxed = ctypes.create_string_buffer(MIB + zero), ctypes.create_string_buffer(MIB + zero)
    key, nonce = ctypes.create_string_buffer(32), ctypes.create_string_buffer(24)
    reps = 50 if quick else 300
    best = {"cipher_gbytes_per_s": 0.0, "memmove_gbytes_per_s": 0.0}
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(reps):
            lib.crypto_box_afternm(boxed, plain, ctypes.c_ulonglong(MIB + zero), nonce, key)
        cipher = reps * MIB / (time.perf_counter() - started) / 1e9
        started = time.perf_counter()
        for _ in range(reps):
            ctypes.memmove(boxed, plain, MIB)
        copy = reps * MIB / (time.perf_counter() - started) / 1e9
        best = {
            "cipher_gbytes_per_s": max(best["cipher_gbytes_per_s"], cipher),
            "memmove_gbytes_per_s": max(best["memmove_gbytes_per_s"], copy),
        }
    return best


PIPELINE_THREADS = 4  # a channel's threads that touch every byte: sender's and receiver's Python and ZMQ I/O


def curve_bounds(plain: dict[str, float], cipher_gbytes_per_s: float, cores: int) -> dict[str, float]:
    """For each byte channel, the most of its plaintext throughput P that any channel over CURVE can keep, with the
    cipher at C GB/s a core and the channel's threads on `cores` (at most its 4 threads' worth) kept busy by
    plaintext already: its CPU time per byte is then cores / P, and CURVE adds one encryption and one decryption
    per byte, 2 / C, so the bound is cores * C / (cores * C + 2 * P). On this 2-core box: C / (C + P)."""
    n = min(cores, PIPELINE_THREADS)
    return {
        key: n * cipher_gbytes_per_s / (n * cipher_gbytes_per_s + 2 * value)
        for key, value in plain.items()
        if key.endswith("gbytes_per_s")
    }


def measure(quick: bool, keys: CurveKeys, rounds: int) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """Every section `rounds` times, each round plaintext and at once over CURVE with `keys` (interleaved, so that a
    shared box's load drifts alike over both); a progress line each. Each number is its median over the rounds;
    the third dict holds every round's numbers."""
    plain: dict[str, float] = {}
    curve: dict[str, float] = {}
    every: dict[str, Any] = {"plaintext": [], "curve": []}
    sections = {"push": push_numbers, "replay": replay_numbers, "fetch": param_fetch_numbers}
    for section, numbers in sections.items():
        taken: dict[str, list[dict[str, float]]] = {"plaintext": [], "curve": []}
        for r in range(rounds):
            for wire, wire_keys in (("plaintext", None), ("curve", keys)):
                got = numbers(quick, wire_keys)
                taken[wire].append(got)
                report(f"{wire} {r + 1}/{rounds}", got, section)
        for wire, result in (("plaintext", plain), ("curve", curve)):
            result.update({key: float(np.median([got[key] for got in taken[wire]])) for key in taken[wire][0]})
            every[wire].extend(taken[wire])
    return plain, curve, every


def curve_ratios(plain: dict[str, float], curve: dict[str, float]) -> dict[str, float]:
    """CURVE's cost per number as a ratio where below 1 is a cost: rates CURVE / plaintext, latencies inverted."""
    ratios = {}
    for key, value in plain.items():
        if "_per_s" in key:  # a rate
            ratios[key] = curve[key] / value
        elif key.startswith("param_fetch_ms"):  # a latency
            ratios[key] = value / curve[key]
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer messages (a smoke run, about 40 s)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--rounds", type=int, help="rounds of plaintext then CURVE per section (default 3; quick 1)")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    result: dict[str, object] = {
        "benchmark": "protocol",
        "machine": machine(),
        "quick": args.quick,
        "zmq": f"pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}, CURVE {zmq.has('curve')}",
    }
    plain, curve, every = measure(args.quick, CurveKeys.generate(), rounds)
    result["rounds"] = rounds
    result.update(plain)
    result["curve"] = curve
    result["curve_ratio"] = ratios = curve_ratios(plain, curve)
    result["curve_ratio_to_raw_curve"] = curve["experience_gbytes_per_s"] / curve["raw_zmq_gbytes_per_s"]
    result["every_round"] = every
    result.update(cipher := cipher_numbers(args.quick))
    bounds = curve_bounds(plain, cipher["cipher_gbytes_per_s"], os.cpu_count() or 1) if cipher else {}
    if bounds:
        result["curve_ratio_bound"] = bounds
    print(
        f"CURVE / plaintext: (b) experience {ratios['experience_gbytes_per_s']:.2f} "
        f"(in an actor's chunks {ratios['experience_actor_chunk_gbytes_per_s']:.2f}), "
        f"(c) transitions into a shard {ratios['transitions_per_s']:.2f}, "
        f"(d) batches of 4096 {ratios['sample_batches_per_s_4096']:.2f}, "
        f"(e) fetch p50 {ratios['param_fetch_ms_p50']:.2f}",
        flush=True,
    )
    if bounds:
        print(
            f"(f) CURVE's cipher {cipher['cipher_gbytes_per_s']:.2f} GB/s a core (memmove "
            f"{cipher['memmove_gbytes_per_s']:.1f}): no channel over CURVE keeps more than "
            f"{bounds['experience_gbytes_per_s']:.2f} of (b)'s plaintext throughput "
            f"({bounds['experience_actor_chunk_gbytes_per_s']:.2f} in an actor's chunks)",
            flush=True,
        )
    emit(result, args.out)


if __name__ == "__main__":
    main()
