"""DrQ-SAC from pixels against the same SAC from state, on InvertedPendulum-v5: the learning curves side by side.

    nice -n 10 python -m bench.pixel_sac [--steps 10000] [--seed 1] [--timeout 4200]
    python -m bench.pixel_sac --combine STATE.json PIXELS.json [PIXELS.json ...]   # finished bench.learning results

Both runs are `bench.learning` runs (one actor, the evaluator every 1,000 env steps, 5 episodes), started at the same
time on the same box with the same SAC settings (`COMMON`: DrQ's Adam 1e-3, tau 0.01, temperature from 0.1, learning
from 1,000 steps, a batch of 64 so that a CPU update of the CNN stays under a second); the pixel run sees the task
through its camera (`env.kwargs.pixels=true`: three 84 x 84 RGB renders, action repeat 4). The result
(bench/results/pixel-sac.2core.json) holds each run's curve (eval return against agent steps, simulator steps and
wall seconds), its wall time, the machine and the seed. Agent steps differ between the two (a pixel agent step is 4
simulator steps of the state run's): `sim_steps` puts both curves on the task's own clock. Returns are the task's
(1 a simulator step upright, 1,000 at most) either way.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench._runs import RESULTS, emit

OUT = RESULTS / "pixel-sac.2core.json"
ENV = "InvertedPendulum-v5"
COMMON = [
    "algo.batch_size=64",
    "algo.learning_starts=1000",
    "algo.alpha_init=0.1",
    "algo.actor_lr=1e-3",
    "algo.critic_lr=1e-3",
    "algo.alpha_lr=1e-3",
    "algo.tau=0.01",
    "replay.capacity=12000",
    "learner.eval_interval=1000",
    "learner.eval_episodes=5",
]
ACTION_REPEAT = 4
PIXELS = ["+env.kwargs.pixels=true", f"+env.kwargs.action_repeat={ACTION_REPEAT}"]


def curve(result: dict[str, Any], repeat: int) -> list[dict[str, Any]]:
    """The run's evaluations with the simulator steps behind each (agent steps x the action repeat)."""
    (row,) = result["runs"]
    points = row.get("evals") or []
    return [{**p, "sim_steps": p["env_steps"] * repeat} for p in points]


def side(result: dict[str, Any], repeat: int) -> dict[str, Any]:
    (row,) = result["runs"]
    return {
        "overrides": result["overrides"],
        "seed": row["seed"],
        "status": row["status"],
        "env_steps": row["env_steps"],
        "sim_steps": row["env_steps"] * repeat,
        "wall_s": row["wall_s"],
        "final_eval_return": row["eval_return_mean"],
        "best_eval_return": max((p["eval_return_mean"] for p in curve(result, repeat)), default=None),
        "curve": curve(result, repeat),
    }


def combine(state: dict[str, Any], pixels: list[dict[str, Any]]) -> dict[str, Any]:
    """One state run and the pixel runs (a seed each) as the result file holds them."""
    return {
        "benchmark": "pixel_sac",
        "env": ENV,
        "machine": state["machine"],
        "state": side(state, 1),
        "pixels": [side(run, ACTION_REPEAT) for run in pixels],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=4200)
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs" / "pixel-sac")
    parser.add_argument("--combine", nargs="+", type=Path, metavar="RESULT", help="the state run's, then pixel runs'")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.combine:
        state, *pixels = (json.loads(path.read_text()) for path in args.combine)
        emit(combine(state, pixels), args.out)
        return
    outs = {kind: args.runs_root / f"{kind}.json" for kind in ("state", "pixels")}
    runs = []
    for kind, extra in (("state", []), ("pixels", PIXELS)):
        command = [
            *(sys.executable, "-m", "bench.learning", "sac", ENV, "--steps", str(args.steps), "--actors", "1"),
            *("--seeds", str(args.seed), "--timeout", str(args.timeout), "--out", str(outs[kind])),
            *("--runs-root", str(args.runs_root / kind)),
            *extra,
            *COMMON,
        ]
        runs.append(subprocess.Popen(command))  # one runs folder each: both start within the same second
    for run in runs:
        run.wait()
    emit(combine(json.loads(outs["state"].read_text()), [json.loads(outs["pixels"].read_text())]), args.out)


if __name__ == "__main__":
    main()
