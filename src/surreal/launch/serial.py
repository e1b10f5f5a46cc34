"""Serial mode (after Sample Factory's): every role of an experiment in one process, no sockets.

The very `ActorCore`s and `LearnerCore` the processes run, wired with in-process ports (one replay shard in
memory, the latest parameter blob in memory) and stepped in turn on one thread: the learner takes what is
there, and when it can do nothing the actors step, each held by its flow-control throttle as in a
distributed run. Runs are deterministic for a seed, so algorithm behaviour is tested quickly and exactly; the
multi-process path is tested separately.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from surreal.config import ExperimentConfig
from surreal.envs import env_steps_bound
from surreal.metrics import RoleMetrics
from surreal.replay.shard import ReplayShard
from surreal.roles.actor import ActorCore
from surreal.roles.evaluation import finish
from surreal.roles.learner import LearnerCore
from surreal.roles.ports import InProcessParams, InProcessReplay


class SerialStalled(RuntimeError):
    """Neither the learner nor any actor could make progress: a flow-control rule holds everyone."""


def run_serial(cfg: ExperimentConfig, run_dir: Path, log: logging.Logger | None = None) -> dict[str, Any]:
    """Train until `total_env_steps`, evaluate, and return eval.json's content (the run folder is `run_dir`)."""
    log = log or logging.getLogger("surreal.serial")
    # No actor can be lost here, and wall-clock time must not change a run: actors never overdraw.
    cfg = replace(cfg, actor=replace(cfg.actor, overdraft_after_s=0.0))
    shard = ReplayShard.of(cfg.replay, cfg.seed, max_steps_per_unit=env_steps_bound(cfg))
    replay = InProcessReplay(shard, ready_at=cfg.algo.batch_size)  # off-policy: learn once a minibatch is held
    params = InProcessParams()
    learner = LearnerCore(cfg, run_dir, replay, params, RoleMetrics("learner", 0), resume=False, log=log)
    actors = [ActorCore(cfg, i, replay, params, RoleMetrics("actor", i)) for i in range(cfg.topology.actors)]
    try:
        learner.publish()
        while not learner.reached_total:
            if learner.step(timeout_s=0.0):
                continue
            if not any([actor.step() for actor in actors]):  # every actor steps: a list, not a generator
                raise SerialStalled(f"no progress at {learner.counters.env_steps} env steps")
        return finish(learner)
    finally:
        for actor in actors:
            actor.close()
        learner.close()
