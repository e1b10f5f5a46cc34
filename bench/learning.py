"""Learning benchmark: a full `surreal run` per seed, compared with published returns.

    python -m bench.learning {ddpg,es,ppo,sac,...} HalfCheetah-v5 [--steps 1000000] [--seeds 1 2 3] [--actors 4]
                             [--parallel] [--timeout S] [--out PATH] [--runs-root DIR] [overrides ...]
    python -m bench.learning --collect RUN_DIR [RUN_DIR ...] [--out PATH]

Each seed is one ordinary run (its folder under bench/results/runs/ holds config, metrics, eval and the
learning curve). The last line is one JSON object with every seed's eval return, steps and wall time,
their mean, and the published reference numbers it is compared with (also written to
bench/results/learning-<algo>-<env>.json, or to `--out`). With `learner.eval_interval=N` among the overrides, each
seed's row also holds its evaluations every N env steps and the first one that reached the reference's bar. A run
still going at `--timeout` is stopped as Ctrl-C would stop it: its row says `interrupted`, with the env steps it
reached and no eval return.

`--collect` makes the same object from run folders this bench started that have finished since (runs whose
watcher was stopped so they could outlive `--timeout`): algorithm, env, steps, actors and the extra overrides are
read from each folder's reproduce.json (a folder whose overrides lack them was not started here, and is refused),
the rows from its summary.json. Run it on the machine that ran them: `machine` names the host that collects.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench._runs import RESULTS, WatchedRun, emit, machine
from surreal.commands.plot import NoMetricsError, plot_run
from surreal.config.schema import ALGORITHMS, NOT_IN_RUN_NAME
from surreal.metricsfile import read_evals

# Published returns (MuJoCo v4 / v3 tasks; v5 differs only in details), per algorithm and task.
REFERENCES: dict[str, dict[str, dict[str, object]]] = {
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
    "sac": {
        "HalfCheetah-v5": {
            "issue_25_target": "9,000 within 300k env steps (FlashSAC's curves: about 100k; SimbaV2: 250k)",
            "target": 9000,
        },
        "Pendulum-v1": {"target": -250, "note": "the suite's bar (tests/test_sac.py): 12k steps, serial"},
        "robosuite:Lift": {
            "robosuite_benchmark_rlkit_sac": "all 5 seeds lift the cube by about 750k env steps",
            "success_target": 0.8,
        },
    },
    "es": {
        "InvertedPendulum-v5": {"target": 900},
        "HalfCheetah-v5": {"openai_es_paper": "about 3,000 after 5M timesteps on v1 (Salimans et al. 2017, Table 3)"},
    },
}


# summary.json's fields that a result row keeps, one row per seed.
ROW_FIELDS = (
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
# The overrides bench.learning writes itself (the rest are the user's, recorded as `overrides`).
OWN_OVERRIDES = ("name", "algo", "env", "steps", "seed", "actors")


def eval_curve(run_dir: Path, summary: dict) -> list[dict]:
    """The run's evaluations in order: the evaluator's during training (evals.jsonl, with `learner.eval_interval`)
    and the final one, each with its env steps and its wall time since the run started."""
    started = json.loads((run_dir / "reproduce.json").read_text()).get("started_at")
    points = [
        {
            "env_steps": r["env_steps"],
            "wall_s": round(r["time"] - started, 1) if started is not None else None,
            "eval_return_mean": r["eval_return_mean"],
            "eval_success_rate": r.get("eval_success_rate"),
        }
        for r in read_evals(run_dir)
    ]
    if summary["eval_return_mean"] is not None:
        points.append({k: summary[k] for k in ("env_steps", "wall_s", "eval_return_mean", "eval_success_rate")})
    return points


def first_at_target(curve: list[dict], references: dict) -> dict | None:
    """The first evaluation that reached the task's bar (`success_target` where the env reports success, else
    the return `target`), or None: when a target "within N env steps" was met, not only whether the end met it."""
    key, bar = (
        ("eval_success_rate", references["success_target"])
        if "success_target" in references
        else ("eval_return_mean", references.get("target"))
    )
    if bar is None:
        return None
    return next((p for p in curve if p[key] is not None and p[key] >= bar), None)


def collect_row(run_dir: Path, summary: dict, references: dict) -> dict:
    """One seed's row: its learning curve plotted into the run folder, summary.json's fields kept, and its
    evaluations (with the first to reach the reference's bar) when the evaluator ran."""
    try:
        plot_run(run_dir)
    except NoMetricsError as nothing_to_plot:  # stopped before an episode ended: the row still counts
        print(nothing_to_plot, flush=True)
    row = {k: summary[k] for k in ROW_FIELDS}
    curve = eval_curve(run_dir, summary)
    if len(curve) > (summary["eval_return_mean"] is not None):  # the evaluator ran: more than the final point
        row["evals"] = curve
        row["first_at_target"] = first_at_target(curve, references)
    print(json.dumps({k: v for k, v in row.items() if k != "evals"}), flush=True)
    return row


def learning_result(algo: str, env: str, steps: int, actors: int, overrides: list[str], rows: list[dict]) -> dict:
    returns = [r["eval_return_mean"] for r in rows if r["eval_return_mean"] is not None]
    return {
        "benchmark": "learning",
        "algo": algo,
        "env": env,
        "steps": steps,
        "actors": actors,
        "overrides": overrides,
        "machine": machine(),
        "runs": rows,
        "eval_return_mean": float(np.mean(returns)) if returns else None,
        "wall_s_mean": float(np.mean([r["wall_s"] for r in rows])),
        "references": REFERENCES.get(algo, {}).get(env, {}),
    }


def default_out(algo: str, env: str) -> Path:
    env_name = NOT_IN_RUN_NAME.sub("-", env)  # robosuite:Lift -> robosuite-Lift, for folder and file names
    return RESULTS / f"learning-{algo}-{env_name}.json"


def collect(run_dirs: list[Path]) -> dict:
    """The result object for finished run folders, which must share algorithm, env, steps, actors and overrides
    (the seeds of one experiment)."""
    experiments, rows = set(), []
    for run_dir in run_dirs:
        given = json.loads((run_dir / "reproduce.json").read_text())["overrides"]
        keys = dict(o.split("=", 1) for o in given if "=" in o)
        missing = [k for k in ("algo", "env", "steps", "actors") if k not in keys]
        if missing:
            sys.exit(f"{run_dir}: not a bench.learning run ({', '.join(missing)} not among its overrides)")
        extra = tuple(o for o in given if o.split("=", 1)[0] not in OWN_OVERRIDES)
        experiments.add((keys["algo"], keys["env"], int(keys["steps"]), int(keys["actors"]), extra))
        summary = json.loads((run_dir / "summary.json").read_text())
        rows.append(collect_row(run_dir, summary, REFERENCES.get(summary["algo"], {}).get(summary["env"], {})))
    if len(experiments) != 1:
        sys.exit(f"the run folders are not the seeds of one experiment: {sorted(experiments)}")
    algo, env, steps, actors, extra = experiments.pop()
    return learning_result(algo, env, steps, actors, list(extra), rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("algo", nargs="?", choices=sorted(ALGORITHMS))
    parser.add_argument("env", nargs="?")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--parallel", action="store_true", help="run the seeds at the same time")
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per run (for all, with --parallel)")
    parser.add_argument("--out", type=Path, help="write the JSON object to this file")
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs", help="where the run folders go")
    parser.add_argument("--collect", nargs="+", type=Path, metavar="RUN_DIR", help="finished run folders to report")
    parser.add_argument("overrides", nargs="*", help="extra surreal run overrides")
    args = parser.parse_intermixed_args()  # overrides may follow the options
    if args.collect:
        if args.algo or args.overrides:
            parser.error("--collect reads the algorithm, env and overrides from the run folders")
        result = collect(args.collect)
        emit(result, args.out or default_out(result["algo"], result["env"]))
        return
    if not args.env:
        parser.error("give an algorithm and an env (or --collect RUN_DIR ...)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    env_name = NOT_IN_RUN_NAME.sub("-", args.env)
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
    rows = []
    for run in runs:
        summary = run.wait(max(1.0, deadline - time.monotonic()) if args.parallel else args.timeout)
        rows.append(collect_row(run.run_dir, summary, REFERENCES.get(args.algo, {}).get(args.env, {})))
    result = learning_result(args.algo, args.env, args.steps, args.actors, args.overrides, rows)
    emit(result, args.out or default_out(args.algo, args.env))


if __name__ == "__main__":
    main()
