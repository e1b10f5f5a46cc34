"""Flow control: how far actors may run ahead, and what the learner may learn from. One module per regime
holds both halves side by side (after Acme's rate limiters and Sample Factory's batcher), and its docstring is
the specification:

    versions.py       on-policy ("staleness", "lockstep"): VersionThrottle | ChunkFeed, StalenessBound
    replay_ratio.py   off-policy ("replay_ratio"): EnvStepAllowance | TransitionFeed, ReplayRatioLimiter
    common.py         the halves' interfaces (ActorThrottle, Feed, Outcome), Counters, LiveActors

The algorithm's config names its regime (`AlgoConfig.flow_control`) and the functions here pick it, so a
role never asks which algorithm or regime it runs. Torch-free and transport-free: the feeds call the
algorithm's learner through the narrow interface their regime declares, and the tests drive them with
scripted replies.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from surreal.config.schema import ExperimentConfig
from surreal.proto.wire import Chunk, Fields, GroupOrder, ReplyLayout
from surreal.runtime.regimes import replay_ratio, versions
from surreal.runtime.regimes.common import ActorThrottle, Counters, Feed, Outcome, PrioritiesHome


def actor_throttle(cfg: ExperimentConfig, clock: Callable[[], float] = time.monotonic, actor: int = 0) -> ActorThrottle:
    """The actor's half of the experiment's regime, for actor index `actor` (its turn when shares are fractional)."""
    if not cfg.algo.on_policy:
        return replay_ratio.env_step_allowance(cfg, clock, actor)
    return versions.version_throttle(cfg, clock, actor)


# The algorithm's learner comes as the union `surreal.algos.make_learner` returns; the config class that names
# the regime and the module that makes the learner are one registry entry, so its kind follows the regime
# (mypy cannot see that: hence the casts, here and nowhere in the roles).


def learner_feed(
    cfg: ExperimentConfig, learner: object, counters: Counters, shards: int, priorities_home: PrioritiesHome
) -> Feed:
    """The learner's half of the experiment's regime, counting into `counters` (restored ones continue)."""
    if not cfg.algo.on_policy:
        return replay_ratio.transition_feed(
            cfg, cast(replay_ratio.TransitionLearner, learner), counters, shards, priorities_home
        )
    return versions.chunk_feed(cfg, cast(versions.ChunkLearner, learner), counters)


# -- a data-parallel learner group (`learner.replicas` > 1; roles/learner_group.py) --------------------------


def update_order(cfg: ExperimentConfig, data: Any, arg: Any) -> GroupOrder:
    """What rank 0 orders the other ranks before its update `learner.update(data, arg)`: on-policy the batch's
    chunks and the schedule's progress (every rank learns from rank 0's batch); off-policy only the gradient steps
    (every rank steps on minibatches it sampled itself)."""
    if not cfg.algo.on_policy:
        return GroupOrder("update", steps=int(arg))
    return GroupOrder("update", progress=float(arg), chunks=list(data))


class Follower(Protocol):
    """A rank after the first: rank 0's update orders carried out; `sampled`: the transitions it sampled itself
    (None: it samples nothing)."""

    @property
    def sampled(self) -> int | None: ...

    def update(self, order: GroupOrder) -> None: ...

    def close(self) -> None: ...


def follower(
    cfg: ExperimentConfig, learner: object, open_source: Callable[[], replay_ratio.SampleSource], shards: int
) -> Follower:
    """The experiment's regime as a follower rank: on-policy rank 0's batches; off-policy its own samples, from the
    source `open_source` opens (only then: an on-policy rank talks to no replay)."""
    if not cfg.algo.on_policy:
        return replay_ratio.sample_follower(cfg, cast(replay_ratio.TransitionLearner, learner), open_source(), shards)
    return versions.ChunkFollower(cast(versions.ChunkLearner, learner))


def sample_size(cfg: ExperimentConfig) -> int:
    """What the learner asks a replay shard for per request: on-policy, a batch's worth of units (the FIFO
    packs whole chunks); off-policy, `learner.minibatches_per_sample` minibatches of `algo.batch_size` (in a
    learner group, of each rank's share of it: every rank samples its own, `replay_ratio.share_size`)."""
    if not cfg.algo.on_policy:
        return replay_ratio.share_size(cfg) * cfg.learner.minibatches_per_sample
    return cfg.algo.batch_size


def reply_layout(cfg: ExperimentConfig, fields: Fields) -> ReplyLayout:
    """What every reply the learner takes must hold: the algorithm's `fields` and, off-policy, a sample's
    `sample_size` transitions with weights when the replay is prioritized."""
    if cfg.algo.on_policy:
        return ReplyLayout(fields)
    return ReplyLayout(fields, sample_size(cfg), cfg.replay.mode == "prioritized")


def trial_update(cfg: ExperimentConfig, learner: object, chunks: list[Chunk]) -> Callable[[], object]:
    """One update as the experiment's feed runs it, on `chunks` (`sample_size` units), for timing a device."""
    if not cfg.algo.on_policy:
        return replay_ratio.trial_update(cfg, cast(replay_ratio.TransitionLearner, learner), chunks)
    return versions.trial_update(cast(versions.ChunkLearner, learner), chunks)


__all__ = [
    "ActorThrottle",
    "Counters",
    "Feed",
    "Follower",
    "Outcome",
    "actor_throttle",
    "follower",
    "learner_feed",
    "sample_size",
    "reply_layout",
    "trial_update",
    "update_order",
]
