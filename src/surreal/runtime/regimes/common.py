"""What every flow-control regime shares: what the runtime asks of one (`Regime`), the two halves' interfaces
(`ActorThrottle`, `Feed`) and a learner group's (`Follower`), what an update leads to (`Outcome`), the learner's
checkpointed `Counters`, and `LiveActors`, counted on each regime's own clock. Torch-free and transport-free, like the
regimes themselves.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from surreal.proto.wire import BlobMeta, Chunk, Fields, GroupOrder, ReplyLayout, SampleReply

RECENT_EPISODES = 20  # training episodes the learner's `train_return_mean` (length, success rate) averages
LIVE_ROUNDS = 2  # an actor counts as live while it was heard within this many rounds (versions or slacks)
GOLDEN = (math.sqrt(5) - 1) / 2  # actor i's turn within its rounds: i x GOLDEN mod 1, evenly spread for any N
HOLD_S = 0.5  # the shortest hold of a held actor's request at the ps (a long poll for a newer blob)
MAX_HOLD_S = 30.0  # the longest
STALL_FACTOR = 1.5  # a wait for a newer version lasting this many median version intervals is a stall
INTERVALS_KEPT = 8  # version intervals a median is taken over

# Where a feed sends a retired sample's priorities: (shard, slots, ids, priorities), the replay port's method.
PrioritiesHome = Callable[[int, np.ndarray, np.ndarray, np.ndarray], None]


@dataclass
class VersionIntervals:
    """When the versions an actor received arrived: the median time between two versions (a blob may skip
    several: its interval is shared among them). Clock readings only, never checkpointed: they mean nothing in
    another process."""

    clock: Callable[[], float]
    version: int = -1
    at: float = 0.0
    intervals: deque[float] = field(default_factory=lambda: deque(maxlen=INTERVALS_KEPT))

    def restart(self, version: int) -> None:
        """A new learner incarnation (or a restored actor): versions are counted from `version`, no interval known."""
        self.version, self.at = version, self.clock()
        self.intervals.clear()

    def arrived(self, version: int) -> None:
        """A blob of `version` came (after `restart`); an older or the same one tells nothing."""
        if version > self.version:
            now = self.clock()
            self.intervals.append((now - self.at) / (version - self.version))
            self.version, self.at = version, now

    def median(self) -> float | None:
        return statistics.median(self.intervals) if self.intervals else None


@dataclass(frozen=True)
class Wait:
    """How a held actor asks the ps for newer parameters (proto/wire.py `ParamsRequest`): wake it with the first
    blob of `wake_version` or later (the first that can let it act), or when `hold_s` is over."""

    wake_version: int
    hold_s: float = HOLD_S


class ActorThrottle(Protocol):
    """The actor's half: told what the actor receives and sends, says when it must wait for newer parameters
    and, while it waits, which version can free it."""

    def on_params(self, blob: BlobMeta) -> None: ...

    def on_heard(self, version: int, incarnation: str) -> None:
        """A ps answered "not modified" holding (`version`, `incarnation`): the learner's progress, without a blob."""
        ...

    def on_sent(self, env_steps: int) -> None: ...

    def must_wait(self, version: int) -> bool: ...

    def wait(self, version: int) -> Wait:
        """How to ask the ps while `must_wait(version)` holds."""
        ...

    def state(self) -> dict[str, Any]:
        """What the throttle counts (numbers, strings and lists), for an exact resume (run/serial.py)."""
        ...

    def load_state(self, state: dict[str, Any]) -> None: ...


