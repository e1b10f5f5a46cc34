"""Off-policy flow control, on the clock of env steps: the "replay_ratio" rule (DDPG, any `OffPolicyConfig`).
Both halves, side by side.

- **Learner** (`TransitionFeed`): `floor((env_steps - learning_starts) * replay_ratio)` gradient steps are
  allowed, `env_steps` being the sum of the replay shards' counts that every reply carries (`ShardEnvSteps`,
  which survives a restarted shard). A reply is a sample of `minibatches_per_sample` minibatches; the feed
  steps through them only as far as the ratio allows, finishing a sample over several calls when it must,
  and sends the sample's priorities home in one message when it is retired (used up, or replaced by newer
  samples before it was: then the priorities of the minibatches it did use). Parameters are published every
  `publish_interval` gradient steps, a metrics row (the steps' mean statistics) every `ROW_UPDATES`.
- **Actor** (`EnvStepAllowance`): every blob carries `env_step_budget = learning_starts + updates / replay_ratio +
  slack`, `slack = rollout_ahead * actors * chunk_size`; an actor's share of it is `(budget - blob.env_steps) /
  actors`. Its first blob grants that share, lagging by its turn (a golden-ratio phase of a chunk, as on-policy:
  equal grants would free every actor at the same version, and the fleet would send all its first grants at once,
  then nothing while the learner learns from them). Later blobs grant only its share of the budget's growth, which
  keeps the lag, capped by the whole fresh share (a blob counts the fleet's steps as the learner knew them, not the
  chunks in flight since: an actor fetches right after sending, so a fresh share on every blob would hand each actor
  back the chunk it just sent, and the fleet would run far past the budget; a lagged cap would starve the actors of
  the latest turns). An actor starts a chunk while its allowance is positive (a chunk past it is repaid from the
  next growth: the fleet is at most a chunk an actor ahead), and while its fresh share is its whole part of the
  slack (the learner has learned from all it counted; the slack less the `trail` of steps the learner may have taken
  since it published, or a learner waiting between publications would hold overdrawn actors for ever) it may start
  one on its turn: the floor this sets lags by the actor's turn as its first grant does (an equal floor would free
  every held actor at once and leave them all the same allowance: bursts of hundreds of chunks at 1,024 actors), and
  an actor whose turn within the round has come while the learner still waits is freed by time, so allowances lost
  with actors that left never stall the learner for more than a round (the time the budget's growth takes to grant
  each actor a chunk). More actors than the learner can serve therefore slow down instead of lowering the replay
  ratio; `rollout_ahead = 0` removes the budget. While it waits, an actor asks the ps to wake it at the version
  whose budget growth frees it (`wait`, at the growth per version it saw), so a version goes to the few actors it
  frees, not to the whole fleet.

**Elastic fleet.** `actors` is the number the learner hears from (`LiveActors`: an actor counts while a replay
shard reported it within the last two slacks of env steps), published in every blob. No overdraft is needed:
a lost actor's part of the budget merely goes unused until the next blob, and the ratio, held at the learner,
is exact whatever the fleet.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from surreal.config.schema import ExperimentConfig, OffPolicyConfig
from surreal.proto.frame_fields import served_fields
from surreal.proto.wire import (
    IDS,
    SLOTS,
    BlobMeta,
    Chunk,
    Fields,
    GroupOrder,
    ReplyLayout,
    SampleReply,
    TransitionReply,
)
from surreal.replay.buffers import flatten_time_major
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

ROW_UPDATES = 250  # gradient steps per metrics row (and per `checkpoint_interval` unit)

# -- the actor's half -----------------------------------------------------------------------------------


@dataclass
class EnvStepAllowance:
    """The env steps this actor may still take: its share of the budget the learner published (module
    docstring). `slack` and `trail` are the learner's (`ReplayRatioLimiter`)."""

    actors: int  # how many actors share the budget: the configured count until a blob says
    slack: int
    chunk: int = 0  # env steps per chunk
    phase: float = 0.0  # this actor's turn, in [0, 1): its share lags by this many chunks
    clock: Callable[[], float] = time.monotonic
    trail: int = 0  # env steps a blob's budget may trail the learner's own by (its steps since it published)
    allowance: float = math.inf  # no budget in the blob: unthrottled
    budget: int | None = None  # of the last blob applied
    incarnation: str | None = None  # the learner's that published it
    growth: float = 0.0  # how much the budget grew per version between the last two blobs (0: unknown)
    arrivals: VersionIntervals = field(init=False)  # its `version`: the last blob applied
    idle_since: float | None = None  # when a blob said the learner had learned from all it counted, while held

    def __post_init__(self) -> None:
        self.arrivals = VersionIntervals(self.clock)

    def on_params(self, blob: BlobMeta) -> None:
        if blob.actors is not None:
            self.actors = blob.actors
        if blob.env_step_budget is None:
            return
        fresh = (blob.env_step_budget - blob.env_steps) / self.actors
        # Above zero where the learner learned from all it counted (fresh is the whole slack's part, but for the
        # steps it took since it published): it waits.
        floor = fresh - max(0, self.slack - self.trail) / self.actors + 1
        if self.budget is None or blob.incarnation != self.incarnation:  # the first blob of this learner's count
            self.allowance, self.growth = fresh - self.phase * self.chunk, 0.0  # lagging by its turn
            self.arrivals.restart(blob.version)
        else:
            grown = self.allowance + (blob.env_step_budget - self.budget) / self.actors
            # The floor (module docstring) lags by this actor's turn.
            self.allowance = max(min(fresh, grown), floor - self.phase * self.chunk)
            if blob.version > self.arrivals.version:
                self.growth = (blob.env_step_budget - self.budget) / (blob.version - self.arrivals.version)
                self.arrivals.arrived(blob.version)
        if floor <= 0 or self.allowance > 0:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since = self.clock()
        self.budget, self.incarnation = blob.env_step_budget, blob.incarnation

    def on_heard(self, version: int, incarnation: str) -> None:
        del version, incarnation  # only a blob's budget frees this actor

    def on_sent(self, env_steps: int) -> None:
        self.allowance -= env_steps
        self.idle_since = None  # a turn is one chunk; a blob that finds the learner still waiting starts the next

    def must_wait(self, version: int) -> bool:
        del version
        turn = self._turn_at()
        return self.allowance <= 0 and (turn is None or self.clock() < turn)

    def _turn_at(self) -> float | None:
        """While the learner waits for data (since `idle_since`), when this actor's turn within a round comes and
        frees it: the actors whose turns come first (and whose floor frees them at once) may have left, and the
        learner must not wait for allowances that went with them."""
        return None if self.idle_since is None else self.idle_since + self.phase * self._round_s()

    def _round_s(self) -> float:
        """How long the budget's growth takes to grant each actor a chunk, at the pace seen last (HOLD_S while
        unknown; MAX_HOLD_S at most): the time over which the actors' turns are spread."""
        interval = self.arrivals.median()
        if self.growth <= 0 or interval is None:
            return HOLD_S
        return min(MAX_HOLD_S, self.chunk * self.actors / self.growth * interval)

    def wait(self, version: int) -> Wait:
        """Wake at the version whose budget growth brings this actor's allowance above zero, at the growth per
        version seen last; hold about as long as those versions take (a blob below the wake version is not
        sent to this actor: at 1,024 actors a version grows each one's part by a fraction of an env step),
        and, while the learner waits for data, no longer than until this actor's turn."""
        if version < 0 or self.budget is None or self.growth <= 0:
            return Wait(max(0, version + 1))
        versions = math.floor(-self.allowance * self.actors / self.growth) + 1
        interval = self.arrivals.median()
        hold_s = HOLD_S if interval is None else STALL_FACTOR * versions * interval
        turn = self._turn_at()
        if turn is not None:
            hold_s = min(hold_s, turn - self.clock())
        return Wait(version + versions, min(MAX_HOLD_S, max(HOLD_S, hold_s)))

    def state(self) -> dict[str, Any]:
        return {"actors": self.actors, "allowance": self.allowance}

    def load_state(self, state: dict[str, Any]) -> None:
        self.actors, self.allowance = state["actors"], state["allowance"]


