"""Serial mode (after Sample Factory's): every role of an experiment in one process, no sockets.

The very cores the processes run (`Actor`s' `ActorCore`, `LearnerCore`, the replay's and the ps's cores in the
in-process ports) on one replay shard in memory, stepped in turn on one thread: the learner takes what is
there, and when it can do nothing the actors step, each held by its flow-control throttle as in a
distributed run. Runs are deterministic for a seed, so algorithm behaviour is tested quickly and exactly; the
multi-process path is tested separately.

With `learner.eval_interval` (below the budget) the evaluator's core runs here too, after each learner step, writing
evals.jsonl as the process does. It is built after the learner and the actors, with the process-wide generators put
back as they were, and the roles sample from generators of their own, so a run trains the same with it as without it,
its checkpoints too (tested).

A serial run stopped and resumed is the run never stopped, bit for bit: every learner checkpoint carries the
rest of the world (`SerialWorld`: each actor's envs mid-episode, collector, sampling generators and throttle,
the replay shard's contents and generator, the blob the ps holds, the process-wide generators), so
`--resume` continues from exactly where it stopped (tests/test_contract.py, every algorithm).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypedDict, cast, final

import numpy as np
import torch

from surreal.config import ConfigError, ExperimentConfig
from surreal.envs import env_spaces, env_steps_bound
from surreal.envstate import EnvStateUnsupported
from surreal.metrics import RoleMetrics
from surreal.replay.shard import ReplayShard, ShardCheckpoint
from surreal.roles.actor import Actor, ActorState, SavedParams, loaded_params, saved_params
from surreal.roles.evaluator import EvaluatorCore
from surreal.roles.learner import LearnerCore, LearnerDriver
from surreal.roles.loop import InlineLoop
from surreal.roles.ports import InProcessActorPorts, InProcessParams, InProcessReplay
from surreal.run.preflight import with_replay_layout


class SerialStalled(RuntimeError):
    """Neither the learner nor any actor could make progress: a flow-control rule holds everyone."""


class SerialResumeError(RuntimeError):
    """The checkpoint to resume from holds no serial world (a process learner wrote it)."""


class NumpyRngState(TypedDict):
    """NumPy's legacy generator (`np.random.get_state`), by name."""

    kind: str
    keys: np.ndarray
    pos: int
    has_gauss: int
    cached: float


class PythonRngState(TypedDict):
    """Python's generator (`random.getstate`), by name."""

    version: int
    words: list[int]
    gauss: float | None


class GlobalRngState(TypedDict):
    torch: np.ndarray
    numpy: NumpyRngState
    python: PythonRngState


@final
class WorldState(TypedDict):
    """A serial run's world besides its learner, in each learner checkpoint (`extra`)."""

    learner_incarnation: str
    ps_blob: SavedParams | None
    replay: ShardCheckpoint
    actors: list[ActorState]
    rng: GlobalRngState


@final
class UnsavedWorld(TypedDict):
    """Why the world could not be saved (an env whose physics cannot be)."""

    unsupported: str


def global_rng_state() -> GlobalRngState:
    """The process-wide generators (torch's, NumPy's legacy one, Python's)."""
    version, words, gauss = random.getstate()
    legacy = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True))
    kind, keys, pos, has_gauss, cached = legacy
    return {
        "torch": torch.get_rng_state().numpy(),
        "numpy": {"kind": kind, "keys": keys, "pos": pos, "has_gauss": has_gauss, "cached": cached},
        "python": {"version": version, "words": list(words), "gauss": gauss},
    }


def load_global_rng_state(state: GlobalRngState) -> None:
    torch.set_rng_state(torch.from_numpy(np.array(state["torch"], np.uint8)))
    n = state["numpy"]
    np.random.set_state((n["kind"], np.array(n["keys"], np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["words"]), p["gauss"]))