@dataclass
class Counters:
    """What a resumed learner must continue from (all checkpointed). The feeds count into it."""

    env_steps: int = 0
    updates: int = 0
    version: int = 0
    episodes: int = 0
    stale_dropped: int = 0
    recent_returns: list[float] = field(default_factory=list)
    recent_lengths: list[int] = field(default_factory=list)  # absent from older checkpoints: starts empty
    recent_successes: list[bool] = field(default_factory=list)  # envs reporting `is_success` only
    shard_env_steps: list[int] = field(default_factory=list)  # off-policy: each replay shard's count seen last

    def row(self) -> dict[str, Any]:
        """What a metrics row says of the counters (a regime's `Outcome.row_fields` follow)."""
        row: dict[str, Any] = {
            "env_steps": self.env_steps,
            "updates": self.updates,
            "version": self.version,
            "episodes": self.episodes,
            "train_return_mean": float(np.mean(self.recent_returns)) if self.recent_returns else None,
            "train_episode_length_mean": float(np.mean(self.recent_lengths)) if self.recent_lengths else None,
            "stale_dropped": self.stale_dropped,
        }
        if self.recent_successes:  # only for envs reporting `is_success`
            row["train_success_rate"] = float(np.mean(self.recent_successes))
        return row

    def episodes_finished(self, returns: list[float], lengths: list[int], successes: list[bool]) -> None:
        self.episodes += len(returns)
        self.recent_returns = (self.recent_returns + returns)[-RECENT_EPISODES:]
        self.recent_lengths = (self.recent_lengths + lengths)[-RECENT_EPISODES:]
        self.recent_successes = (self.recent_successes + successes)[-RECENT_EPISODES:]


@dataclass
class WarmupRows:
    """The metrics rows of the warm-up: until the first update (an off-policy `learning_starts`, an on-policy first
    batch) no update brings a row, yet episodes finish and a user wants to see them. Each chunk (on-policy) or
    reply (off-policy) that brings finished episodes before it leaves a row of the counters as they were then; the
    learner writes them at once (roles/learner.py). Marks are taken per chunk where chunks are the unit, so a
    deterministic run writes the same rows however its replies group the chunks; nothing is held across a
    checkpoint (the step that takes a reply writes its marks)."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    def episodes_counted(self, counters: Counters, episodes: int) -> None:
        """`episodes` were just counted into `counters`: a row of them, while no update has run."""
        if episodes and counters.updates == 0:
            self.rows.append(counters.row())

    def take(self) -> list[dict[str, Any]]:
        rows, self.rows = self.rows, []
        return rows


@dataclass
class Outcome:
    """What follows one run of a feed's ready work: the learner core acts on it (publish, metrics row,
    checkpoint) without knowing the regime."""

    update_s: float  # wall time of one update (off-policy: per gradient step)
    publish: bool  # the version moved on: publish the parameters
    stats: dict[str, float] | None  # a metrics row is due with these statistics; None: no row now
    row_fields: dict[str, Any] = field(default_factory=dict)  # what the regime adds to that row
    checkpoint_interval: bool = False  # `checkpoint_interval` reached (the timer is the core's)
    skipped: int = 0  # updates the algorithm undid for going non-finite


class Feed(Protocol):
    """The learner's half of a regime: what a reply counts, when work is ready, what follows an update."""

    @property
    def sample_size(self) -> int:
        """What to ask a replay shard for per request."""
        ...

    @property
    def queued(self) -> int:
        """Units received and not yet learned from (the `learner_queued_transitions` gauge)."""
        ...

    def take(self, reply: SampleReply) -> bool:
        """Count a reply and hold its data. True: the step that took it also runs the work it completes, and
        the loop comes back at once; False: that work waits for the next step, which comes at once if work is
        ready (a step takes a reply or learns, so a loop stopping at `total_env_steps` stops in between)."""
        ...

    def ready(self) -> bool:
        """Whether `update` has work to run now."""
        ...

    def warmup_rows(self) -> list[dict[str, Any]]:
        """The counters' rows for the episodes finished before the first update, since the last call (`WarmupRows`)."""
        ...

    def update(self) -> Outcome | None:
        """Run the ready work through the algorithm; None: nothing was learned (a batch the staleness bound
        emptied)."""
        ...

    def env_step_budget(self) -> int | None:
        """What the next parameter blob allows the actors (None: no budget, the regime holds them otherwise)."""
        ...

    def live_actors(self) -> int | None:
        """The actors heard from lately, on this regime's clock; None: none yet, or shares stay as configured."""
        ...

    def state(self) -> dict[str, Any]:
        """What the feed holds and has not learned from yet (NumPy arrays, numbers, containers): checkpointed
        with the learner, so a resumed learner loses no chunk or sample it had taken."""
        ...

    def load_state(self, state: dict[str, Any]) -> None: ...


