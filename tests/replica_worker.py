"""One rank of a data-parallel update, for tests/test_data_parallel.py (run as a script by it, one process per rank,
torch.distributed over gloo), and the cases both that rank and the test's single learner run.

    RANK=r WORLD_SIZE=k MASTER_ADDR=127.0.0.1 MASTER_PORT=p python tests/replica_worker.py ALGO OUT.npz

A case makes the learner, feeds it the same synthetic experience a fixed seed makes and returns its parameters,
statistics and priorities as arrays; a rank of K gets the whole batch (on-policy: the leader broadcasts it) or its
share of every minibatch (off-policy: each rank samples its own), as the learner role hands them over.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from gymnasium import spaces

from surreal.algos.ddpg import algorithm as ddpg
from surreal.algos.ddpg.config import DDPGConfig
from surreal.algos.ppo import learner as ppo
from surreal.algos.ppo.algorithm import make_learner as make_ppo_learner
from surreal.algos.ppo.config import PPOConfig
from surreal.algos.replica import ALONE, Replica, end_group_process
from surreal.algos.sac import algorithm as sac
from surreal.algos.sac.config import SACConfig
from surreal.proto.wire import IDS, SLOTS, WEIGHTS, Chunk

CPU = torch.device("cpu")
OBS, ACT = 5, 2
UPDATES = 2
STEPS = 4  # off-policy: minibatches per sample
BATCH = 64  # off-policy: transitions per minibatch, all ranks together


def ppo_chunks(update: int) -> list[Chunk]:
    """Four chunks of [64, 2] from two actors (a 512-transition batch) with episode ends inside."""
    rng = np.random.default_rng(100 + update)
    chunks = []
    for i in range(4):
        t, k = 64, 2
        arrays = {
            "obs": rng.normal(1.0, 2.0, (t, k, OBS)).astype(np.float32),
            "next_obs": rng.normal(1.0, 2.0, (t, k, OBS)).astype(np.float32),
            "rewards": rng.normal(0.5, 1.0, (t, k)).astype(np.float32),
            "terminated": rng.random((t, k)) < 0.02,
            "truncated": rng.random((t, k)) < 0.02,
            "actions": rng.normal(0.0, 1.0, (t, k, ACT)).astype(np.float32),
            "logprobs": rng.normal(-2.0, 0.3, (t, k)).astype(np.float32),
        }
        chunks.append(Chunk(arrays, version=update, actor=i % 2))
    return chunks


def ppo_case(replica: Replica, updates: int) -> dict[str, np.ndarray]:
    cfg = PPOConfig(
        seed=3, batch_size=512, minibatch_size=64, update_epochs=2, norm_adv=True, clip_vloss=True, ent_coef=0.01
    )
    box = spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    learner = make_ppo_learner(box, spaces.Box(-1.0, 1.0, (ACT,), np.float32), cfg, CPU, replica=replica)
    return ppo_result(learner, [ppo_chunks(u) for u in range(updates)])


def recurrent_ppo_case(replica: Replica, updates: int) -> dict[str, np.ndarray]:
    """An LSTM policy's sequence update: 8 env columns of T=32 steps collected on InvertedPendulumNoVel-v5 (its
    episodes end inside chunks), minibatches of 2 whole sequences, 1 per rank of 2."""
    from test_ppo_recurrent import chunks_of, config, spaces_of

    cfg = config("lstm")
    learner = make_ppo_learner(*spaces_of(), cfg, CPU, replica=replica)
    torch.manual_seed(1)  # the collecting policies' initial weights, alike in every process
    batches = [chunks_of(cfg, 4) for _ in range(updates)]
    return ppo_result(learner, batches)


def ppo_result(learner: Any, batches: list[list[Chunk]]) -> dict[str, np.ndarray]:
    stats = [learner.update(chunks, 0.1 * u) for u, chunks in enumerate(batches)]
    out = {f"param/{k}": v.numpy() for k, v in learner.model.state_dict().items()}
    out["obs_rms/mean"], out["ret_rms/var"] = learner.obs_rms.mean, np.asarray(learner.ret_rms.var)
    out["stats"] = np.array([[s[k] for k in (*ppo.STEP_STATS, "explained_variance")] for s in stats])
    return out


def transitions(update: int, weighted: bool) -> dict[str, np.ndarray]:
    """One sample of STEPS minibatches of BATCH Pendulum-shaped transitions, as a single learner gets it."""
    rng = np.random.default_rng(200 + update)
    n = STEPS * BATCH
    out = {
        "obs": rng.normal(0.0, 1.0, (n, 3)).astype(np.float32),
        "actions": rng.uniform(-2.0, 2.0, (n, 1)).astype(np.float32),
        "rewards": rng.normal(-1.0, 1.0, n).astype(np.float32),
        "next_obs": rng.normal(0.0, 1.0, (n, 3)).astype(np.float32),
        "discounts": np.full(n, 0.99, np.float32) * (rng.random(n) > 0.05),
        SLOTS: np.arange(n, dtype=np.int64),
        IDS: np.arange(n, dtype=np.uint64) + 1,
    }
    if weighted:
        out[WEIGHTS] = rng.uniform(0.2, 1.0, n).astype(np.float32)
    return out


def rank_share(arrays: dict[str, np.ndarray], replica: Replica) -> dict[str, np.ndarray]:
    """What rank r of K samples: its 1/K of every minibatch (the single learner's minibatch is the ranks' shares
    side by side)."""
    if replica.size == 1:
        return arrays
    each = BATCH // replica.size
    return {
        k: v.reshape(STEPS, replica.size, each, *v.shape[1:])[:, replica.rank].reshape(-1, *v.shape[1:])
        for k, v in arrays.items()
    }


def offpolicy_case(algo: str, replica: Replica, updates: int) -> dict[str, np.ndarray]:
    obs_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
    act_space = spaces.Box(-2.0, 2.0, (1,), np.float32)
    learner: Any
    if algo == "td3":  # DDPG with TD3's switches: twin critics, a delayed actor, target smoothing noise
        cfg = DDPGConfig(seed=4, batch_size=BATCH, twin_critics=True, target_policy_noise=0.2, max_grad_norm=1.0)
        learner = ddpg.make_learner(obs_space, act_space, cfg, CPU, replica=replica)
        nets = {"actor": learner.actor, "critics": learner.critics, "critics_target": learner.critics_target}
    else:
        scfg = SACConfig(seed=4, batch_size=BATCH, hidden_sizes=[32, 32], critic_hidden_sizes=[32, 32])
        learner = sac.make_learner(obs_space, act_space, scfg, CPU, replica=replica)
        nets = {"actor": learner.actor, "critics": learner.critics}
    out: dict[str, np.ndarray] = {}
    rows = []
    for u in range(updates):
        stats, priorities = learner.update(rank_share(transitions(u, weighted=True), replica), STEPS)
        rows += [[s[k] for k in learner.step_stats] for s in stats]
        out[f"priorities/{u}"] = priorities
    for name, net in nets.items():
        out.update({f"param/{name}/{k}": v.numpy() for k, v in net.state_dict().items()})
    if algo == "sac":
        out["param/log_alpha"] = learner.log_alpha.detach().numpy()
    out["stats"] = np.array(rows)
    return out


def run_case(algo: str, replica: Replica | None, updates: int = UPDATES) -> dict[str, np.ndarray]:
    """`updates` updates of `algo`'s learner (0: its parameters as initialized), alone (None) or as rank `replica`."""
    replica = ALONE if replica is None else replica
    torch.manual_seed(0)
    if algo == "ppo":
        return ppo_case(replica, updates)
    if algo == "ppo-lstm":
        return recurrent_ppo_case(replica, updates)
    return offpolicy_case(algo, replica, updates)


def main() -> None:
    algo, out = sys.argv[1:3]
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=size, timeout=timedelta(seconds=120))
    try:
        np.savez(out, **run_case(algo, Replica(rank, size)))
    finally:
        dist.destroy_process_group()
    end_group_process(0)


if __name__ == "__main__":
    main()
