"""Atari env throughput on Pong: raw ale-py stepping, and vector envs with the same preprocessing, in one run.

    nice -n 5 python -m bench.atari_envs                   # writes bench/results/atari-envs.2core.json

- **raw**: `ALEInterface.act` in a loop with uniformly random actions (sticky actions 0.25, as `ALE/Pong-v5`), a new
  game at each game over: emulator frames/s, on 1 core and on 2 (one process pinned to each). It is the denominator of
  the system-efficiency figure (env frames/s with learning on, over this).
- **surreal**: `surreal.envs.make_vec_env("ALE/Pong-v5", K)`, the actor's vector env (Gymnasium's SyncVectorEnv over
  `envs_atari.AtariEnv`, training envs of the machado preset), K=8 envs; on 2 cores two such processes of 4 envs.
- **reference**: the same SyncVectorEnv over Gymnasium's own wrappers (AtariPreprocessing + FrameStackObservation +
  ClipReward), which `AtariEnv` matches frame for frame (tests/test_atari.py): what driving the emulator directly saves.
- **envpool**: EnvPool's C++ thread pool (`envpool.make_gymnasium("Pong-v5")`; the version installed is recorded),
  the same preprocessing settings (sticky 0.25, 30 no-ops, no fire reset, reward clipping, 84x84 gray, 4 frames,
  skip 4), K=8 envs, 1 and 2 threads in one process pinned to 1 and 2 cores. Measured only if envpool is installed
  (it is not a project dependency).
- **ale_vector**: ale-py's own `AtariVectorEnv` (the same C++ design, shipped in the ale-py wheel), same settings.

Frames are emulator frames: an env step is 4. Each configuration runs once per round and the rounds interleave them
(`--rounds`, default 3), so a box shared with other work slows all of them alike; the figure to trust is a ratio
between configurations of the same run (`ratios`, from the medians), not an absolute rate. `preprocessing` says,
for envpool and ale_vector, whether their observations equal `AtariEnv`'s bit for bit on a deterministic stretch of
play (no sticky actions, no no-ops, the same actions): EnvPool would be kept only if faster and equal.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from bench._runs import RESULTS, emit, in_spawned_process, machine_at_end

OUT = RESULTS / "atari-envs.2core.json"
GAME, ENV_ID, ENVPOOL_TASK = "pong", "ALE/Pong-v5", "Pong-v5"
ENVS = 8
SKIP = 4
# The settings envpool and ale_py's vector env both spell so (each names clipping, frame skip and grayscale its own way)
SETTINGS = {
    "repeat_action_probability": 0.25,
    "noop_max": 30,
    "use_fire_reset": False,
    "episodic_life": False,
    "stack_num": 4,
    "img_height": 84,
    "img_width": 84,
}


def pin(cores: list[int]) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)


def raw_frames_per_s(frames: int, seed: int) -> float:
    """Emulator frames/s of bare `ALEInterface.act` calls."""
    from ale_py import ALEInterface, LoggerMode, roms

    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setInt("random_seed", seed)
    ale.setFloat("repeat_action_probability", 0.25)
    rom = roms.get_rom_path(GAME)
    assert rom is not None, GAME
    ale.loadROM(rom)
    legal = ale.getMinimalActionSet()
    choice = np.random.default_rng(seed).integers(0, len(legal), frames)
    started = time.perf_counter()
    for i in range(frames):
        ale.act(legal[choice[i]])
        if ale.game_over():
            ale.reset_game()
    return frames / (time.perf_counter() - started)


def gym_vector(kind: str, envs: int) -> Any:
    import gymnasium as gym

    from surreal.envs import make_vec_env

    if kind == "surreal":
        return make_vec_env(ENV_ID, envs, seed=0)
    from gymnasium.wrappers import AtariPreprocessing, ClipReward, FrameStackObservation

    from surreal.envs_atari import import_ale

    import_ale()  # registers the ALE/ ids

    def reference() -> gym.Env:
        env = AtariPreprocessing(gym.make(ENV_ID, frameskip=1), noop_max=30, frame_skip=SKIP, screen_size=84)
        return FrameStackObservation(ClipReward(env, -1.0, 1.0), 4)

    vec = gym.vector.SyncVectorEnv([reference] * envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    vec.reset(seed=list(range(envs)))
    return vec


def envpool_vector(envs: int, threads: int, **overrides: Any) -> Any:
    import envpool

    names = {"reward_clip": True, "frame_skip": SKIP, "gray_scale": True, "max_episode_steps": 27_000}
    settings = {**SETTINGS, **names, **overrides}
    vec = envpool.make_gymnasium(ENVPOOL_TASK, num_envs=envs, num_threads=threads, seed=0, **settings)
    vec.reset()
    return vec


def ale_vector(envs: int, threads: int, **overrides: Any) -> Any:
    from ale_py.vector_env import AtariVectorEnv

    names = {"reward_clipping": True, "frameskip": SKIP, "grayscale": True, "autoreset_mode": "SameStep"}
    settings = {**SETTINGS, **names, **overrides}
    vec = AtariVectorEnv(GAME, envs, num_threads=threads, **settings)
    vec.reset(seed=0)
    return vec


def vector_frames_per_s(make: Callable[[], Any], steps: int, seed: int) -> float:
    """Emulator frames/s of `steps` batched steps of the vector env `make` builds, random actions."""
    vec = make()
    n = vec.action_space.nvec[0] if hasattr(vec.action_space, "nvec") else vec.single_action_space.n
    choice = np.random.default_rng(seed).integers(0, n, (steps, vec.num_envs))
    for t in range(20):  # warm-up: first resets, thread start
        vec.step(choice[t])
    started = time.perf_counter()
    for t in range(steps):
        vec.step(choice[t])
    elapsed = time.perf_counter() - started
    envs = vec.num_envs
    vec.close()
    return steps * envs * SKIP / elapsed


def _child(task: tuple[str, list[int], dict[str, Any]], barrier: Any, out: Any) -> None:
    kind, cores, args = task
    pin(cores)
    barrier.wait()
    try:
        if kind == "raw":
            out.put(raw_frames_per_s(args["frames"], args["seed"]))
        else:
            out.put(vector_frames_per_s(lambda: gym_vector(kind, args["envs"]), args["steps"], args["seed"]))
    except Exception as exc:  # the parent waits on the queue: say what failed instead of leaving it to time out
        out.put(f"{kind} failed: {type(exc).__name__}: {exc}")


def in_processes(kind: str, cores: list[int], **args: Any) -> float:
    """The summed rate of one process per core in `cores`, started together (a barrier) and each pinned to its core."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(len(cores)), ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=((kind, [core], {**args, "seed": args["seed"] + core}), barrier, out))
        for core in cores
    ]
    for proc in procs:
        proc.start()
    rates = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    for rate in rates:
        if isinstance(rate, str):
            raise RuntimeError(rate)
    return float(sum(rates))