@dataclass
class LiveActors:
    """The actors the learner hears from, on a clock the feed passes in: on-policy its parameter version (a
    live actor sends at least one chunk per version), off-policy the env steps it has received (a live actor
    sends within every slack). An actor counts while heard within `window` ticks; None: none yet."""

    window: int
    last_heard: dict[int, int] = field(default_factory=dict)

    def heard(self, actor: int, now: int) -> None:
        self.last_heard[actor] = now

    def count(self, now: int) -> int | None:
        for actor in [a for a, t in self.last_heard.items() if now - t > self.window]:
            del self.last_heard[actor]  # gone: forgotten, so the map stays as small as the fleet
        return len(self.last_heard) or None


def live_state(live: LiveActors | None) -> list[list[int]] | None:
    """`live`'s (actor, last heard) pairs, for a feed's `state`."""
    return None if live is None else [[actor, heard] for actor, heard in live.last_heard.items()]


def load_live_state(live: LiveActors | None, state: list[list[int]] | None) -> None:
    if live is not None and state is not None:
        live.last_heard = {int(actor): int(heard) for actor, heard in state}


class SampleSource(Protocol):
    """Where a follower rank's samples come from: its own requests to the replay shards (roles/learner_group.py's
    `replay_batches`, whose requests leave the episodes to rank 0)."""

    def next(self, batch_size: int, timeout_s: float) -> SampleReply | None: ...

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None: ...

    def close(self) -> None: ...


class Follower(Protocol):
    """A rank after the first: rank 0's update orders carried out; `sampled`: the transitions it sampled itself
    (None: it samples nothing). `ready`: what the order needs is here, so `update` will not wait (an event loop
    asks it before `update`, as the samples come; a blocking rank just calls `update`)."""

    @property
    def sampled(self) -> int | None: ...

    def ready(self, order: GroupOrder) -> bool: ...

    def update(self, order: GroupOrder) -> None: ...

    def close(self) -> None: ...


Learner = TypeVar("Learner", contravariant=True)  # the algorithm's learner, as the regime calls it


class Regime(Protocol[Learner]):
    """What the runtime asks of the regime the algorithm's config names (`AlgoConfig.regime`), built from the
    experiment: a role calls these and never asks which regime runs. `Learner` is the narrow interface its feed calls
    on the algorithm's learner (versions.py's `ChunkLearner`, replay_ratio.py's `TransitionLearner`).

    sample_size      what the learner asks a replay shard for per request
    actor_throttle   the actor's half, for actor index `actor` (its turn where shares are fractional), on `clock`
    learner_feed     the learner's half, counting into `counters` (restored ones continue)
    reply_layout     what every reply the learner takes must hold, given the algorithm's chunk `fields`
    update_order     what rank 0 of a learner group orders the others before its update `learner.update(data, arg)`
    follower         the regime as a later rank of the group; `open_source` opens its own samples, if it takes any
    trial_update     one update as the feed runs it, on `chunks` (`sample_size` units), for timing a device
    """

    @property
    def sample_size(self) -> int: ...

    def actor_throttle(self, clock: Callable[[], float], actor: int = 0) -> ActorThrottle: ...

    def learner_feed(
        self, learner: Learner, counters: Counters, shards: int, priorities_home: PrioritiesHome
    ) -> Feed: ...

    def reply_layout(self, fields: Fields) -> ReplyLayout: ...

    def update_order(self, data: Any, arg: Any) -> GroupOrder: ...

    def follower(self, learner: Learner, open_source: Callable[[], SampleSource], shards: int) -> Follower: ...

    def trial_update(self, learner: Learner, chunks: list[Chunk]) -> Callable[[], object]: ...