class SerialWorld:
    """Everything of a serial run besides the learner's own checkpoint: what `LearnerCheckpoints.extra_state`
    adds to each checkpoint, and what a resumed run loads back."""

    def __init__(self, learner: LearnerCore, actors: list[Actor], shard: ReplayShard, params: InProcessParams) -> None:
        self.learner, self.actors, self.shard, self.params = learner, actors, shard, params

    def state(self) -> WorldState | UnsavedWorld:
        """The world as it stands; where an env's physics cannot be saved (robosuite, Box2D), only why, so the
        run still checkpoints its learner and a resume says it cannot continue this world exactly."""
        try:
            actors = [actor.state() for actor in self.actors]
        except EnvStateUnsupported as unsupported:
            return {"unsupported": str(unsupported)}
        return {
            # A learner's incarnation is a fresh random name per process; the world resumed keeps the one its
            # actors' throttles count under (a new one would reset their shares: a distributed restart).
            "learner_incarnation": self.learner.incarnation,
            "ps_blob": saved_params(self.params.latest),
            "replay": self.shard.state(),
            "actors": actors,
            "rng": global_rng_state(),
        }

    def load(self, state: WorldState | UnsavedWorld) -> None:
        if "unsupported" in state:
            raise SerialResumeError(f"this run's serial state was not saved: {state['unsupported']}")
        if len(state["actors"]) != len(self.actors):
            raise SerialResumeError(
                f"the checkpoint holds {len(state['actors'])} actors, the config {len(self.actors)}"
            )
        self.learner.incarnation = state["learner_incarnation"]
        if (held := loaded_params(state["ps_blob"])) is not None:
            self.params.publish(held.blob, held.arrays)
        self.shard.load_state(state["replay"])
        for actor, actor_state in zip(self.actors, state["actors"], strict=True):
            actor.load_state(actor_state)
        load_global_rng_state(state["rng"])


def run_serial(
    cfg: ExperimentConfig,
    run_dir: Path,
    log: logging.Logger | None = None,
    *,
    resume: bool = False,
    stop_after_updates: int | None = None,
    stop: Callable[[], bool] | None = None,
) -> dict[str, Any] | None:
    """Train until `total_env_steps`, evaluate, and return eval.json's content (the run folder is `run_dir`).
    `stop_after_updates`: stop once the learner has made that many updates instead, checkpointing as a
    stopped learner does, and return None; `stop`: the same once it returns True (asked between steps, from
    another thread: `surreal.Run.stop`). `resume`: continue from the run folder's newest checkpoint."""
    log = log or logging.getLogger("surreal.serial")
    if cfg.topology.inference != "per_actor":
        raise ConfigError("topology.inference=central needs inference workers: run it without --serial")
    if cfg.replay.layout is None:  # a config the launcher did not prepare
        cfg = with_replay_layout(cfg, *env_spaces(cfg))
    shard = ReplayShard.of(cfg.replay, cfg.seed, max_steps_per_unit=env_steps_bound(cfg))
    replay = InProcessReplay(shard, ready_at=cfg.algo.batch_size)  # off-policy: learn once a minibatch is held
    params = InProcessParams()
    learner = LearnerCore(cfg, run_dir, replay, params, RoleMetrics("learner", 0), resume=resume, log=log)
    one_thread = replace(cfg, algo=cfg.algo.one_thread())  # the actors' regime as one thread runs it
    loop = InlineLoop()
    actors = [Actor(one_thread, i, RoleMetrics("actor", i), loop) for i in range(cfg.topology.actors)]
    drivers = [(ports := InProcessActorPorts(replay, params)).attach(actor.drive(ports)) for actor in actors]
    world = SerialWorld(learner, actors, shard, params)
    evaluator = None
    if cfg.evaluates_while_training:  # its policy's initial weights drawn aside: the run's generators go on as without
        generators = global_rng_state()
        evaluator = EvaluatorCore(cfg, params, run_dir)
        load_global_rng_state(generators)

    def stopping() -> bool:
        asked = stop is not None and stop()
        return asked or (stop_after_updates is not None and learner.counters.updates >= stop_after_updates)

    def stepped(progressed: bool) -> None:
        if progressed and evaluator is not None:
            evaluator.step(hold_s=0.0, timeout_s=0.0)  # no hold: one thread

    driver = LearnerDriver(learner, loop, stopping=stopping, on_step=stepped)
    try:
        if learner.restored_extra is not None:
            world.load(cast(WorldState | UnsavedWorld, learner.restored_extra))  # what `world.state` wrote
        elif learner.counters.updates > 0:
            raise SerialResumeError(f"the checkpoint at update {learner.counters.updates} holds no serial state")
        learner.checkpoints.extra_state = world.state
        driver.start(publish=learner.restored_extra is None)  # a restored world's ps holds its blob
        for actor_driver in drivers:
            actor_driver.start()
        while not driver.over:  # the learner's turn (it steps until it can do nothing), then every actor's
            progress = driver.steps + sum(actor_driver.progress for actor_driver in drivers)
            loop.turn()
            if not driver.over and driver.steps + sum(d.progress for d in drivers) == progress:
                raise SerialStalled(f"no progress at {learner.counters.env_steps} env steps")
        return driver.result
    finally:
        for actor in actors:
            actor.close()
        learner.close()
        if evaluator is not None:
            evaluator.close()
