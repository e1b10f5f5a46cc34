"""Per-actor against central inference (`topology.inference=central`): the actors' env steps/s, same env, actors and
seed, for a small and a large PPO policy.

    PYTHONPATH=src .venv/bin/python -m bench.inference [--env Pendulum-v1] [--actors 2] [--envs 4] [--seconds 30]
                                                       [--out PATH] [--runs-root DIR]

Each configuration is one `surreal run` that never ends by itself (steps=1e9) with the actors unthrottled
(`algo.rollout_ahead=0`, one epoch per update), so what is measured is collection: the rise of the actors' own
`actor_env_steps_total` (read from their /metrics) over `--seconds` after a warm-up, summed over actors. Central runs
`--workers` inference workers. The learner shares the machine in every configuration alike. Writes
bench/results/inference.<machine>.json (`--machine`, default 2core) with each rate and the central/per-actor ratio
per network.
"""

from __future__ import annotations

import argparse
import re
import time
import urllib.request
from pathlib import Path

import psutil

from bench._runs import RESULTS, WatchedRun, emit

NETWORKS = {"64-64": "[64,64]", "3x1024": "[1024,1024,1024]"}
STEPS_METRIC = re.compile(r"^surreal_actor_env_steps_total\{[^}]*\} ([0-9.e+]+)$", re.M)  # an actor's /metrics


def actor_ports(launcher_pid: int) -> list[int]:
    """The /metrics ports of a run's actor processes."""
    ports = []
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if child.cmdline()[-1:] == ["actor"]:
                ports.append(int(child.environ()["SURREAL_METRICS_PORT"]))
        except (psutil.NoSuchProcess, KeyError, IndexError):
            continue
    return ports


def actor_steps(ports: list[int]) -> float:
    total = 0.0
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        total += sum(float(v) for v in STEPS_METRIC.findall(text))
    return total


def measure(overrides: list[str], actors: int, name: str, seconds: float, warmup_s: float, runs_root: Path) -> dict:
    """Env steps/s of a run's `actors` actors (their own counters), once every one steps and `warmup_s` passed."""
    run = WatchedRun(name, overrides, runs_root)
    try:
        deadline = time.monotonic() + 300
        ports: list[int] = []
        while time.monotonic() < deadline:  # every actor up and stepping
            ports = actor_ports(run.proc.pid)
            try:
                if len(ports) == actors and actor_steps(ports) > 0:
                    break
            except OSError:
                pass
            time.sleep(1)
        else:
            raise RuntimeError(f"{name}: the actors never stepped (see {runs_root / name})")
        time.sleep(warmup_s)
        t0, s0 = time.monotonic(), actor_steps(ports)
        time.sleep(seconds)
        t1, s1 = time.monotonic(), actor_steps(ports)
    finally:
        run.stop()
    return {"env_steps_per_s": (s1 - s0) / (t1 - t0), "env_steps": s1 - s0, "seconds": t1 - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--envs", type=int, default=4, help="envs per actor")
    parser.add_argument("--workers", type=int, default=1, help="inference workers in central mode")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--machine", default="2core")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs", help="where the run folders go")
    args = parser.parse_args()
    common = [
        f"env={args.env}",
        f"actors={args.actors}",
        f"topology.envs_per_actor={args.envs}",
        f"seed={args.seed}",
        "steps=1000000000",
        "actor.chunk_steps=128",
        "algo.rollout_ahead=0",
        "algo.update_epochs=1",
        f"algo.batch_size={max(1024, 2 * 128 * args.actors * args.envs)}",
        "algo.minibatch_size=256",
        "learner.eval_interval=0",
        "learner.checkpoint_interval=1000000",
        "device=cpu",
    ]
    results: dict[str, dict] = {}
    for network, sizes in NETWORKS.items():
        row = {}
        for mode in ("per_actor", "central"):
            extra = [f"algo.hidden_sizes={sizes}", f"topology.inference={mode}"]
            if mode == "central":
                extra.append(f"topology.inference_workers={args.workers}")
            name = f"inference-{network}-{mode}-{int(time.time())}"
            row[mode] = measure([*common, *extra], args.actors, name, args.seconds, args.warmup, args.runs_root)
            print(network, mode, row[mode], flush=True)
        row["central_over_per_actor"] = row["central"]["env_steps_per_s"] / row["per_actor"]["env_steps_per_s"]
        results[network] = row
    result = {
        "bench": "inference",
        "machine": args.machine,
        "env": args.env,
        "actors": args.actors,
        "envs_per_actor": args.envs,
        "inference_workers": args.workers,
        "seed": args.seed,
        "seconds": args.seconds,
        "networks": results,
    }
    emit(result, args.out or RESULTS / f"inference.{args.machine}.json")


if __name__ == "__main__":
    main()
