"""DrQ-SAC from pixels against the same SAC from state, on InvertedPendulum-v5: the learning curves side by side.

    nice -n 10 python -m bench.pixel_sac [--steps 30000] [--seed 1] [--timeout 4200] [--keep OLD.json ...]
    python -m bench.pixel_sac --combine STATE.json PIXELS.json [PIXELS.json ...]   # finished bench.learning results

Both runs are `bench.learning` runs (one actor, the evaluator every 1,000 env steps, 5 episodes), started at the same
time on the same box with the same SAC settings (`COMMON`: DrQ's Adam 1e-3, tau 0.01, temperature from 0.1, learning
from 1,000 steps, a batch of 64 so that a CPU update of the CNN stays under a second); the pixel run sees the task
through a camera (`env.kwargs.pixels=true`: three 84 x 84 RGB renders, action repeat 2, `CAMERA`). The result
(bench/results/pixel-sac.2core.json) holds each run's curve (eval return against agent steps, simulator steps and
wall seconds), its wall time, its action repeat, the machine and the seed. Agent steps differ between the two (a
pixel agent step is `action_repeat` simulator steps of the state run's): `sim_steps` puts both curves on the task's
own clock. Returns are the task's (1 a simulator step upright, 1,000 at most) either way. `--keep` carries the pixel
runs of earlier result files into the new one, after the new runs (each says its settings in `overrides`; a run
made before `algo.encoder_features` existed had the encoder's own 512-ReLU output, recorded as 0).

Action repeat 2 is DrQ's control interval for cartpole (action repeat 8 of DeepMind Control's 0.01 s): 0.08 s, two
of InvertedPendulum's 0.04 s steps. Its 0.6 m pole falls faster than cartpole's 1 m one: left alone near upright it
doubles its lean every 0.16 s, so 4 (0.16 s, what the first runs used) gives the policy one decision per doubling.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench._runs import RESULTS, emit
from surreal import envs_pixels
from surreal.algos.sac.config import SACConfig

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
ACTION_REPEAT = 2
# The task's default camera stands 2.04 m off: the 0.6 m pole is about 28 pixels tall in 84. From 1.5 m, level with
# the pole's middle, it is about 39 (the cart in view within +-0.6 m of the middle: tests/test_sac_pixels.py).
CAMERA = {"distance": 1.5, "lookat": [0.0, 0.0, 0.3], "elevation": 0.0}
PIXELS = [
    "+env.kwargs.pixels=true",
    f"+env.kwargs.action_repeat={ACTION_REPEAT}",
    "+env.kwargs.default_camera_config={" + ",".join(f"{k}:{v}" for k, v in CAMERA.items()).replace(" ", "") + "}",
]


def overridden(overrides: list[str], key: str) -> str | None:
    """The value the overrides give `key` (with or without a leading +), or None."""
    for override in overrides:
        if override.lstrip("+").startswith(f"{key}="):
            return override.split("=", 1)[1]
    return None


def action_repeat(overrides: list[str], pixels: bool) -> int:
    """The run's simulator steps per agent step: its `env.kwargs.action_repeat`, else the adapter's default (1 for a
    state run)."""
    value = overridden(overrides, "env.kwargs.action_repeat")
    return int(value) if value is not None else int(envs_pixels.DEFAULTS["action_repeat"]) if pixels else 1


def encoder_features(overrides: list[str], kept: bool) -> int:
    """The features of the pixel run's encoder output (`algo.encoder_features`): its override, else SAC's default for
    a run made now, else 0 for a kept run (one made before the setting, with the encoder's own 512 ReLUs)."""
    value = overridden(overrides, "algo.encoder_features")
    return int(value) if value is not None else 0 if kept else SACConfig().encoder_features


def curve(result: dict[str, Any], repeat: int) -> list[dict[str, Any]]:
    """The run's evaluations with the simulator steps behind each (agent steps x the action repeat)."""
    (row,) = result["runs"]
    points = row.get("evals") or []
    return [{**p, "sim_steps": p["env_steps"] * repeat} for p in points]


def side(result: dict[str, Any], pixels: bool) -> dict[str, Any]:
    (row,) = result["runs"]
    repeat = action_repeat(result["overrides"], pixels)
    return {
        "overrides": result["overrides"],
        "action_repeat": repeat,
        **({"encoder_features": encoder_features(result["overrides"], False)} if pixels else {}),
        "seed": row["seed"],
        "status": row["status"],
        "env_steps": row["env_steps"],
        "sim_steps": row["env_steps"] * repeat,
        "wall_s": row["wall_s"],
        "final_eval_return": row["eval_return_mean"],
        "best_eval_return": max((p["eval_return_mean"] for p in curve(result, repeat)), default=None),
        "curve": curve(result, repeat),
    }


def combine(
    state: dict[str, Any], pixels: list[dict[str, Any]], kept: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One state run and the pixel runs (a seed each) as the result file holds them; `kept`: pixel runs of earlier
    result files, as they held them (their action repeat and encoder output filled in where they were not recorded)."""
    earlier = [
        {
            **run,
            "action_repeat": run.get("action_repeat", action_repeat(run["overrides"], True)),
            "encoder_features": run.get("encoder_features", encoder_features(run["overrides"], True)),
        }
        for run in kept or []
    ]
    return {
        "benchmark": "pixel_sac",
        "env": ENV,
        "machine": state["machine"],
        "state": side(state, False),
        "pixels": [side(run, True) for run in pixels] + earlier,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=4200)
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs" / "pixel-sac")
    parser.add_argument("--combine", nargs="+", type=Path, metavar="RESULT", help="the state run's, then pixel runs'")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--keep", nargs="+", type=Path, default=[], metavar="RESULT", help="earlier results' pixel runs"
    )
    args = parser.parse_args()
    kept = [run for path in args.keep for run in json.loads(path.read_text())["pixels"]]
    if args.combine:
        state, *pixels = (json.loads(path.read_text()) for path in args.combine)
        emit(combine(state, pixels, kept), args.out)
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
    state, pixels = (json.loads(outs[kind].read_text()) for kind in ("state", "pixels"))
    emit(combine(state, [pixels], kept), args.out)


if __name__ == "__main__":
    main()
