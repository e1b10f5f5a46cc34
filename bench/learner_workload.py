"""The learner benchmarks' workload (bench/learner.py, bench/learner_group.py's ranks): real HalfCheetah-v5
experience, replay-shaped samples of it, each row's config, and the machine a result names."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from surreal.algos import get_algorithm
from surreal.algos.sac_config import SACConfig
from surreal.config import algo_config, load_config
from surreal.config.schema import DDPGConfig, PPOConfig
from surreal.envs import make_vec_env
from surreal.proto.wire import IDS, SLOTS, Chunk

ENV_ID = "HalfCheetah-v5"
CHUNK_STEPS = 256
ACTORS = 2


def collect_chunks(algo: str, cfg: Any, num_chunks: int) -> tuple[Any, Any, list[Chunk]]:
    """`num_chunks` real chunks of [CHUNK_STEPS, 1] from ACTORS actors taking turns, as replay hands them over."""
    module = get_algorithm(algo)
    collectors = []
    for actor in range(ACTORS):
        envs = make_vec_env(ENV_ID, 1, seed=cfg.seed + 100 * actor)
        policy = module.make_policy(envs.single_observation_space, envs.single_action_space, cfg, actor, ACTORS)
        collectors.append((envs, module.make_collector(envs, policy, cfg, actor, CHUNK_STEPS)))
    chunks = [collectors[i % ACTORS][1].collect(0) for i in range(num_chunks)]
    spaces = collectors[0][0].single_observation_space, collectors[0][0].single_action_space
    for envs, _ in collectors:
        envs.close()
    return *spaces, chunks


def transition_batches(chunks: list[Chunk], batch: int, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Uniform samples of `batch` transitions, the arrays a replay sample reply carries."""
    pool = {
        k: np.concatenate([c.arrays[k].reshape(-1, *c.arrays[k].shape[2:]) for c in chunks]) for k in chunks[0].arrays
    }
    rng = np.random.default_rng(seed)
    size = len(pool["rewards"])
    samples = (rng.integers(0, size, batch, dtype=np.int64) for _ in range(count))
    return [{**{k: v[idx] for k, v in pool.items()}, SLOTS: idx, IDS: idx.astype(np.uint64) + 1} for idx in samples]


def ppo_config(large: bool) -> PPOConfig:
    """PPO's defaults (CleanRL's: 2,048 transitions, minibatches of 64, 10 epochs), or with `large` the second row
    (4,096, minibatches of 1,024, 2 epochs: Sample Factory's MuJoCo setting), where a step's work grows more with
    its samples than a tiny minibatch's fixed per-step cost does."""
    if large:
        return PPOConfig(seed=1, batch_size=4096, minibatch_size=1024, update_epochs=2)
    return PPOConfig(seed=1)


def algo_module(algo: str) -> str:
    """The algorithm a row's name runs: TD3 is DDPG with its switches, CrossQ is SAC with its."""
    return {"td3": "ddpg", "crossq": "sac"}.get(algo, algo)


def offpolicy_config(algo: str) -> tuple[DDPGConfig | SACConfig, list[str]]:
    """The config of a row and the overrides that make it (DDPG's and SAC's defaults, TD3's and CrossQ's switches)."""
    switches = {"ddpg": [], "td3": ["algo.twin_critics=true", "algo.target_policy_noise=0.2"], "sac": []}
    switches["crossq"] = ["preset=crossq"]  # conf/preset/crossq.yaml: the paper's 2048-wide critics and the rest
    cfg = algo_config(load_config([f"algo={algo_module(algo)}", "seed=1", *switches[algo]], tasks=False))
    return cast(DDPGConfig | SACConfig, cfg), switches[algo]


def machine(device: torch.device) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if "model name" in line]
        cpu = names[0] if names else cpu
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu
    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "device_name": name,
    }
