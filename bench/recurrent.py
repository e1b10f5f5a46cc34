"""Recurrent against MLP PPO on a partially observed task: the same runs but for `algo.recurrent`, seed by seed.

    python -m bench.recurrent [--env InvertedPendulumNoVel-v5] [--cell lstm] [--steps 150000] [--seeds 1 2 3]
                              [--timeout S] [--out PATH] [--figures DIR] [overrides ...]

Per seed, one ordinary `surreal run` with MLPs and one with `algo.recurrent=<cell>`, one after the other, every other
override shared (`SHARED` below, then the user's), so the only difference is the policy's memory. On a task whose
velocities are masked (surreal/envs_masked.py) an MLP sees one observation and cannot tell how fast anything moves.

The last line is one JSON object (also written to bench/results/learning-ppo-<cell>-vs-mlp-<env>.json, or `--out`):
both policies' rows as bench.learning makes them (final eval of 10 deterministic episodes, env steps, wall time, the
evaluations during training), and per seed whether the recurrent policy's final eval beat the MLP's. Figures go to
`--figures` (docs/img by default): per seed both runs overlaid, and the mean and spread of each policy.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench._runs import RESULTS, WatchedRun, emit, machine
from bench.learning import collect_row
from surreal.commands.plot import overlay_figure, sweep_figure
from surreal.config.schema import NOT_IN_RUN_NAME

# What both policies of a seed run with: 4 envs in one actor, 128-step chunks (the recurrent policy's sequences), a
# batch of 2,048 steps in minibatches of 512 (4 sequences), an evaluation every 15,000 env steps for the curves.
SHARED = [
    "algo=ppo",
    "actors=1",
    "topology.envs_per_actor=4",
    "actor.chunk_steps=128",
    "algo.minibatch_size=512",
    "learner.eval_interval=15000",
]
FIGURES = RESULTS.parent.parent / "docs" / "img"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="InvertedPendulumNoVel-v5")
    parser.add_argument("--cell", choices=["lstm", "gru"], default="lstm")
    parser.add_argument("--steps", type=int, default=150_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    parser.add_argument("--out", type=Path, help="write the JSON object to this file")
    parser.add_argument("--figures", type=Path, default=FIGURES, help="where the curves go")
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs", help="where the run folders go")
    parser.add_argument("overrides", nargs="*", help="extra surreal run overrides, for both policies")
    args = parser.parse_intermixed_args()
    env_name = NOT_IN_RUN_NAME.sub("-", args.env)
    args.figures.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    policies = {"mlp": [], args.cell: [f"algo.recurrent={args.cell}"]}
    rows: dict[str, list[dict]] = {name: [] for name in policies}
    dirs: dict[str, list[Path]] = {name: [] for name in policies}
    for seed in args.seeds:
        for name, own in policies.items():
            overrides = [*SHARED, f"env={args.env}", f"steps={args.steps}", f"seed={seed}", *args.overrides, *own]
            run = WatchedRun(f"recurrent-{name}-{env_name}-s{seed}-{stamp}", overrides, args.runs_root)
            summary = run.wait(args.timeout)
            rows[name].append({"policy": name, **collect_row(run.run_dir, summary, {})})
            dirs[name].append(run.run_dir)
        pair = [d[-1] for d in dirs.values()]
        figure = overlay_figure(pair)
        axis = figure.axes[0]
        axis.set_title(f"PPO on {args.env}, seed {seed}: {args.cell.upper()} and MLP")
        legend = axis.get_legend()
        assert legend is not None, "overlay_figure draws one"
        for text, name in zip(legend.get_texts(), policies, strict=False):  # the runs come first
            text.set_text(f"{name}, seed {seed}")
        figure.savefig(args.figures / f"ppo-{args.cell}-vs-mlp-{env_name.lower()}-seed{seed}.png", dpi=120)
    title = f"PPO on {args.env}"
    sweep = sweep_figure(list(dirs.items()), title)
    sweep.savefig(args.figures / f"ppo-{args.cell}-vs-mlp-{env_name.lower()}.png", dpi=120)

    def final(name: str) -> list[float | None]:
        return [row["eval_return_mean"] for row in rows[name]]

    def mean(values: list[float | None]) -> float | None:
        done = [v for v in values if v is not None]  # a run stopped at --timeout has no final eval
        return float(np.mean(done)) if done else None

    per_seed = [
        {"seed": seed, "mlp": m, args.cell: r, f"{args.cell}_beats_mlp": m is not None and r is not None and r > m}
        for seed, m, r in zip(args.seeds, final("mlp"), final(args.cell), strict=True)
    ]
    result = {
        "benchmark": "recurrent",
        "env": args.env,
        "cell": args.cell,
        "steps": args.steps,
        "shared_overrides": [*SHARED, *args.overrides],
        "machine": machine(),
        "per_seed": per_seed,
        f"{args.cell}_beats_mlp_on_every_seed": all(s[f"{args.cell}_beats_mlp"] for s in per_seed),
        "eval_return_mean": {name: mean(final(name)) for name in policies},
        "wall_s_mean": {name: float(np.mean([r["wall_s"] for r in rows[name]])) for name in policies},
        "runs": [row for name in policies for row in rows[name]],
    }
    emit(result, args.out or RESULTS / f"learning-ppo-{args.cell}-vs-mlp-{env_name}.json")


if __name__ == "__main__":
    main()
