"""Evolution Strategies scaling: wall time per generation with 1, 2, 4, ... actors, and the speed-up.

    python -m bench.es_scaling [--env HalfCheetah-v5] [--actors 1 2 4 8] [--pairs 64] [--seconds 90]

Each actor count is one ordinary `surreal run algo=es` with the same population (`--pairs` antithetic pairs
per generation, so the work per generation is fixed) and the same envs per actor; the generation time is
taken between metrics rows once past start-up (the first `--skip` generations), from their arrival times.
speedup = time(1 actor) / time(N actors), measured in the same invocation; efficiency = speedup / N. The paper's
claim to compare with is near-linear (Salimans et al. 2017: 18 to 1,440 cores). HalfCheetah's episodes
always last 1,000 steps, so every generation costs the same number of env steps. Last line: one JSON object
(also written to bench/results/es_scaling.json).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from bench._runs import RESULTS, WatchedRun, emit, machine


def generation_seconds(run: WatchedRun, skip: int) -> tuple[float, int]:
    """Mean wall time per generation between row `skip` and the last row, and how many it averaged."""
    rows = run.rows
    if len(rows) < skip + 2:
        return float("nan"), 0
    (t0, r0), (t1, r1) = rows[skip], rows[-1]
    generations = r1["updates"] - r0["updates"]
    return (t1 - t0) / generations, generations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5")
    cores = os.cpu_count() or 1
    parser.add_argument("--actors", type=int, nargs="+", default=[n for n in (1, 2, 4, 8, 16) if n <= cores])
    parser.add_argument("--pairs", type=int, default=64, help="antithetic pairs per generation (population / 2)")
    parser.add_argument("--pairs-per-chunk", type=int, default=4)
    parser.add_argument("--envs-per-actor", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=90.0, help="how long each actor count runs")
    parser.add_argument("--skip", type=int, default=1, help="start-up generations left out of the timing")
    args = parser.parse_args()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = []
    for n in args.actors:
        if args.pairs % (n * args.pairs_per_chunk):
            raise SystemExit(
                f"--pairs {args.pairs} must be a multiple of actors x pairs-per-chunk ({n} x "
                f"{args.pairs_per_chunk}) so every generation is exactly one population"
            )
        overrides = [
            "algo=es",
            f"env={args.env}",
            f"actors={n}",
            f"topology.envs_per_actor={args.envs_per_actor}",
            f"algo.batch_size={args.pairs}",
            f"algo.pairs_per_chunk={args.pairs_per_chunk}",
            "steps=1000000000",
            "seed=1",
            "learner.eval_interval=0",  # no evaluator taking cores from the actors (on by default since 25,000)
        ]
        run = WatchedRun(f"es-scaling-{n}-{stamp}", overrides, RESULTS / "runs")
        run.run_for(args.seconds)
        seconds, generations = generation_seconds(run, args.skip)
        steps = run.rows[-1][1]["env_steps"] if run.rows else 0
        results.append({"actors": n, "generation_s": seconds, "generations_timed": generations, "env_steps": steps})
        print(json.dumps(results[-1]), flush=True)
    base = results[0]["generation_s"] if results and results[0]["actors"] == 1 else float("nan")
    for r in results:
        r["speedup"] = base / r["generation_s"]
        r["efficiency"] = r["speedup"] / r["actors"]
    result = {
        "benchmark": "es_scaling",
        "env": args.env,
        "pairs": args.pairs,
        "envs_per_actor": args.envs_per_actor,
        "machine": machine(),
        "runs": results,
    }
    emit(result, RESULTS / "es_scaling.json")


if __name__ == "__main__":
    main()
