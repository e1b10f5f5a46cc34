"""PPO on Pong from pixels: env frames/s with learning on, against ale-py's raw stepping on the same cores in the same
run (the system-efficiency figure of the MuJoCo runs), and what the learner alone gets through.

    nice -n 5 python -m bench.atari_ppo                        # writes bench/results/atari-ppo.2core.json
    python -m bench.atari_ppo --actors 14 --device cuda --compile --raw-cores 14 --out DIR/atari-ppo.T.json  # gpu.sh
    python -m bench.atari_ppo [options] [overrides ...]        # overrides on top of the preset, for both runs

- **raw**: bare `ALEInterface.act` with random actions (bench/atari_envs.py's), one process pinned to each core the
  system uses (`--raw-cores`, default every core), measured before and after the system run; the denominator.
- **actor_alone**: one process (pinned to one core) stepping `actor_envs` training envs of `ALE/Pong-v5` and acting with
  PPO's CNN policy (its uint8 stacks through the Nature CNN on the CPU, one thread), collecting chunks that carry
  each frame once: what one actor can do with no learner, no replay, no sockets.
- **system**: `surreal run preset=ppo-atari env=ALE/Pong-v5` with `--actors` actors of the preset's 8 envs, the
  learner on `--device`, for `--seconds`; env frames/s from the learner's rows after the first two updates (start-up
  and, with `learner.compile`, compilation), and the learner's seconds per update and share of time waiting for data.
- **learner_alone**: `PPOLearner.update` on the preset's batches (1,024 transitions of packed Pong chunks), in this
  process on `--device` (one thread on a CPU, as the learner role), timed over `--learner-updates` updates after one
  warm-up: transitions per second of update, each transition seen `update_epochs` (4) times (`samples_per_s`).

efficiency = system frames/s / raw frames/s (the two raw windows' mean). A frame is an emulator frame: an env step is
4. On a 2-core box the learner's CNN shares the cores with the actor: what binds is said by `learner_wait_share` (near
0: the learner) and by actor_alone against system.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any, cast

import numpy as np

from bench._runs import RESULTS, WatchedRun, emit, in_spawned_process, machine_at_end
from bench.atari_envs import ENV_ID, SKIP, in_processes, pin

OUT = RESULTS / "atari-ppo.2core.json"


def pong_collector(envs: int, steps: int) -> Any:
    """The ppo-atari preset's policy and collector on `envs` envs of Pong, `steps` a chunk, as an actor makes them,
    in this process pinned to core 0 with one torch thread; a warm-up chunk collected (first resets, first forward
    passes)."""
    pin([0])
    import torch

    from surreal.algos.ppo.config import PPOConfig
    from surreal.algos.ppo.policy import PPOPolicy, make_collector
    from surreal.config import algo_config, load_config
    from surreal.envs import make_vec_env

    torch.set_num_threads(1)
    cfg = cast(PPOConfig, algo_config(load_config(["preset=ppo-atari", f"env={ENV_ID}"])))
    vec = make_vec_env(ENV_ID, envs, 0)
    policy = PPOPolicy(vec.single_observation_space, vec.single_action_space, cfg, 0)
    collector = make_collector(vec, policy, cfg, 0, steps)
    collector.collect(0)
    return collector


def actor_alone(envs: int, steps: int) -> float:
    collector = pong_collector(envs, steps)
    started = time.perf_counter()
    chunk = collector.collect(0)
    return chunk.env_steps * SKIP / (time.perf_counter() - started)


def system(
    actors: int, device: str, seconds: float, extra: list[str], runs_root: Path, module: str = "surreal"
) -> dict[str, Any]:
    """The system run's figures; `module`: as `WatchedRun` takes it."""
    overrides = [
        "preset=ppo-atari",
        f"env={ENV_ID}",
        f"actors={actors}",
        f"device={device}",
        "steps=1000000000",
        "learner.checkpoint_interval=1000000",
        "learner.checkpoint_interval_s=100000",
        "learner.eval_interval=0",  # the system alone: no evaluator taking cores
        *extra,
    ]
    run = WatchedRun(f"atari-ppo-{actors}-{int(time.time())}", overrides, runs_root, module)
    run.run_for(seconds)
    steady = [row for _, row in run.rows[2:]]
    phases = {p: sum(row.get(f"time_{p}_s", 0.0) for row in steady) for p in ("update", "wait", "io")}
    total = sum(phases.values())
    batch = [row.get("batch_transitions", 0.0) for row in steady]
    return {
        "frames_per_s": round(run.steady_rate(skip_rows=2) * SKIP, 1),
        "updates": len(run.rows),
        "updates_measured": max(0, len(steady) - 1),
        "learner_update_s": round(phases["update"] / len(steady), 3) if steady else float("nan"),
        "learner_wait_share": round(phases["wait"] / total, 3) if total else float("nan"),
        "learner_transitions_per_update_s": round(sum(batch) / phases["update"], 1) if phases["update"] else None,
        "overrides": overrides,
        "run_dir": str(run.run_dir),
    }