# -- the learner's half ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayRatioLimiter:
    """Gradient steps allowed at the env steps received, and the budget that holds the actors."""

    learning_starts: int
    replay_ratio: float
    slack: int | None  # env steps the actors together may run ahead; None: actors unthrottled
    publish_interval: int  # gradient steps between parameter publications

    def updates_allowed(self, env_steps: int) -> int:
        past_start = env_steps - self.learning_starts
        return int(past_start * self.replay_ratio) if past_start >= 0 else 0

    def budget(self, updates: int) -> int | None:
        if self.slack is None:
            return None
        return int(self.learning_starts + updates / self.replay_ratio + self.slack)

    @property
    def trail(self) -> int:
        """How far a published budget may trail the learner's own: the steps it may take before it publishes
        again, in env steps."""
        return math.ceil((self.publish_interval - 1) / self.replay_ratio)


@dataclass
class ShardEnvSteps:
    """Env steps received, summed over replay shards from the running count each sample reply carries.

    A shard restarted from empty reports a smaller count: everything it reports then is new. The per-shard
    counts are checkpointed with the learner (`Counters.shard_env_steps`), so a resumed learner neither
    recounts nor loses steps."""

    counts: list[int] = field(default_factory=list)

    def observe(self, shard: int, seen: int) -> int:
        """Record shard `shard`'s count; returns the env steps it adds."""
        self.counts.extend([0] * (shard + 1 - len(self.counts)))
        added = seen - self.counts[shard] if seen >= self.counts[shard] else seen
        self.counts[shard] = seen
        return added


