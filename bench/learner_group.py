"""Data-parallel learner speed (`learner.replicas=K`): updates per second of K ranks against one learner alone.

    python -m bench.learner --replicas 1 2 [--algo ppo|ddpg|td3|sac] [--device cpu|cuda] [--updates N] [--rounds R]
                            [--threads T] [--large] [--out PATH]
    python -m bench.learner_group ...   (the same)

Each rank is a process of its own with torchrun's variables, in a process group on 127.0.0.1 (gloo on the CPU,
NCCL on CUDA, each rank on cuda:<rank>), running the learner role's learner as that rank (algos/replica.py), the
gradients all-reduced every minibatch step:

- ppo (the default): every rank takes the whole batch and computes 1/K of every minibatch. The batch is real
  experience, collected on HalfCheetah-v5 by every rank alike (same seeds, same chunks: bench/learner_workload.py's
  `collect_chunks`; the PPO defaults: 2,048 transitions, minibatches of 64, 10 epochs; with `--large` 4,096
  transitions, minibatches of 1,024, 2 epochs). A row's rate is whole-batch updates per second.
- ddpg, td3, sac (off-policy): every rank steps on samples of its own, as a rank of the role does (each samples its
  1/K of every minibatch from the replay): samples of `learner.minibatches_per_sample` minibatches of its share of
  the algorithm's default batch (256), drawn from real HalfCheetah-v5 transitions with the rank's own seed
  (bench/learner_workload.py's `transition_batches`), one call of the update per sample. A row's rate is gradient
  steps of the whole minibatch per second.

Rows: `alone` (the learner as `learner.replicas=1` runs it, no process group), then each K of `--replicas` as a
group of K (K=1: a group of one, what being a rank costs: the all-reduce, and no CUDA graph). A round starts
every row's processes once, one row after another, so the rows share the machine's load; the rate is the median
round's (timed on rank 0 between barriers, after one untimed update). `ratio` is a row's rate over `alone`'s,
`speedup_2_over_1` K=2's over K=1's. A group needs a core (or a GPU) per rank to gain: on a 2-core box shared with
other work it loses, which is what it then reports.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist

from bench import learner_workload as workload
from bench._runs import emit
from surreal.algos import get_algorithm
from surreal.algos.interface import OffPolicyLearner, OnPolicyLearner
from surreal.algos.replica import ALONE, Replica, end_group_process
from surreal.config.schema import LearnerConfig
from surreal.launch.local import free_ports
from surreal.settings import group_env

RANK_TIMEOUT_S = 900.0  # a rank process's whole life: only catches a hang
GROUP_TIMEOUT_S = 300.0  # every collective's


def rank_main(args: argparse.Namespace) -> None:
    """One rank (or the learner alone, `--size 0`): collect, build, one untimed update, then `--updates` timed;
    rank 0 writes {"updates_per_s": ...} to `--result` (off-policy: gradient steps per second)."""
    torch.set_num_threads(args.threads)
    cfg: Any
    if args.algo == "ppo":
        cfg = workload.ppo_config(args.large)
        obs_space, act_space, chunks = workload.collect_chunks("ppo", cfg, cfg.batch_size // workload.CHUNK_STEPS)
    else:
        cfg = workload.offpolicy_config(args.algo)[0]
        obs_space, act_space, chunks = workload.collect_chunks(workload.algo_module(args.algo), cfg, 8)
    replica, grouped = ALONE, args.size > 0
    if grouped:
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if args.device == "cuda" else torch.device("cpu")
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend, rank=rank, world_size=size, timeout=timedelta(seconds=GROUP_TIMEOUT_S))
        replica = Replica(rank, size)
    else:
        rank, device = 0, torch.device(args.device)
    algo = get_algorithm(workload.algo_module(args.algo))
    learner = algo.make_learner(obs_space, act_space, cfg, device, replica=replica)
    update: Callable[[int], object]
    per_call = 1
    if args.algo == "ppo":
        chunk_learner = cast(OnPolicyLearner, learner)
        update = lambda turn: chunk_learner.update(chunks, 0.5)  # noqa: E731
    else:  # this rank's own samples: its share of every minibatch, its own draws
        off_policy = cast(OffPolicyLearner, learner)
        per_call = LearnerConfig().minibatches_per_sample
        size = max(args.size, 1)
        samples = workload.transition_batches(chunks, per_call * cfg.batch_size // size, 8, cfg.seed + 1000 * rank)
        update = lambda turn: off_policy.update(samples[turn % len(samples)], per_call)  # noqa: E731

    def barrier() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if grouped:
            dist.barrier()

    update(0)
    barrier()
    started = time.perf_counter()
    for turn in range(args.updates):
        update(turn + 1)  # ends in a host sync (its statistics), on every rank
    barrier()
    elapsed = time.perf_counter() - started
    if rank == 0:
        rate = args.updates * per_call / elapsed
        Path(args.result).write_text(json.dumps({"updates_per_s": rate, "seconds": elapsed}))
    if grouped:
        dist.destroy_process_group()
        end_group_process(0)


def run_row(size: int, args: argparse.Namespace, folder: Path) -> float:
    """One start of a row's processes (`size` ranks; 0: the learner alone); its updates per second."""
    result = folder / f"result-{size}.json"
    result.unlink(missing_ok=True)
    common = [sys.executable, "-m", "bench.learner_group", "--rank-of", str(size), "--result", str(result)]
    common += ["--updates", str(args.updates), "--threads", str(args.threads), "--device", args.device]
    common += ["--algo", args.algo]
    common += ["--large"] if args.large else []
    port = free_ports(1)[0]
    procs = []
    for rank in range(max(size, 1)):
        env = {**os.environ, **(group_env(rank, size, "127.0.0.1", port) if size else {})}
        procs.append(subprocess.Popen(common, env=env))
    try:
        for proc in procs:
            if proc.wait(timeout=RANK_TIMEOUT_S) != 0:
                raise RuntimeError(f"a rank of the group of {size} exited with {proc.returncode}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return float(json.loads(result.read_text())["updates_per_s"])


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)  # as each rank runs (machine() reports it)
    sizes = [0, *args.replicas]
    rates: dict[int, list[float]] = {size: [] for size in sizes}
    with tempfile.TemporaryDirectory(prefix="bench-learner-group-") as folder:
        for _ in range(args.rounds):
            for size in sizes:
                rates[size].append(run_row(size, args, Path(folder)))
    median = {size: statistics.median(values) for size, values in rates.items()}
    shape: dict[str, Any]
    if args.algo == "ppo":
        ppo = workload.ppo_config(args.large)
        batch_size = ppo.batch_size
        shape = {"minibatch_size": ppo.minibatch_size, "update_epochs": ppo.update_epochs}
    else:  # a rate of gradient steps, each on a minibatch of batch_size (1/K of it sampled by each rank)
        batch_size = workload.offpolicy_config(args.algo)[0].batch_size
        shape = {"unit": "gradient steps", "minibatches_per_sample": LearnerConfig().minibatches_per_sample}
    rows = [
        {
            "row": "alone" if size == 0 else f"replicas={size}",
            "replicas": size,
            "updates_per_s": round(median[size], 4),
            "samples_per_s": round(median[size] * batch_size, 1),
            "ratio": round(median[size] / median[0], 3),
            "rounds": [round(r, 4) for r in rates[size]],
        }
        for size in sizes
    ]
    result: dict[str, Any] = {
        "benchmark": "learner_group",
        "algo": args.algo,
        "env": workload.ENV_ID,
        "batch_size": batch_size,
        **shape,
        "updates_per_round": args.updates,
        "backend": "nccl" if args.device == "cuda" else "gloo",
        "machine": workload.machine(torch.device(args.device)),
        "rows": rows,
    }
    if 1 in median and 2 in median:
        result["speedup_2_over_1"] = round(median[2] / median[1], 3)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=5, help="timed updates per row and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (each starts every row once)")
    parser.add_argument("--large", action="store_true", help="ppo: batch 4,096, minibatches of 1,024, 2 epochs")
    parser.add_argument("--algo", default="ppo", choices=["ppo", "ddpg", "td3", "sac"], help="whose update to time")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2], help="group sizes to measure")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank (the learner role's: 1)")
    parser.add_argument("--out", type=Path, help="write the JSON object to this file")
    parser.add_argument("--rank-of", type=int, help=argparse.SUPPRESS)  # internal: run as one rank of this size
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_of is not None:
        args.size = args.rank_of
        rank_main(args)
        return
    if any(k < 1 for k in args.replicas):
        parser.error("--replicas takes group sizes >= 1")
    if args.device == "cuda" and max(args.replicas) > torch.cuda.device_count():
        parser.error(f"--replicas {max(args.replicas)} needs as many GPUs (found {torch.cuda.device_count()})")
    emit(measure(args), args.out)


if __name__ == "__main__":
    main()
