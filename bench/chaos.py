"""Throughput while actors are lost, against the same run without losses, measured in one invocation.

    python -m bench.chaos [--env HalfCheetah-v5] [--actors 4] [--seconds 180] [--loss-per-min 0.1 1.0]

The run is bench.throughput's PPO system run (N actors, the batch growing with them). First without chaos,
then once per loss rate L: `chaos.kill_every_s = 60 / (L * N)`, so L = 0.1 kills a tenth of the fleet per minute
(SIGKILL, the actor restarted at once, as a StatefulSet restarts a preempted pod). Each point is env steps per
second over the learner's metrics rows past start-up, and `fraction` = rate with chaos / rate without. The
longest gap between two learner rows says how long the worst stall lasted. Last line: one JSON object (also
written to bench/results/chaos.json).
"""

from __future__ import annotations

import argparse
import json
import time

from bench._runs import RESULTS, WatchedRun, emit, machine
from bench.throughput import system_overrides
from surreal.launch.chaos import read_chaos

SKIP_ROWS = 3  # start-up: processes starting, the first updates


def measure(overrides: list[str], seconds: float, label: str) -> dict:
    run = WatchedRun(f"chaos-{label}-{int(time.time())}", overrides, RESULTS / "runs")
    run.run_for(seconds)
    times = [row["time"] for _, row in run.rows[SKIP_ROWS:] if "time" in row]
    return {
        "rate": run.steady_rate(skip_rows=SKIP_ROWS),
        "rows": len(run.rows),
        "longest_gap_s": max((b - a for a, b in zip(times, times[1:], strict=False)), default=float("nan")),
        "kills": len(read_chaos(run.run_dir)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--envs-per-actor", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=180.0, help="measurement window per run")
    parser.add_argument("--loss-per-min", type=float, nargs="+", default=[0.1, 1.0], help="fractions of the fleet")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tag", default="", help="results file suffix, e.g. 2core: bench/results/chaos.<tag>.json")
    args = parser.parse_args()
    base = system_overrides(args.env, args.actors, args.envs_per_actor, args.device)
    calm = measure(base, args.seconds, "none")
    print(json.dumps({"loss_per_min": 0.0, **calm}), flush=True)
    points = []
    for loss in args.loss_per_min:
        kill_every_s = 60.0 / (loss * args.actors)
        got = measure([*base, f"chaos.kill_every_s={kill_every_s:g}", "chaos.seed=1"], args.seconds, f"{loss:g}")
        point = {
            "loss_per_min": loss,
            "kill_every_s": round(kill_every_s, 2),
            "env_steps_per_s": round(got["rate"], 1),
            "fraction": round(got["rate"] / calm["rate"], 3),
            "kills": got["kills"],
            "longest_gap_s": round(got["longest_gap_s"], 2),
        }
        points.append(point)
        print(json.dumps(point), flush=True)
    result = {
        "benchmark": "chaos",
        "env": args.env,
        "actors": args.actors,
        "envs_per_actor": args.envs_per_actor,
        "seconds": args.seconds,
        "machine": machine(),
        "no_chaos_env_steps_per_s": round(calm["rate"], 1),
        "no_chaos_longest_gap_s": round(calm["longest_gap_s"], 2),
        "points": points,
    }
    emit(result, RESULTS / (f"chaos.{args.tag}.json" if args.tag else "chaos.json"))


if __name__ == "__main__":
    main()