def learner_alone(device: str, updates: int, compile: bool, extra: list[str]) -> dict[str, Any]:
    """Transitions per second of `PPOLearner.update` on the experiment's batches (the preset's, with `extra`) of packed
    Pong chunks: `batch_size` transitions in chunks of `actor.chunk_steps` x `topology.envs_per_actor`."""
    import torch

    from surreal.algos.ppo.config import PPOConfig
    from surreal.algos.ppo.learner import PPOLearner
    from surreal.config import algo_config, load_config
    from surreal.envs import make_vec_env
    from surreal.proto.wire import PER_CHUNK, Chunk
    from surreal.runtime.frame_chunks import NEXT_INDEX, OBS_INDEX

    experiment = load_config(["preset=ppo-atari", f"env={ENV_ID}", *extra])
    cfg = cast(PPOConfig, algo_config(experiment))
    if device == "cpu":
        torch.set_num_threads(1)  # as the learner role runs on a CPU (learner.torch_threads)
    vec = make_vec_env(ENV_ID, 1, 0)
    spaces = vec.single_observation_space, vec.single_action_space
    vec.close()
    learner = PPOLearner(*spaces, cfg, torch.device(device), compile=compile)
    T, K = experiment.actor.chunk_steps, experiment.topology.envs_per_actor
    per_batch = max(1, cfg.batch_size // (T * K))
    rng = np.random.default_rng(0)
    base = (np.arange(K) * (T + 4))[None, :, None] + np.arange(T)[:, None, None] + np.arange(4)[None, None, :]

    def chunk() -> Chunk:
        arrays = {
            PER_CHUNK: {"frames": rng.integers(0, 256, (K * (T + 4), 84, 84), np.uint8)},
            OBS_INDEX: base.astype(np.int32),
            NEXT_INDEX: (base + 1).astype(np.int32),
            "rewards": rng.choice(np.array([-1.0, 0.0, 1.0], np.float32), (T, K), p=[0.01, 0.98, 0.01]),
            "terminated": np.zeros((T, K), bool),
            "truncated": np.zeros((T, K), bool),
            "actions": rng.integers(0, int(spaces[1].n), (T, K)),  # type: ignore[attr-defined]  # Discrete
            "logprobs": np.full((T, K), -np.log(6), np.float32),
        }
        return Chunk(arrays, 0, 0)

    batches = [[chunk() for _ in range(per_batch)] for _ in range(updates + 1)]
    learner.update(batches[0], 0.0)  # warm-up (and compilation)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    times = []
    for i, batch in enumerate(batches[1:]):
        started = time.perf_counter()
        learner.update(batch, i / updates)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    per_update, transitions = statistics.median(times), per_batch * T * K
    return {
        "device": device,
        "compile": compile and learner.compile,
        "autocast": cfg.autocast,
        "batch_transitions": transitions,
        "minibatch_size": cfg.minibatch_size,
        "update_epochs": cfg.update_epochs,
        "update_s_median": round(per_update, 4),
        "transitions_per_s": round(transitions / per_update, 1),
        "samples_per_s": round(transitions * cfg.update_epochs / per_update, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=180.0, help="the system run's window")
    parser.add_argument("--raw-frames", type=int, default=60_000, help="emulator frames per raw process")
    parser.add_argument("--raw-cores", type=int, help="raw processes, one pinned to each core (default: every core)")
    parser.add_argument("--actor-steps", type=int, default=128, help="steps of the preset's 8 envs for actor_alone")
    parser.add_argument("--learner-updates", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="learner.compile for the system and learner_alone")
    parser.add_argument("--autocast", choices=["bf16"], help="algo.autocast for the system and learner_alone")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs")
    parser.add_argument("overrides", nargs="*", help="surreal run overrides on top of the preset (both measurements)")
    args = parser.parse_intermixed_args()
    cores = list(range(args.raw_cores or os.cpu_count() or 1))
    algo = [f"algo.autocast={args.autocast}"] if args.autocast else []
    extra = (["learner.compile=true"] if args.compile else []) + algo + args.overrides

    def raw() -> float:
        return round(in_processes("raw", cores, frames=args.raw_frames, seed=0), 1)

    raw_before = raw()
    print(f"raw before: {raw_before:,.0f} frames/s on {len(cores)} cores", flush=True)
    alone = round(in_spawned_process(actor_alone, 8, args.actor_steps, timeout_s=900), 1)
    print(f"actor alone: {alone:,.0f} frames/s", flush=True)
    run = system(args.actors, args.device, args.seconds, extra, args.runs_root)
    print(f"system: {run['frames_per_s']:,.0f} frames/s over {run['updates_measured']} updates", flush=True)
    raw_after = raw()
    print(f"raw after: {raw_after:,.0f} frames/s", flush=True)
    learner = learner_alone(args.device, args.learner_updates, args.compile, algo + args.overrides)
    print(f"learner alone: {learner['transitions_per_s']:,.0f} transitions/s", flush=True)
    raw_mean = (raw_before + raw_after) / 2
    emit(
        {
            "bench": "atari_ppo",
            "machine": machine_at_end(),
            "shared_box": "other work may run on the same cores: trust the same-run ratio, not an absolute rate",
            "game": ENV_ID,
            "frames": "emulator frames (an env step is 4)",
            "preset": "ppo-atari (CleanRL's ppo_atari: 8 envs x 128 steps, 4 minibatches, 4 epochs)",
            "overrides": args.overrides,
            "actors": args.actors,
            "device": args.device,
            "raw_cores": len(cores),
            "raw_frames_per_s": {"before": raw_before, "after": raw_after, "mean": round(raw_mean, 1)},
            "actor_alone_frames_per_s": alone,
            "system": run,
            "efficiency": round(run["frames_per_s"] / raw_mean, 4),
            "actor_alone_over_raw_1core_share": round(alone / (raw_mean / len(cores)), 3),
            "learner_alone": learner,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
