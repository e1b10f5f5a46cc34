"""One rank of an off-policy learner group through the learner role's code, for tests/test_learner_group.py (run as a
script, one process per rank, torch.distributed over gloo on 127.0.0.1):

    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p python tests/offpolicy_group_worker.py ALGO RUN_DIR OUT.npz

ALGO is td3 or sac. Rank 0 is roles/learner.py's `LearnerCore` with the group's `LeaderLearner` (its replay-ratio
feed decides every update and orders it); rank 1 follows (roles/learner_group.py's `follow`) as the regime's
`SampleFollower`. Each rank's replay is scripted: it hands that rank its own samples, the rank's share of every
minibatch of `replica_worker.transitions` (what a single learner would sample), and records the priorities the rank
sends home. Each rank writes its parameters and those priorities to OUT.npz.
"""

from __future__ import annotations

import logging
import sys
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch

from replica_worker import rank_share, transitions
from surreal.algos.replica import Replica, end_group_process
from surreal.config import load_config
from surreal.metrics import RoleMetrics
from surreal.proto.wire import GroupOrder, SampleReply, ShardReport, TransitionReply
from surreal.replay.shard import message_limits
from surreal.roles.learner import LearnerCore
from surreal.roles.learner_group import (
    FollowerCore,
    GroupPlace,
    LeaderLearner,
    LearnerGroup,
    follow,
    make_rank_learner,
    place_from_env,
)
from surreal.roles.ports import InProcessParams
from surreal.runtime.regimes import regime_of

SAMPLES = 2  # samples of replica_worker.STEPS minibatches each rank steps through
# Pendulum's spaces, prioritized replay; minibatches of replica_worker.BATCH; a replay ratio that allows every step at
# once; no checkpoint but the first. TD3: DDPG's twin critics, delayed actor and target smoothing; SAC: its defaults
# (twin critics, a target network, the actor and the temperature every step).
ALGOS = {
    "td3": ["algo=ddpg", "algo.twin_critics=true", "algo.target_policy_noise=0.2", "algo.max_grad_norm=1.0"],
    "sac": ["algo=sac", "algo.hidden_sizes=[32,32]", "algo.critic_hidden_sizes=[32,32]"],
}
OVERRIDES = [
    "env=Pendulum-v1",
    "seed=4",
    "algo.batch_size=64",
    "algo.learning_starts=0",
    "learner.minibatches_per_sample=4",
    "learner.prefetch=4",
    "replay.mode=prioritized",
    "learner.replicas=2",
    "learner.checkpoint_interval=1000",
]


class ScriptedReplay:
    """A `BatchesIn` handing out this rank's samples in order (one per call, then None), recording the priorities
    sent home."""

    shards = 1

    def __init__(self, replica: Replica) -> None:
        self.replies: deque[SampleReply] = deque(
            TransitionReply(ShardReport(0, 100_000 * (u + 1)), rank_share(transitions(u, True), replica))
            for u in range(SAMPLES)
        )
        self.priorities: list[tuple[np.ndarray, np.ndarray]] = []

    def next(self, batch_size: int, timeout_s: float) -> SampleReply | None:
        del batch_size, timeout_s
        return self.replies.popleft() if self.replies else None

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        self.priorities.append((np.asarray(slots), np.asarray(priorities)))

    def drain(self, timeout_s: float) -> list[SampleReply]:
        del timeout_s
        return []

    def close(self) -> None:
        pass


def main(algo: str, run_dir: Path, out: Path) -> None:
    torch.set_num_threads(1)
    cfg = load_config([*ALGOS[algo], *OVERRIDES])
    place = place_from_env(cfg)
    assert isinstance(place, GroupPlace)
    cpu = torch.device("cpu")
    group = LearnerGroup(place, cpu, 120.0, message_limits(cfg.replay))
    replay = ScriptedReplay(group.replica)
    log = logging.getLogger("offpolicy_group_worker")
    spaces: Any = None
    learner: Any
    if group.leader:
        from surreal.envs import env_spaces

        spaces = env_spaces(cfg)
        leader = LeaderLearner(make_rank_learner(cfg, spaces, cpu, group), group, regime_of(cfg))
        core = LearnerCore(cfg, run_dir, replay, InProcessParams(), RoleMetrics("learner", 0), False, log, spaces,
                           leader, device=cpu)  # fmt: skip
        group.share_state(core.algo_learner)
        for _ in range(1000):  # bounded: each step takes a sample or learns from one
            if core.counters.updates >= SAMPLES * cfg.learner.minibatches_per_sample:
                break
            core.step(0.0)
        group.send(GroupOrder("finish"))
        learner = leader.learner
        updates = core.counters.updates
        core.close()
    else:
        from surreal.envs import env_spaces

        learner = make_rank_learner(cfg, env_spaces(cfg), cpu, group)
        group.share_state(learner)
        work = regime_of(cfg).follower(learner, lambda: replay, shards=1)
        metrics = RoleMetrics("learner", group.place.rank)
        assert follow(group, FollowerCore(group.place.rank, work, log, metrics)) == "finish"
        work.close()  # the last sample's priorities go home
        assert work.sampled == SAMPLES * cfg.learner.minibatches_per_sample * 32
        updates = learner.updates
    group.close()
    result = {f"param/{k}": v.numpy() for k, v in learner.state_dict()["critics"].items()}
    result.update({f"param/actor.{k}": v.numpy() for k, v in learner.state_dict()["actor"].items()})
    result["updates"] = np.array(updates)
    slots = np.concatenate([s for s, _ in replay.priorities])
    priorities = np.concatenate([p for _, p in replay.priorities])
    result["priority_slots"], result["priorities"] = slots, priorities
    np.savez(out, **result)
    end_group_process(0)  # after group.close(): a gloo rank's exit (algos/replica.py)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
