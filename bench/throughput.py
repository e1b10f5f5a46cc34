"""System throughput against raw stepping, for 1, 2, 4, ... actors, measured in the same run.

    python -m bench.throughput [overrides ...] [--env HalfCheetah-v5] [--actors 1 2 4] [--seconds 40]
                               [--raw-seconds 15] [--device auto] [--chunk-steps 256] [--min-batch 2048]
                               [--out PATH] [--runs-root DIR]

For each actor count N:
- raw: N processes, each stepping the same K-env vector env with the same PPO policy network (batched
  CPU inference, one thread), no sockets, no learner: the most the actors could do on this machine.
- system: `surreal run` with N actors, the learner, replay and ps all running; env steps per second from
  the learner's metrics rows once past start-up. The learner batch scales with N (each actor contributes
  2 chunks per update, minibatches = batch / 32) so the update keeps pace as actors are added.
efficiency = system / raw; `learner_update_s` and `learner_wait_share` (from the learner's rows: its seconds per
update and the share of its time spent waiting for data) say which side bound the system. Last line: one JSON
object (also written to bench/results/throughput.json, or throughput-<env>.json for another env than
HalfCheetah-v5; `--out` names another file). Extra `surreal run` overrides (e.g. `learner.compile=true`) go to
every system run; give them before `--actors`, which takes a list.

A simulator-bound env such as robosuite's Lift (~150 steps/s per core) needs smaller chunks and batches for
enough updates in the window: `--env robosuite:Lift --envs-per-actor 1 --chunk-steps 64 --min-batch 512`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import numpy as np

from bench._runs import RESULTS, WatchedRun, emit, machine
from bench.rollouts import ppo_actor
from surreal.config.schema import NOT_IN_RUN_NAME

DEFAULT_ENV = "HalfCheetah-v5"
MINIBATCHES = 32


def _raw_actor(env_id: str, num_envs: int, seconds: float, seed: int, out) -> None:
    envs, policy = ppo_actor(env_id, num_envs, seed)
    obs, _ = envs.reset()
    for _ in range(200):  # warm-up
        obs, *_ = envs.step(policy.act(obs)[0])
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        obs, *_ = envs.step(policy.act(obs)[0])
        steps += num_envs
    out.put(steps / (time.perf_counter() - started))


def raw_rate(env_id: str, actors: int, num_envs: int, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_raw_actor, args=(env_id, num_envs, seconds, i, out)) for i in range(actors)]
    for p in procs:
        p.start()
    rates = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    return float(sum(rates))


def batch_size(actors: int, num_envs: int, chunk_steps: int = 256, min_batch: int = 2048) -> int:
    """Each actor contributes 2 chunks per update, and a batch is never under `min_batch`."""
    return max(min_batch, 2 * actors * num_envs * chunk_steps)


def system_overrides(
    env_id: str, actors: int, num_envs: int, device: str, chunk_steps: int = 256, min_batch: int = 2048
) -> list[str]:
    """A PPO run that never ends by itself, its batch growing with the actors."""
    batch = batch_size(actors, num_envs, chunk_steps, min_batch)
    return [
        f"env={env_id}",
        f"actors={actors}",
        f"topology.envs_per_actor={num_envs}",
        f"device={device}",
        f"actor.chunk_steps={chunk_steps}",
        f"algo.batch_size={batch}",
        f"algo.minibatch_size={batch // MINIBATCHES}",
        f"replay.capacity={4 * batch}",
        "steps=1000000000",
        "learner.checkpoint_interval=1000000",
        "learner.eval_interval=0",  # the system alone: no evaluator taking cores (on by default since 25,000)
    ]


def system_rate(
    env_id: str,
    actors: int,
    num_envs: int,
    seconds: float,
    device: str,
    extra: list[str] | None = None,
    runs_root: Path = RESULTS / "runs",
    **sizes: int,
) -> dict:
    overrides = [*system_overrides(env_id, actors, num_envs, device, **sizes), *(extra or [])]
    batch = batch_size(actors, num_envs, **sizes)
    run = WatchedRun(f"throughput-{actors}-{int(time.time())}", overrides, runs_root)
    run.run_for(seconds)
    steady = [row for _, row in run.rows[3:]]
    lags = [row["version_lag_mean"] for row in steady]
    return {
        "rate": run.steady_rate(skip_rows=3),
        "updates": len(run.rows),
        "batch_size": batch,
        "version_lag_mean": float(np.mean(lags)) if lags else float("nan"),
        **learner_phases(steady),
    }


def learner_phases(rows: list[dict]) -> dict[str, float]:
    """Which side binds, from the learner's own rows: its mean seconds per update and the share of its time spent
    waiting for data (near 0: the learner is the limit; large: the actors are)."""
    phases = {p: sum(row.get(f"time_{p}_s", 0.0) for row in rows) for p in ("update", "wait", "io")}
    total = sum(phases.values())
    return {
        "learner_update_s": phases["update"] / len(rows) if rows else float("nan"),
        "learner_wait_share": phases["wait"] / total if total else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default=DEFAULT_ENV)
    parser.add_argument("--envs-per-actor", type=int, default=4)
    parser.add_argument("--actors", type=int, nargs="*", help="default: 1, 2, 4, ... up to the core count")
    parser.add_argument("--seconds", type=float, default=40.0, help="measurement window per point")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--chunk-steps", type=int, default=256, help="actor.chunk_steps of the system runs")
    parser.add_argument("--min-batch", type=int, default=2048, help="the smallest PPO batch of the system runs")
    parser.add_argument("--raw-seconds", type=float, help="raw stepping window per point (default: min(seconds, 15))")
    parser.add_argument("--out", type=Path, help="write the JSON object to this file")
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs", help="where the run folders go")
    parser.add_argument("overrides", nargs="*", help="extra surreal run overrides for the system runs")
    args = parser.parse_intermixed_args()
    sizes = {"chunk_steps": args.chunk_steps, "min_batch": args.min_batch}
    cores = os.cpu_count() or 1
    counts = args.actors or [n for n in (1, 2, 4, 8, 16, 32) if n <= max(1, cores)]
    points = []
    for n in counts:
        raw_seconds = args.raw_seconds if args.raw_seconds is not None else min(args.seconds, 15.0)
        raw = raw_rate(args.env, n, args.envs_per_actor, raw_seconds)
        system = system_rate(
            args.env, n, args.envs_per_actor, args.seconds, args.device, args.overrides, args.runs_root, **sizes
        )
        point = {
            "actors": n,
            "system_env_steps_per_s": round(system["rate"], 1),
            "raw_env_steps_per_s": round(raw, 1),
            "efficiency": round(system["rate"] / raw, 3),
            "batch_size": system["batch_size"],
            "version_lag_mean": round(system["version_lag_mean"], 2),
            "learner_update_s": round(system["learner_update_s"], 4),
            "learner_wait_share": round(system["learner_wait_share"], 3),
            "own_cores": n + 3 <= cores,  # actors plus learner, replay and ps each on a core
        }
        points.append(point)
        print(json.dumps(point), flush=True)
    result = {
        "benchmark": "throughput",
        "env": args.env,
        "envs_per_actor": args.envs_per_actor,
        **sizes,
        "device": args.device,
        "overrides": args.overrides,
        "machine": machine(),
        "points": points,
        "actors": [p["actors"] for p in points],
        "system_env_steps_per_s": [p["system_env_steps_per_s"] for p in points],
        "raw_env_steps_per_s": [p["raw_env_steps_per_s"] for p in points],
        "efficiency": [p["efficiency"] for p in points],
    }
    name = "throughput" if args.env == DEFAULT_ENV else f"throughput-{NOT_IN_RUN_NAME.sub('-', args.env)}"
    emit(result, args.out or RESULTS / f"{name}.json")


if __name__ == "__main__":
    main()
