"""The learner's device: `device=auto` means the faster one for this network and batch, measured.

Tiny MLPs with small minibatches can update faster on one CPU core than through GPU kernel launches (the
throughput benchmark's GPU learner was slower than a core), so "a GPU is present" is not the rule: with CUDA
present, one update of a throwaway learner is timed on each device, on real experience, and the faster wins.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import torch

from surreal.algos import get_algorithm
from surreal.config import ExperimentConfig, algo_config
from surreal.envs import make_vec_env
from surreal.runtime.regimes import regime_of


def choose_device(
    cfg: ExperimentConfig,
    update_seconds: Callable[[torch.device], float],
    log: logging.Logger,
    cuda_available: bool | None = None,
) -> torch.device:
    """`cfg.device`, or for `auto` the faster of the CPU and CUDA (when present) as `update_seconds` times them
    (module docstring); the choice is logged."""
    if cfg.device != "auto":
        return torch.device(cfg.device)
    if not (torch.cuda.is_available() if cuda_available is None else cuda_available):
        log.info("device=auto: no CUDA device, learning on cpu")
        return torch.device("cpu")
    seconds = {name: update_seconds(torch.device(name)) for name in ("cpu", "cuda")}
    chosen = min(seconds, key=lambda name: seconds[name])
    log.info("device=auto: %s (one update: cpu %.4f s, cuda %.4f s)", chosen, seconds["cpu"], seconds["cuda"])
    return torch.device(chosen)


def update_seconds(cfg: ExperimentConfig, device: torch.device, repeats: int = 3) -> float:
    """The median time of one update of a throwaway learner on `device`, on one batch of real experience
    collected with a fresh policy (after one untimed update: allocation, compilation)."""
    algo = get_algorithm(cfg.algo.name)
    envs = make_vec_env(cfg.env.id, cfg.topology.envs_per_actor, cfg.seed, cfg.env.kwargs)
    spaces = envs.single_observation_space, envs.single_action_space
    acfg = algo_config(cfg)
    collector = algo.make_collector(envs, algo.make_policy(*spaces, acfg, 0, 1), acfg, 0, cfg.actor.chunk_steps)
    regime = regime_of(cfg)
    size = regime.sample_size  # off-policy: one call steps through a whole sample's minibatches
    chunks, units = [], 0
    while units < size:
        chunks.append(collector.collect(0))
        units += chunks[-1].size
    envs.close()
    learner = algo.make_learner(*spaces, acfg, device, compile=cfg.learner.compile)
    update = regime.trial_update(learner, chunks)
    times = []
    for _ in range(repeats + 1):
        started = time.perf_counter()
        update()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
    return float(np.median(times[1:]))
