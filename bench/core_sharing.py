"""Whether a machine's cores are its own: one raw actor's env steps/s alone, beside busy processes, and per actor
with several stepping at once, measured in the same run.

    python -m bench.core_sharing [--env HalfCheetah-v5] [--envs-per-actor 4] [--busy 4] [--actors 5]
                                 [--seconds 8] [--out PATH]

The capacity model gives every actor a core's worth of stepping. On a machine whose cores are shared (hyperthread
siblings, a hypervisor's time slices), an actor slows as the machine fills, so the raw phase of bench.throughput
(its actors alone) overstates what an actor makes inside a run, where the learner, replay, ps and launcher are
busy beside it. bench.capacity --check therefore takes an actor's rate on a GPU machine from the system's own
1-actor point; this benchmark is the evidence for (or against) that on any machine:

- `alone`: one raw actor (bench.throughput's: the PPO policy on K envs, one thread), nothing else running;
- `beside_busy`: the same actor while `--busy` processes spin (pure Python loops, one core each if they have one);
- `per_actor_of_n`: `--actors` raw actors at once, their mean;
- `alone_again`: the first measurement repeated last, so drift over the run (turbo, a neighbour) shows.

`beside_busy_ratio` = beside_busy / mean(alone, alone_again). Near 1: the cores are the actor's own. Last line:
one JSON object (also written to `--out`, default bench/results/core-sharing.<cpus>cpu.json).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench._runs import RESULTS, emit
from bench.throughput import DEFAULT_ENV, raw_rate

SPIN = "while True: pass"


@contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """`count` processes spinning on the CPU for as long as the block runs; killed and reaped on the way out."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=30)


def measure(env_id: str, envs: int, busy: int, actors: int, seconds: float) -> dict[str, float]:
    alone = raw_rate(env_id, 1, envs, seconds)
    with busy_processes(busy):
        beside = raw_rate(env_id, 1, envs, seconds)
    per_actor = raw_rate(env_id, actors, envs, seconds) / actors
    again = raw_rate(env_id, 1, envs, seconds)
    return {
        "alone": round(alone, 1),
        "beside_busy": round(beside, 1),
        "per_actor_of_n": round(per_actor, 1),
        "alone_again": round(again, 1),
        "beside_busy_ratio": round(2 * beside / (alone + again), 3),
        "per_actor_of_n_ratio": round(2 * per_actor / (alone + again), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default=DEFAULT_ENV)
    parser.add_argument("--envs-per-actor", type=int, default=4)
    parser.add_argument("--busy", type=int, default=4, help="spinning processes beside the actor")
    parser.add_argument("--actors", type=int, default=5, help="raw actors at once for the per-actor rate")
    parser.add_argument("--seconds", type=float, default=8.0, help="each measurement's stepping time")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    rates = measure(args.env, args.envs_per_actor, args.busy, args.actors, args.seconds)
    result = {
        "benchmark": "core-sharing",
        "env": args.env,
        "envs_per_actor": args.envs_per_actor,
        "busy": args.busy,
        "actors": args.actors,
        "seconds": args.seconds,
        "machine": f"{platform.machine()} {cpus} cpus",
        **rates,
    }
    emit(result, args.out or RESULTS / f"core-sharing.{cpus}cpu.json")


if __name__ == "__main__":
    main()
