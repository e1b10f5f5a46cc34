"""EnvPool against the actor's vector env on Pong, the same env count on the same cores, interleaved round by round.

    nice -n 5 python -m bench.atari_envpool               # writes bench/results/atari-envpool.2core.json

The question it answers: would EnvPool, as the actor's vector env, make an actor faster? The issue's rule is to keep it
only if it is. Both sides are bench/atari_envs.py's (the same code the wider bench measures beside raw ale-py):

- **surreal**: `surreal.envs.make_vec_env("ALE/Pong-v5", 8)`, what an actor steps (Gymnasium's SyncVectorEnv over
  `envs_atari.AtariEnv`, training envs of the machado preset); on 1 core one process of 8 envs (one actor), on 2
  cores two processes of 4, each pinned to its core;
- **envpool**: `envpool.make_gymnasium("Pong-v5")` with the machado preset's settings (sticky actions 0.25, up to 30
  no-ops, no fire reset, reward clipping, no episodic life, 84x84 gray, skip 4 with max-pool, 4 frames, the 27,000-step
  cap), 8 envs in one process, 1 and 2 threads pinned to 1 and 2 cores.

Random actions, emulator frames/s (an env step is 4). Each round measures the four configurations one after the
other, so a box shared with other work loads both sides alike; `envpool_over_surreal` is each round's own ratio
(`rounds_ratio`) and their median, the figure to trust here (absolute rates move with the box's load, which
`machine` notes at the end). `preprocessing` says whether EnvPool's env 0 shows our stacks bit for bit over a
deterministic stretch of play (no sticky actions, one no-op, the same actions).
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from bench._runs import RESULTS, emit, machine_at_end
from bench.atari_envs import (
    ENV_ID,
    ENVS,
    _envpool_deterministic,
    _threaded,
    deterministic_equal,
    envpool_vector,
    in_processes,
)

OUT = RESULTS / "atari-envpool.2core.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1000, help="batched steps of 8 envs per measurement")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    try:
        version = metadata.version("envpool")
    except metadata.PackageNotFoundError:
        raise SystemExit("envpool is not installed: pip install envpool (it is not a dependency of surreal)") from None
    two = [0, 1] if (os.cpu_count() or 1) >= 2 else [0]
    configs: dict[str, Callable[[], float]] = {
        "surreal_1core": lambda: in_processes("surreal", [0], envs=ENVS, steps=args.steps, seed=0),
        "envpool_1core": lambda: _threaded(envpool_vector, 1, args.steps),
        "surreal_2core": lambda: in_processes("surreal", two, envs=ENVS // len(two), steps=args.steps, seed=0),
        "envpool_2core": lambda: _threaded(envpool_vector, len(two), args.steps),
    }
    rounds: dict[str, list[float]] = {name: [] for name in configs}
    loads: list[float] = []
    for r in range(args.rounds):
        for name, measure in configs.items():
            rounds[name].append(round(measure(), 1))
            print(f"round {r + 1}: {name} {rounds[name][-1]:,.0f} frames/s", flush=True)
        loads.append(round(os.getloadavg()[0], 1))
    median = {name: round(statistics.median(rates), 1) for name, rates in rounds.items()}
    rounds_ratio = {
        cores: [round(e / s, 3) for e, s in zip(rounds[f"envpool_{cores}"], rounds[f"surreal_{cores}"], strict=True)]
        for cores in ("1core", "2core")
    }
    ratio = {cores: round(statistics.median(values), 3) for cores, values in rounds_ratio.items()}
    for cores, values in rounds_ratio.items():
        print(f"envpool / surreal, {cores}: median {ratio[cores]:.3f}, rounds {values}", flush=True)
    emit(
        {
            "bench": "atari_envpool",
            "machine": machine_at_end(),
            "load_average_after_each_round": loads,
            "shared_box": "other work ran on the same cores: absolute rates move with it; trust the same-round ratios",
            "game": ENV_ID,
            "frames": "emulator frames (an env step is 4)",
            "envs": ENVS,
            "envpool": version,
            "rounds": args.rounds,
            "steps_per_measurement": args.steps,
            "frames_per_s_median": median,
            "frames_per_s_rounds": rounds,
            "envpool_over_surreal": ratio,
            "envpool_over_surreal_rounds": rounds_ratio,
            "preprocessing_vs_surreal": deterministic_equal(_envpool_deterministic, noop_max=1),
        },
        Path(args.out),
    )


if __name__ == "__main__":
    main()
