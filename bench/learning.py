"""Learning benchmark: a full `surreal run` per seed, compared with published returns.

    python -m bench.learning {ppo,ddpg,es} HalfCheetah-v5 [--steps 1000000] [--seeds 1 2 3] [--actors 4]
                             [--parallel] [--timeout S] [--out PATH] [--runs-root DIR] [overrides ...]

Each seed is one ordinary run (its folder under bench/results/runs/ holds config, metrics, eval and the
learning curve). The last line is one JSON object with every seed's eval return, steps and wall time,
their mean, and the published reference numbers it is compared with (also written to
bench/results/learning-<algo>-<env>.json, or to `--out`). A run still going at `--timeout` is stopped as Ctrl-C
would stop it: its row says `interrupted`, with the env steps it reached and no eval return.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from bench._runs import RESULTS, WatchedRun, emit
from surreal.config.schema import NOT_IN_RUN_NAME
from surreal.launch.plot import NoMetricsError, plot_run

# Published returns (MuJoCo v4 / v3 tasks; v5 differs only in details), per algorithm and task.
REFERENCES = {
    "ppo": {
        "HalfCheetah-v5": {
            "cleanrl_ppo_continuous_action": "about 1,400-2,000 (v4, 1M steps)",
            "tianshou_ppo": "about 5,800 (v3, 1M steps)",
            "target": 2500,
        },
        "InvertedPendulum-v5": {"cleanrl_ppo_continuous_action": "about 1,000 (v4)", "target": 900},
    },
    "ddpg": {
        "HalfCheetah-v5": {
            "cleanrl_ddpg_continuous_action": "about 8,600-10,000 (v4, 1M steps)",
            "cleanrl_td3_continuous_action": "about 9,600-10,200 (v4, 1M steps)",
            "target": 8000,
        },
        "Pendulum-v1": {"target": -250, "note": "solved is about -150 to -200; the suite's bar is 30k steps"},
    },
    "es": {
        "InvertedPendulum-v5": {"target": 900},
        "HalfCheetah-v5": {"openai_es_paper": "about 3,000 after 5M timesteps on v1 (Salimans et al. 2017, Table 3)"},
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("algo", choices=sorted(REFERENCES))
    parser.add_argument("env")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--parallel", action="store_true", help="run the seeds at the same time")
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per run (for all, with --parallel)")
    parser.add_argument("--out", type=Path, help="write the JSON object to this file")
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs", help="where the run folders go")
    parser.add_argument("overrides", nargs="*", help="extra surreal run overrides")
    args = parser.parse_intermixed_args()  # overrides may follow the options
    stamp = time.strftime("%Y%m%d-%H%M%S")
    env_name = NOT_IN_RUN_NAME.sub("-", args.env)  # robosuite:Lift -> robosuite-Lift, for folder and file names
    runs = []
    deadline = time.monotonic() + args.timeout  # --parallel: the runs share it
    for seed in args.seeds:
        overrides = [
            f"algo={args.algo}",
            f"env={args.env}",
            f"steps={args.steps}",
            f"seed={seed}",
            f"actors={args.actors}",
            *args.overrides,
        ]
        run = WatchedRun(f"learning-{args.algo}-{env_name}-s{seed}-{stamp}", overrides, args.runs_root)
        runs.append(run)
        if not args.parallel:
            run.wait(args.timeout)
    results = []
    for run in runs:
        summary = run.wait(max(1.0, deadline - time.monotonic()) if args.parallel else args.timeout)
        try:
            plot_run(run.run_dir)
        except NoMetricsError as nothing_to_plot:  # stopped before an episode ended: the row still counts
            print(nothing_to_plot, flush=True)
        results.append(
            {
                k: summary[k]
                for k in (
                    "seed",
                    "status",
                    "env_steps",
                    "wall_s",
                    "env_steps_per_s",
                    "eval_return_mean",
                    "eval_return_std",
                    "train_return_mean",
                    "eval_success_rate",  # null unless the env reports success (robosuite tasks)
                    "train_success_rate",
                )
            }
        )
        print(json.dumps(results[-1]), flush=True)
    returns = [r["eval_return_mean"] for r in results if r["eval_return_mean"] is not None]
    result = {
        "benchmark": "learning",
        "algo": args.algo,
        "env": args.env,
        "steps": args.steps,
        "actors": args.actors,
        "overrides": args.overrides,
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
        "runs": results,
        "eval_return_mean": float(np.mean(returns)) if returns else None,
        "wall_s_mean": float(np.mean([r["wall_s"] for r in results])),
        "references": REFERENCES[args.algo].get(args.env, {}),
    }
    emit(result, args.out or RESULTS / f"learning-{args.algo}-{env_name}.json")


if __name__ == "__main__":
    main()