def _threaded(make: Callable[[int, int], Any], threads: int, steps: int) -> float:
    return in_spawned_process(_threaded_child, make, threads, steps, timeout_s=600)


def _threaded_child(make: Callable[[int, int], Any], threads: int, steps: int) -> float:
    pin(list(range(threads)))
    return vector_frames_per_s(lambda: make(ENVS, threads), steps, 0)


def deterministic_equal(make: Callable[[], Any], noop_max: int, steps: int = 300) -> dict[str, Any]:
    """Whether `make`'s env 0 shows `AtariEnv`'s stacks bit for bit with no sticky actions, a fixed number of no-ops
    at a reset and the same actions (no randomness left in the emulator): stacks compared and equal, and the largest
    pixel difference. `noop_max`: `AtariEnv`'s, set to play the same no-ops as `make`'s env."""
    from surreal.envs_atari import AtariEnv

    ours = AtariEnv(ENV_ID, training=True, repeat_action_probability=0.0, noop_max=noop_max)
    actions = int(ours.action_space.n)  # type: ignore[attr-defined]  # Discrete
    vec = make()
    mine, _ = ours.reset(seed=0)
    theirs, _ = vec.reset(seed=0) if "ale_py" in type(vec).__module__ else vec.reset()
    choice = np.random.default_rng(5).integers(0, actions, steps)
    equal = int(np.array_equal(mine, theirs[0]))
    worst, compared = int(np.abs(mine.astype(int) - theirs[0].astype(int)).max()), 1
    for t in range(steps):
        mine, _, terminated, truncated, _ = ours.step(choice[t])
        theirs, *_ = vec.step(np.full(vec.num_envs, choice[t]))
        if terminated or truncated:
            break
        compared += 1
        equal += int(np.array_equal(mine, theirs[0]))
        worst = max(worst, int(np.abs(mine.astype(int) - theirs[0].astype(int)).max()))
    vec.close()
    return {"stacks_compared": compared, "stacks_equal": equal, "max_pixel_difference": worst}