@dataclass
class Sample:
    """A sample reply being stepped through: `minibatches` of `size` transitions, `used` of them so far, and
    the priorities they earned (sent home together when the sample is retired)."""

    shard: int
    arrays: dict[str, Any]
    size: int
    minibatches: int
    used: int = 0
    priorities: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def of(cls, shard: int, arrays: dict[str, Any], batch_size: int) -> Sample:
        """A reply of k * batch_size transitions is k minibatches; a shorter one is one minibatch."""
        transitions = len(arrays[SLOTS])  # every array's length: proto/wire.py checked the reply
        size = min(batch_size, transitions)
        return cls(shard, arrays, size, transitions // size)

    def next(self, steps: int) -> dict[str, Any]:
        """The next `steps` minibatches' transitions, marked used."""
        start, self.used = self.used * self.size, self.used + steps
        return {k: np.asarray(v)[start : self.used * self.size] for k, v in self.arrays.items()}


def retire(sample: Sample, priorities_home: PrioritiesHome | None) -> None:
    """A sample the learner is done with: the priorities of the minibatches it stepped on go home to their shard in
    one message (none for skipped steps, whose priorities are NaN)."""
    if priorities_home is None or not sample.priorities:
        return
    priorities = np.concatenate(sample.priorities)
    slots, ids = (np.asarray(sample.arrays[k])[: len(priorities)] for k in (SLOTS, IDS))
    keep = np.isfinite(priorities)
    if keep.any():
        priorities_home(sample.shard, slots[keep], ids[keep], priorities[keep])


class TransitionLearner(Protocol):
    """What this regime asks of the algorithm's learner (`surreal.algos.OffPolicyLearner` adds the rest)."""

    def update(self, batch: dict[str, Any], steps: int = 1) -> tuple[list[dict[str, float]], np.ndarray]:
        """`steps` gradient steps, one per minibatch of a sampled batch holding `steps` equal minibatches;
        returns each step's statistics and the new priorities (|TD error|) of the batch's transitions, NaN
        for those of a step skipped as non-finite."""
        ...


class TransitionFeed:
    """The learner's half: sampled minibatches, as many gradient steps as the replay ratio allows."""

    def __init__(
        self,
        learner: TransitionLearner,
        counters: Counters,
        limiter: ReplayRatioLimiter,
        batch_size: int,
        minibatches_per_sample: int,
        samples_held: int,
        checkpoint_interval: int,
        priorities_home: PrioritiesHome | None,
        live: LiveActors | None,
    ) -> None:
        """`samples_held`: samples kept before the oldest is retired (one per request in flight);
        `priorities_home`: where retired samples' priorities go, None for a replay without priorities."""
        self.learner, self.counters, self.limiter, self.live = learner, counters, limiter, live
        self.sample_size, self.checkpoint_interval = batch_size * minibatches_per_sample, checkpoint_interval
        self.held = HeldSamples(batch_size, samples_held, priorities_home)
        self.shard_steps = ShardEnvSteps(counters.shard_env_steps)  # the checkpointed list, updated in place
        self.interval: list[dict[str, float]] = []  # statistics of the steps since the last row
        self.warmup = WarmupRows()

    @property
    def queued(self) -> int:
        return sum((s.minibatches - s.used) * s.size for s in self.held.samples)

    def take(self, reply: SampleReply) -> bool:
        """Off-policy learners see no chunks: a reply's report brings the env steps, episodes and actors."""
        if not isinstance(reply, TransitionReply):
            return False
        c, report = self.counters, reply.report
        c.env_steps += self.shard_steps.observe(report.shard, report.env_steps)
        c.episodes_finished(report.episode_returns, report.episode_lengths, report.episode_successes)
        self.warmup.episodes_counted(c, len(report.episode_returns))
        if self.live is not None:
            for actor in report.actors:
                self.live.heard(actor, c.env_steps)
        self.held.take(reply)
        return False  # a step takes a sample or learns, never both: learning waits for the next step

    def _allowed(self) -> int:
        return self.limiter.updates_allowed(self.counters.env_steps) - self.counters.updates

    def ready(self) -> bool:
        return bool(self.held.samples) and self._allowed() > 0

    def warmup_rows(self) -> list[dict[str, Any]]:
        return self.warmup.take()

    def update(self) -> Outcome:
        """Up to the allowed gradient steps on the oldest sample's next minibatches, in one call of the
        algorithm."""
        c, sample = self.counters, self.held.samples[0]
        steps = min(self._allowed(), sample.minibatches - sample.used)
        batch, parts = self.held.next(steps)  # the oldest sample's next minibatches only
        started = time.perf_counter()
        step_stats, priorities = self.learner.update(batch, steps)
        update_s = (time.perf_counter() - started) / steps
        before = c.updates
        c.updates += steps
        kept = [stats for stats in step_stats if not stats.get("nonfinite_skipped")]
        self.interval += kept
        self.held.learned(parts, priorities)
        crossed = lambda every: c.updates // every > before // every
        publish = crossed(self.limiter.publish_interval)
        if publish:
            c.version += 1
        means = None
        if crossed(ROW_UPDATES) and self.interval:
            means = {k: float(np.mean([row[k] for row in self.interval])) for k in self.interval[0]}
            self.interval.clear()
        checkpoint = crossed(ROW_UPDATES * self.checkpoint_interval)
        return Outcome(update_s, publish, means, checkpoint_interval=checkpoint, skipped=len(step_stats) - len(kept))

    def env_step_budget(self) -> int | None:
        return self.limiter.budget(self.counters.updates)

    def live_actors(self) -> int | None:
        return None if self.live is None else self.live.count(self.counters.env_steps)

    def state(self) -> dict[str, Any]:
        """The samples held (with how far each was stepped through and the priorities it earned so far), the
        statistics of the steps since the last metrics row, and the actors heard."""
        samples = [{f.name: getattr(sample, f.name) for f in fields(Sample)} for sample in self.held.samples]
        return {"samples": samples, "interval": list(self.interval), "live": live_state(self.live)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.held.samples = deque(Sample(**sample) for sample in state["samples"])
        self.interval = list(state["interval"])
        load_live_state(self.live, state["live"])


class HeldSamples:
    """The samples a learner steps through, each of minibatches of `share_size` transitions (its share of
    `algo.batch_size`): rank 0's `TransitionFeed`, and in a learner group (`learner.replicas` > 1) every other rank's,
    drawn from the replay itself and stepped through as rank 0's orders say (roles/learner_group.py). It keeps the
    newest `samples_held` and retires older ones, and sends each retired sample's priorities to its shard. A
    follower's order may run across two samples: one call of the algorithm, as on rank 0."""

    def __init__(self, share_size: int, samples_held: int, priorities_home: PrioritiesHome | None) -> None:
        self.share_size, self.samples_held, self.priorities_home = share_size, samples_held, priorities_home
        self.samples: deque[Sample] = deque()
        self.transitions = 0  # sampled transitions taken (a rank's `learner_group_sampled_transitions_total`)

    @property
    def minibatches(self) -> int:
        """Minibatches held and not stepped on yet."""
        return sum(s.minibatches - s.used for s in self.samples)

    def take(self, reply: SampleReply) -> bool:
        """Hold a reply's transitions (the newest `samples_held` samples kept); False: it held none."""
        if not isinstance(reply, TransitionReply):
            return False
        sample = Sample.of(reply.report.shard, reply.transitions, self.share_size)
        self.transitions += sample.size * sample.minibatches
        self.samples.append(sample)
        while len(self.samples) > self.samples_held:
            retire(self.samples.popleft(), self.priorities_home)  # a newer sample of the same buffer replaces it
        return True

    def next(self, steps: int) -> tuple[dict[str, Any], list[tuple[Sample, int]]]:
        """The next `steps` minibatches (call when `minibatches` >= `steps`), oldest first, as one batch; and which
        samples gave how many (for `learned`)."""
        if not 0 < steps <= self.minibatches:
            raise ValueError(f"{steps} minibatches asked for, {self.minibatches} held")
        parts: list[tuple[Sample, int]] = []
        pieces: list[dict[str, Any]] = []
        wanted = steps
        for sample in self.samples:
            n = min(wanted, sample.minibatches - sample.used)
            if n:
                pieces.append(sample.next(n))
                parts.append((sample, n))
                wanted -= n
            if not wanted:
                break
        batch = pieces[0] if len(pieces) == 1 else {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}
        return batch, parts

    def learned(self, parts: list[tuple[Sample, int]], priorities: np.ndarray) -> None:
        """The new priorities of `next`'s batch, back to the samples they came from; the used-up ones retired."""
        start = 0
        for sample, n in parts:
            rows = n * sample.size
            sample.priorities.append(np.asarray(priorities)[start : start + rows])
            start += rows
        while self.samples and self.samples[0].used == self.samples[0].minibatches:
            retire(self.samples.popleft(), self.priorities_home)

    def retire_all(self) -> None:
        """The group stops: the priorities earned so far go home."""
        while self.samples:
            retire(self.samples.popleft(), self.priorities_home)


class SampleFollower:
    """A learner group's rank after the first: each order's `steps` gradient steps on minibatches this rank sampled
    itself (`HeldSamples`). Before each order it takes the replies already here (the newest samples kept, as rank
    0's feed keeps them), then waits for the rest, at most `wait_s` (the group's timeout: rank 0 is in the first
    step's all-reduce meanwhile, bounded by the same timeout)."""

    def __init__(
        self,
        learner: TransitionLearner,
        source: SampleSource,
        samples: HeldSamples,
        minibatches_per_sample: int,
        wait_s: float,
    ) -> None:
        self.learner, self.source, self.samples = learner, source, samples
        self.minibatches_per_sample, self.wait_s = minibatches_per_sample, wait_s

    @property
    def sampled(self) -> int:
        """Transitions sampled so far (the rank's `learner_group_sampled_transitions_total`)."""
        return self.samples.transitions

    def ready(self, order: GroupOrder) -> bool:
        """The replies already here taken; True once they hold the order's steps. Raises for an order no sample
        can serve."""
        if not 0 < order.steps <= self.minibatches_per_sample:
            raise ValueError(f"an order of {order.steps} steps (a sample holds {self.minibatches_per_sample})")
        while (reply := self.source.next(0, 0.0)) is not None:
            self.samples.take(reply)
        return self.samples.minibatches >= order.steps

    def update(self, order: GroupOrder) -> None:
        """Raises for an order no sample can serve, or when the samples do not come within `wait_s`."""
        deadline = time.monotonic() + self.wait_s
        while not self.ready(order):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no sample from the replay in {self.wait_s:.0f} s (learner.group_timeout_s)")
            reply = self.source.next(0, min(remaining, 0.5))
            if reply is not None:
                self.samples.take(reply)
        batch, parts = self.samples.next(order.steps)
        _, priorities = self.learner.update(batch, order.steps)
        self.samples.learned(parts, priorities)

    def close(self) -> None:
        """The group stops: the priorities earned so far go home, then the requests end."""
        self.samples.retire_all()
        self.source.close()


# -- the regime -------------------------------------------------------------------------------------------


class ReplayRatioRegime:
    """Both halves as the runtime asks for them (common.Regime), from the experiment and its algorithm's keys
    (`OffPolicyConfig`). In a learner group every rank steps on its 1/`learner.replicas` share of every minibatch,
    which it samples itself (`share_size`); rank 0's feed keeps the ratio and orders the steps."""

    def __init__(self, cfg: ExperimentConfig) -> None:
        algo = cfg.algo
        if not isinstance(algo, OffPolicyConfig):
            raise TypeError(f"{algo.name} is on-policy: it has no replay ratio")
        self.cfg, self.algo = cfg, algo
        ahead = algo.rollout_ahead
        slack = ahead * cfg.topology.actors * algo.chunk_size(cfg) if ahead else None
        self.limiter = ReplayRatioLimiter(algo.learning_starts, algo.replay_ratio, slack, algo.publish_interval)
        self.share_size = algo.batch_size // cfg.learner.replicas  # a rank's share of a minibatch (all: alone)

    @property
    def sample_size(self) -> int:
        """`learner.minibatches_per_sample` minibatches of this rank's share of `algo.batch_size`."""
        return self.share_size * self.cfg.learner.minibatches_per_sample

    def actor_throttle(self, clock: Callable[[], float] = time.monotonic, actor: int = 0) -> EnvStepAllowance:
        """With `rollout_ahead = 0` the learner publishes no budget: the actor never waits."""
        chunk = self.algo.chunk_size(self.cfg)
        limiter = self.limiter
        return EnvStepAllowance(
            self.cfg.topology.actors, limiter.slack or 0, chunk, actor * GOLDEN % 1.0, clock, limiter.trail
        )

    def learner_feed(
        self, learner: TransitionLearner, counters: Counters, shards: int, priorities_home: PrioritiesHome
    ) -> TransitionFeed:
        """Live actors are counted where a budget holds them (not with `rollout_ahead = 0`)."""
        cfg, slack = self.cfg, self.limiter.slack
        return TransitionFeed(
            learner,
            counters,
            self.limiter,
            self.share_size,
            cfg.learner.minibatches_per_sample,
            cfg.learner.prefetch * shards,
            cfg.learner.checkpoint_interval,
            priorities_home if cfg.replay.mode == "prioritized" else None,
            None if cfg.deterministic or slack is None else LiveActors(LIVE_ROUNDS * slack),
        )

    def reply_layout(self, fields: Fields) -> ReplyLayout:
        """A sample's `sample_size` transitions, with weights where the replay is prioritized."""
        # A chunk of frames is served as transitions of whole stacks (replay/frame_storage.py).
        return ReplyLayout(served_fields(fields), self.sample_size, self.cfg.replay.mode == "prioritized")

    def update_order(self, data: dict[str, Any], arg: int) -> GroupOrder:
        """Only the gradient steps: every rank steps on minibatches it sampled itself."""
        del data
        return GroupOrder("update", steps=int(arg))

    def follower(
        self, learner: TransitionLearner, open_source: Callable[[], SampleSource], shards: int
    ) -> SampleFollower:
        """Its samples held as rank 0's feed holds its own."""
        cfg, source = self.cfg, open_source()
        home = source.send_priorities if cfg.replay.mode == "prioritized" else None
        samples = HeldSamples(self.share_size, cfg.learner.prefetch * shards, home)
        return SampleFollower(learner, source, samples, cfg.learner.minibatches_per_sample, cfg.learner.group_timeout_s)

    def trial_update(self, learner: TransitionLearner, chunks: list[Chunk]) -> Callable[[], object]:
        """One call as the feed makes it, a whole sample's minibatches made of `chunks`."""
        flat = [flatten_time_major(chunk.arrays) for chunk in chunks]
        steps = self.cfg.learner.minibatches_per_sample
        batch = {k: np.concatenate([f[k] for f in flat])[: self.algo.batch_size * steps] for k in flat[0]}
        return lambda: learner.update(batch, steps)


if TYPE_CHECKING:  # mypy checks the regime against what the runtime asks of one
    _CHECKED: type[Regime[TransitionLearner]] = ReplayRatioRegime
