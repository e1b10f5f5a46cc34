"""On-policy flow control, on the clock of parameter versions: the "staleness" rule (PPO) and its strict form
"lockstep" (ES, and every on-policy algorithm in deterministic mode). Both halves, side by side.

- **Actor** (`VersionThrottle`): its share of a learner batch is `ceil(batch_size / chunk_size) / actors` chunks
  (lockstep: rounded up, so a version's own chunks always fill its batch); it may send `rollout_ahead` shares on
  the first version of a learner incarnation it sees and one share more for every newer version, then waits (a
  learner resumed from an older checkpoint restarts the count). Lockstep is `rollout_ahead = 1`. Other shares are
  not rounded up: a fleet of 17 to 31 actors would send up to twice the chunks a batch of 32 takes, the surplus
  dropped as stale. A fractional share is sent a chunk at a time: with less than one chunk a version, an actor
  sends a chunk every `1 / share` versions, its turn set by its index (a golden-ratio phase, so any fleet size
  spreads its chunks evenly over the versions; were every actor to send at once, most of the fleet's chunks would
  go stale).
  While it waits, it asks the ps to wake it at the version that completes its next chunk (`wait`), so a version
  goes to the actors whose turn it is, not to the whole fleet.
- **Learner** (`ChunkFeed`): a reply's chunks are queued (their env steps and episodes counted, their actors
  heard at the current version); once `batch_size` units are queued, whole chunks, oldest first, make a batch.
  Chunks more than `max_staleness` versions old are dropped and counted (`StalenessBound`; lockstep keeps
  only the current version's), the rest is one update, and every update is a new version, published.

**Elastic fleet.** `actors` is not the configured count but the number the learner hears from (`LiveActors`:
an actor counts while a chunk of it arrived within the last two of its rounds: two versions, or with
fractional shares two of its turns), published in every blob; the
configured count stands in until the first blob says otherwise. Between an actor's loss and the learner
noticing, a batch can fall short by the lost actor's share while the others wait for the next version; an
actor that has waited longer than it ever should (`VersionThrottle.stall_s`: 1.5 times the median interval
between the versions it saw, at least a second; `algo.overdraft_after_s` before it has seen two; a "not modified"
from the ps at a newer version than it heard before says the learner moves on, and restarts that clock) takes
one share more, so the batch fills from whoever is alive. The surplus waits in the feed's queue for the next batch,
still bounded by `max_staleness`. Deterministic runs keep the configured count and never overdraw.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from surreal.config.schema import ExperimentConfig, OnPolicyConfig, StalenessConfig
from surreal.proto.wire import BlobMeta, Chunk, Fields, FifoReply, GroupOrder, ReplyLayout, SampleReply
from surreal.runtime.regimes.common import (
    GOLDEN,
    HOLD_S,
    LIVE_ROUNDS,
    MAX_HOLD_S,
    STALL_FACTOR,
    Counters,
    LiveActors,
    Outcome,
    PrioritiesHome,
    Regime,
    SampleSource,
    VersionIntervals,
    Wait,
    WarmupRows,
    live_state,
    load_live_state,
)

STALL_MIN_S = 1.0  # an actor overdraws after a stall (common.py `STALL_FACTOR`), and never sooner than this

# -- the actor's half -----------------------------------------------------------------------------------


@dataclass
class VersionThrottle:
    """A share of every learner batch per parameter version (0 `rollout_ahead`: never waits)."""

    batch_units: int  # units (`batch_size` counts them) per learner batch
    chunk_units: int  # units per chunk
    actors: int  # how many actors share a batch: the configured count until a blob says
    rollout_ahead: int
    overdraft_after_s: float  # longest wait for a newer version before any interval is known; 0: never overdraw
    clock: Callable[[], float] = time.monotonic
    phase: float = 0.0  # where in a round of fractional shares this actor's chunk falls, in [0, 1)
    whole: bool = False  # shares of a chunk or more rounded up (lockstep)
    allowance: float = 0.0  # chunks this actor may still send (it sends while a whole one is left)
    version: int = -1
    incarnation: str | None = None
    heard: int = -1  # the newest version of this incarnation a ps said it holds (a blob or "not modified")
    waiting_since: float | None = None
    arrivals: VersionIntervals = field(init=False)

    def __post_init__(self) -> None:
        self.arrivals = VersionIntervals(self.clock)

    @property
    def share(self) -> float:
        """The chunks a version grants: the fleet's together are the whole chunks one batch takes (a batch is whole
        chunks until `batch_units`: 80 units of 32-unit chunks take 3), split over the actors (whole: rounded up)."""
        share = math.ceil(self.batch_units / self.chunk_units) / self.actors
        return math.ceil(share) if self.whole and share >= 1 else share

    def stall_s(self) -> float:
        """How long a wait for a newer version may last before it counts as a stall."""
        median = self.arrivals.median()
        if median is None:
            return self.overdraft_after_s
        return max(STALL_MIN_S, STALL_FACTOR * median)

    def on_params(self, blob: BlobMeta) -> None:
        if blob.actors is not None:
            self.actors = blob.actors
        if blob.incarnation != self.incarnation:
            if self.incarnation is None or blob.version < self.version:
                # A learner resumed from an older checkpoint counts versions from there: so does the actor.
                self.allowance = self.rollout_ahead * self.share + self.phase
            else:
                # Resumed where this actor counts (a preempted learner checkpoints as it stops): the count goes on,
                # or the versions' shares already sent would be granted again and go stale (lockstep: every one).
                self.allowance += (blob.version - self.version) * self.share
            self.incarnation, self.version = blob.incarnation, blob.version
            self.arrivals.restart(blob.version)
        elif blob.version > self.version:
            self.allowance += (blob.version - self.version) * self.share
            self.arrivals.arrived(blob.version)
            self.version = blob.version
        self.heard = max(self.heard, self.version)
        self.waiting_since = None

    def on_heard(self, version: int, incarnation: str) -> None:
        """The learner moved on (versions this actor's turn does not need yet): waiting for it is no stall."""
        if incarnation == self.incarnation and version > self.heard:
            self.heard, self.waiting_since = version, None

    def on_sent(self, env_steps: int) -> None:
        del env_steps
        self.allowance -= 1

    def must_wait(self, version: int) -> bool:
        del version  # `on_params` saw it
        if self.rollout_ahead == 0 or self.allowance >= 1:
            return False
        now = self.clock()
        if self.waiting_since is None:
            self.waiting_since = now
        elif self.overdraft_after_s > 0 and now - self.waiting_since >= self.stall_s():
            self.allowance, self.waiting_since = self.allowance + self.share, None  # a lost actor's share is missing
            return self.allowance < 1
        return True

    def wait(self, version: int) -> Wait:
        """Wake at the version that brings a whole chunk (its turn, with a fractional share); hold as long as a
        wait may last before it is a stall, so a hold that ends with nothing heard is one."""
        if version < 0 or self.incarnation is None:
            return Wait(0)
        versions = max(1, math.ceil((1 - self.allowance) / self.share - 1e-9))
        return Wait(version + versions, min(MAX_HOLD_S, max(HOLD_S, self.stall_s())))

    def state(self) -> dict[str, Any]:
        """The counts and the learner incarnation they belong to. Not the clock's readings: they mean nothing
        in another process, and only ever time an overdraft, which a serial run never takes."""
        return {
            "actors": self.actors,
            "allowance": self.allowance,
            "version": self.version,
            "learner_incarnation": self.incarnation,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.actors, self.allowance, self.version = state["actors"], state["allowance"], state["version"]
        self.incarnation, self.heard = state["learner_incarnation"], state["version"]
        self.arrivals.restart(self.version)
        self.waiting_since = None


# -- the learner's half ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StalenessBound:
    """Which chunks an update may use. `max_lag` None: only the current version (lockstep)."""

    max_lag: int | None

    def split(self, chunks: list[Chunk], version: int) -> tuple[list[Chunk], int]:
        """(chunks kept, how many were dropped)."""
        if self.max_lag is None:
            kept = [c for c in chunks if c.version == version]
        else:
            kept = [c for c in chunks if version - c.version <= self.max_lag]
        return kept, len(chunks) - len(kept)


class ChunkLearner(Protocol):
    """What this regime asks of the algorithm's learner (`surreal.algos.OnPolicyLearner` adds the rest)."""

    def update(self, chunks: list[Chunk], progress: float) -> dict[str, float]:
        """One update on whole chunks; `progress` in [0, 1] drives schedules (learning-rate annealing)."""
        ...


class ChunkFollower:
    """A learner group's rank after the first (`learner.replicas` > 1; roles/learner_group.py): rank 0's batch, which
    its order carries, learned from as rank 0 learns from it (each rank computes its share of every minibatch)."""

    sampled = None  # it samples nothing itself

    def __init__(self, learner: ChunkLearner) -> None:
        self.learner = learner

    def ready(self, order: GroupOrder) -> bool:
        return True  # the order carries its batch

    def update(self, order: GroupOrder) -> None:
        self.learner.update(order.chunks, order.progress)

    def close(self) -> None:
        pass


class ChunkFeed:
    """The learner's half: whole chunks queued until a batch's worth, one update per batch, a version each."""

    def __init__(
        self,
        learner: ChunkLearner,
        counters: Counters,
        batch_size: int,
        total_env_steps: int,
        bound: StalenessBound,
        checkpoint_interval: int,
        live: LiveActors | None,
        chunk_units: int,
        actors: int,
    ) -> None:
        """`chunk_units`: units per chunk, for the rounds actors with fractional shares are counted over;
        `actors`: the configured count, the least published before a whole round was heard."""
        self.learner, self.counters, self.bound, self.live = learner, counters, bound, live
        self.batch_size, self.total_env_steps, self.chunk_units = batch_size, total_env_steps, chunk_units
        self.actors = actors
        self.first_heard: int | None = None  # the version the first chunk arrived at
        self.checkpoint_interval = checkpoint_interval
        self.chunks: deque[Chunk] = deque()
        self.queued = 0  # units in `chunks`
        self.warmup = WarmupRows()

    @property
    def sample_size(self) -> int:
        return self.batch_size  # a batch's worth of units: the FIFO packs whole chunks

    def take(self, reply: SampleReply) -> bool:
        if not isinstance(reply, FifoReply):
            return False  # a replay of transitions: not this regime's (config validation keeps them apart)
        c = self.counters
        for chunk in reply.chunks:
            if self.live is not None:
                self.live.heard(chunk.actor, c.version)
                self.first_heard = c.version if self.first_heard is None else self.first_heard
            self.chunks.append(chunk)
            self.queued += chunk.size
            c.env_steps += chunk.env_steps
            c.episodes_finished(chunk.episode_returns, chunk.episode_lengths, chunk.episode_successes)
            self.warmup.episodes_counted(c, len(chunk.episode_returns))
        self._drop_stale()  # a chunk may arrive already too old
        return True  # a batch is learned from as soon as it is full, and the next reply may fill it

    def ready(self) -> bool:
        return self.queued >= self.batch_size

    def warmup_rows(self) -> list[dict[str, Any]]:
        return self.warmup.take()

    def update(self) -> Outcome | None:
        """One update on a batch of usable chunks; None (no update, no version) until a batch's worth is queued."""
        if not self.ready():
            return None
        c = self.counters
        batch = self._take_batch()
        # Learning-rate annealing counts the steps used before this batch, as CleanRL does.
        used_before = c.env_steps - sum(chunk.env_steps for chunk in (*self.chunks, *batch))
        started = time.perf_counter()
        stats = self.learner.update(batch, min(1.0, used_before / self.total_env_steps))
        update_s = time.perf_counter() - started
        lag_mean = float(np.mean([max(0, c.version - chunk.version) for chunk in batch]))
        c.updates += 1
        c.version += 1
        self._drop_stale()  # the new version may leave queued chunks too old
        return Outcome(
            update_s,
            publish=True,
            stats=stats,
            row_fields={"version_lag_mean": lag_mean},
            checkpoint_interval=c.updates % self.checkpoint_interval == 0,
            skipped=int(bool(stats.get("nonfinite_skipped"))),
        )

    def _drop_stale(self) -> None:
        """Chunks past the staleness bound can never be learned from (versions only grow): they are dropped and
        counted as they arrive or as the version moves on, before they count towards a batch, so every update
        learns from a whole batch (ES: a whole population) even after an overdraft's surplus went stale."""
        kept, dropped = self.bound.split(list(self.chunks), self.counters.version)
        if dropped:
            self.chunks = deque(kept)
            self.queued = sum(chunk.size for chunk in kept)
            self.counters.stale_dropped += dropped

    def _take_batch(self) -> list[Chunk]:
        """Whole chunks, oldest first, until `batch_size` units; the rest waits for the next update."""
        batch, total = [], 0
        while self.chunks and total < self.batch_size:
            chunk = self.chunks.popleft()
            batch.append(chunk)
            total += chunk.size
        self.queued -= total
        return batch

    def env_step_budget(self) -> None:
        return None  # actors are held by versions, not by a budget

    def live_actors(self) -> int | None:
        if self.live is None:
            return None
        # Actors outnumbering a batch's chunks send one every `actors * chunk / batch` versions (their turn):
        # each counts while heard within LIVE_ROUNDS of those rounds. Until the configured fleet has had a whole
        # window, fewer heard is no smaller fleet: not every actor had its turn (or its first chunk) yet, and a
        # blob counting only the first batch's actors would grant all the others whole chunks at once.
        rounds = lambda actors: LIVE_ROUNDS * max(1, math.ceil(actors * self.chunk_units / self.batch_size))
        heard_of = len(self.live.last_heard)
        starting = self.counters.version - (self.first_heard or 0) < rounds(max(heard_of, self.actors))
        self.live.window = rounds(max(heard_of, self.actors) if starting else heard_of)
        heard = self.live.count(self.counters.version)
        if starting and heard is not None:
            return max(heard, self.actors)
        return heard

    def state(self) -> dict[str, Any]:
        """The queued chunks (taken from the replay, counted, not yet learned from) and the actors heard."""
        chunks = [{f.name: getattr(chunk, f.name) for f in fields(Chunk)} for chunk in self.chunks]
        return {"queued_chunks": chunks, "live": live_state(self.live)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.chunks = deque(Chunk(**chunk) for chunk in state["queued_chunks"])
        self.queued = sum(chunk.size for chunk in self.chunks)
        load_live_state(self.live, state["live"])


# -- the regime -------------------------------------------------------------------------------------------


class VersionsRegime:
    """Both halves as the runtime asks for them (common.Regime), from the experiment and its algorithm's keys
    (`OnPolicyConfig`: the lockstep rule; `StalenessConfig`: the staleness rule). Deterministic runs hold every
    actor in lock-step and count no actors: shares stay as configured, and nothing overdraws."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        algo = cfg.algo
        if not isinstance(algo, OnPolicyConfig):
            raise TypeError(f"{algo.name} does not run in the versions regime")
        self.cfg, self.algo = cfg, algo
        staleness = algo if isinstance(algo, StalenessConfig) else None
        self.lockstep = cfg.deterministic or staleness is None
        self.rollout_ahead = staleness.rollout_ahead if staleness is not None and not cfg.deterministic else 1
        self.bound = StalenessBound(None if staleness is None else staleness.max_staleness)

    @property
    def sample_size(self) -> int:
        return self.algo.batch_size  # a batch's worth of units: the FIFO packs whole chunks

    def actor_throttle(self, clock: Callable[[], float] = time.monotonic, actor: int = 0) -> VersionThrottle:
        cfg = self.cfg
        return VersionThrottle(
            self.algo.batch_size,
            self.algo.chunk_size(cfg),
            cfg.topology.actors,
            self.rollout_ahead,
            0.0 if cfg.deterministic else self.algo.overdraft_after_s,
            clock,
            actor * GOLDEN % 1.0,
            whole=self.lockstep,
        )

    def learner_feed(
        self, learner: ChunkLearner, counters: Counters, shards: int, priorities_home: PrioritiesHome
    ) -> ChunkFeed:
        cfg = self.cfg
        return ChunkFeed(
            learner,
            counters,
            self.algo.batch_size,
            cfg.total_env_steps,
            self.bound,
            cfg.learner.checkpoint_interval,
            None if cfg.deterministic else LiveActors(LIVE_ROUNDS),
            self.algo.chunk_size(cfg),
            cfg.topology.actors,
        )

    def reply_layout(self, fields: Fields) -> ReplyLayout:
        return ReplyLayout(fields)

    def update_order(self, data: list[Chunk], arg: float) -> GroupOrder:
        """Every rank learns from rank 0's batch: the order carries its chunks and the schedule's progress."""
        return GroupOrder("update", progress=float(arg), chunks=list(data))

    def follower(self, learner: ChunkLearner, open_source: Callable[[], SampleSource], shards: int) -> ChunkFollower:
        del open_source, shards  # a follower learns from rank 0's batches and talks to no replay
        return ChunkFollower(learner)

    def trial_update(self, learner: ChunkLearner, chunks: list[Chunk]) -> Callable[[], object]:
        return lambda: learner.update(chunks, 0.0)


if TYPE_CHECKING:  # mypy checks the regime against what the runtime asks of one
    _CHECKED: type[Regime[ChunkLearner]] = VersionsRegime