def _envpool_deterministic() -> Any:
    return envpool_vector(1, 1, repeat_action_probability=0.0, noop_max=1)  # one no-op, as noop_max=1 here; 0 crashes


def _ale_deterministic() -> Any:
    return ale_vector(1, 1, repeat_action_probability=0.0, noop_max=0)  # no no-ops (its noop_max=1 plays none either)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--raw-frames", type=int, default=60_000, help="emulator frames per raw process")
    parser.add_argument("--steps", type=int, default=800, help="batched steps of 8 envs per vector measurement")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    try:
        import envpool  # noqa: F401  - measured only where installed

        have_envpool = True
    except ImportError:
        have_envpool = False
    two = [0, 1] if (os.cpu_count() or 1) >= 2 else [0]
    configs: dict[str, Callable[[], float]] = {
        "raw_1core": lambda: in_processes("raw", [0], frames=args.raw_frames, seed=0),
        "raw_2core": lambda: in_processes("raw", two, frames=args.raw_frames, seed=0),
        "surreal_1core": lambda: in_processes("surreal", [0], envs=ENVS, steps=args.steps, seed=0),
        "surreal_2core": lambda: in_processes("surreal", two, envs=ENVS // 2, steps=args.steps, seed=0),
        "reference_1core": lambda: in_processes("reference", [0], envs=ENVS, steps=args.steps, seed=0),
        "reference_2core": lambda: in_processes("reference", two, envs=ENVS // 2, steps=args.steps, seed=0),
        "ale_vector_1core": lambda: _threaded(ale_vector, 1, args.steps),
        "ale_vector_2core": lambda: _threaded(ale_vector, len(two), args.steps),
    }
    if have_envpool:
        configs["envpool_1core"] = lambda: _threaded(envpool_vector, 1, args.steps)
        configs["envpool_2core"] = lambda: _threaded(envpool_vector, len(two), args.steps)
    rounds: dict[str, list[float]] = {name: [] for name in configs}
    for r in range(args.rounds):
        for name, measure in configs.items():
            rounds[name].append(round(measure(), 1))
            print(f"round {r + 1}: {name} {rounds[name][-1]:,.0f} frames/s", flush=True)
    median = {name: round(statistics.median(rates), 1) for name, rates in rounds.items()}
    ratios: dict[str, float] = {}
    for cores in ("1core", "2core"):
        for name in ("surreal", "reference", "envpool", "ale_vector"):
            if f"{name}_{cores}" in median:
                ratios[f"{name}_over_raw_{cores}"] = round(median[f"{name}_{cores}"] / median[f"raw_{cores}"], 3)
        for name in ("envpool", "ale_vector"):
            if f"{name}_{cores}" in median:
                ratios[f"{name}_over_surreal_{cores}"] = round(
                    median[f"{name}_{cores}"] / median[f"surreal_{cores}"], 3
                )
        ratios[f"surreal_over_reference_{cores}"] = round(median[f"surreal_{cores}"] / median[f"reference_{cores}"], 3)
    preprocessing = {"ale_vector": deterministic_equal(_ale_deterministic, noop_max=0)}
    if have_envpool:
        preprocessing["envpool"] = deterministic_equal(_envpool_deterministic, noop_max=1)
    emit(
        {
            "bench": "atari_envs",
            "machine": machine_at_end(),
            "shared_box": "other work ran on the same cores: absolute rates move with it; trust the same-run ratios",
            "game": ENV_ID,
            "frames": "emulator frames (an env step is 4)",
            "envs": ENVS,
            "rounds": args.rounds,
            "frames_per_s_median": median,
            "frames_per_s_rounds": rounds,
            "ratios": ratios,
            "preprocessing_vs_surreal": preprocessing,
            "envpool": metadata.version("envpool") if have_envpool else "not installed: not measured",
        },
        Path(args.out),
    )


if __name__ == "__main__":
    main()
