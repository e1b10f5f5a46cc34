"""Flow control: how far actors may run ahead, and what the learner may learn from. Both ends of every rule
live here, side by side (after Acme's rate limiters), and the algorithm names the rule it uses
(`AlgoConfig.flow_control`); a role never asks which algorithm it runs.

- **staleness** (PPO). Actor: its share of a learner batch is `ceil(batch_size / (actors * chunk_size))`
  chunks; it may send `rollout_ahead` shares on the first version of a learner incarnation it sees and one
  share more for every newer version, then waits (a new incarnation restarts the count).
  Learner: chunks more than `max_staleness` versions old are dropped and counted.
- **lockstep** (ES, and every on-policy algorithm in deterministic mode). Actor: as above with
  `rollout_ahead = 1`. Learner: for ES only results for the current version count.
- **replay_ratio** (DDPG). Learner: `floor((env_steps - learning_starts) * replay_ratio)` gradient steps
  are allowed, `env_steps` being the sum of the replay shards' counts (`ShardEnvSteps`, which survives a
  restarted shard); every blob carries `env_step_budget = learning_starts + updates / replay_ratio + slack`,
  `slack = rollout_ahead * actors * chunk_size`. Actor: may take `(budget - blob.env_steps) / actors` more
  env steps, then waits for a newer blob. More actors than the learner can serve therefore slow down instead
  of lowering the replay ratio; `rollout_ahead = 0` removes the budget.

**Elastic fleet.** `actors` above is not the configured count but the number the learner hears from
(`LiveActors`: an actor counts while a chunk of it arrived within the last two versions on-policy, within the
last two slacks of env steps off-policy), published in every blob; the configured count stands in until the
first blob says otherwise. So actors that join mid-run (a new index) shrink everyone's share, and actors
that are gone for good stop being waited for. Between an actor's loss and the learner noticing, an on-policy
batch can fall short by the lost actor's share while the others wait for the next version; an actor that has
waited longer than it ever should (`VersionThrottle.stall_s`: 1.5 times the median interval between the
versions it saw, at least a second; `actor.overdraft_after_s` before it has seen two) takes one share more,
so the batch fills from whoever is alive. The surplus this may create waits in the learner's queue for the
next batch, still bounded by `max_staleness`. Off-policy needs no overdraft: a lost actor's part of the budget
merely goes unused until the next blob. Deterministic runs keep the configured count and never overdraw.

Torch-free and transport-free: the cores call these, and the tests drive them directly.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from surreal.config.schema import ExperimentConfig, OffPolicyConfig
from surreal.proto.wire import BlobMeta, Chunk

# -- the actor's end ------------------------------------------------------------------------------------


class ActorThrottle(Protocol):
    """Told what the actor receives and sends; says when it must wait for newer parameters."""

    def on_params(self, blob: BlobMeta) -> None: ...

    def on_sent(self, env_steps: int) -> None: ...

    def must_wait(self, version: int) -> bool: ...


STALL_FACTOR = 1.5  # an actor overdraws after waiting this many median version intervals ...
STALL_MIN_S = 1.0  # ... and never sooner than this
INTERVALS_KEPT = 8  # version intervals the median is taken over


@dataclass
class VersionThrottle:
    """On-policy: a share of every learner batch per parameter version (0 `rollout_ahead`: never waits)."""

    batch_units: int  # units (`batch_size` counts them) per learner batch
    chunk_units: int  # units per chunk
    actors: int  # how many actors share a batch: the configured count until a blob says
    rollout_ahead: int
    overdraft_after_s: float  # longest wait for a newer version before any interval is known; 0: never overdraw
    clock: Callable[[], float] = time.monotonic
    allowance: int = 0  # chunks this actor may still send
    version: int = -1
    incarnation: str | None = None
    version_at: float = 0.0  # when `version` arrived
    intervals: deque[float] = field(default_factory=lambda: deque(maxlen=INTERVALS_KEPT))
    waiting_since: float | None = None

    @property
    def share(self) -> int:
        return math.ceil(self.batch_units / (self.actors * self.chunk_units))

    def stall_s(self) -> float:
        """How long a wait for a newer version may last before it counts as a stall."""
        if not self.intervals:
            return self.overdraft_after_s
        return max(STALL_MIN_S, STALL_FACTOR * statistics.median(self.intervals))

    def on_params(self, blob: BlobMeta) -> None:
        now = self.clock()
        if blob.actors is not None:
            self.actors = blob.actors
        if blob.incarnation != self.incarnation:  # a resumed learner counts versions from its checkpoint
            self.incarnation, self.version, self.version_at = blob.incarnation, blob.version, now
            self.allowance = self.rollout_ahead * self.share
            self.intervals.clear()
        elif blob.version > self.version:
            newer = blob.version - self.version
            self.allowance += newer * self.share
            self.intervals.append((now - self.version_at) / newer)
            self.version, self.version_at = blob.version, now
        self.waiting_since = None

    def on_sent(self, env_steps: int) -> None:
        del env_steps
        self.allowance -= 1

    def must_wait(self, version: int) -> bool:
        del version  # `on_params` saw it
        if self.rollout_ahead == 0 or self.allowance > 0:
            return False
        now = self.clock()
        if self.waiting_since is None:
            self.waiting_since = now
        elif self.overdraft_after_s > 0 and now - self.waiting_since >= self.stall_s():
            self.allowance, self.waiting_since = self.share, None  # the batch is short of a lost actor's share
            return False
        return True


@dataclass
class EnvStepAllowance:
    """Off-policy: the env steps this actor may still take, its share of the budget the learner published."""

    actors: int  # how many actors share the budget: the configured count until a blob says
    allowance: float = math.inf  # no budget in the blob: unthrottled

    def on_params(self, blob: BlobMeta) -> None:
        if blob.actors is not None:
            self.actors = blob.actors
        if blob.env_step_budget is not None:
            self.allowance = (blob.env_step_budget - blob.env_steps) / self.actors

    def on_sent(self, env_steps: int) -> None:
        self.allowance -= env_steps

    def must_wait(self, version: int) -> bool:
        del version
        return self.allowance <= 0


def actor_throttle(cfg: ExperimentConfig, clock: Callable[[], float] = time.monotonic) -> ActorThrottle:
    """The actor's end of the experiment's rule."""
    algo, actors = cfg.algo, cfg.topology.actors
    if algo.flow_control == "replay_ratio":
        return EnvStepAllowance(actors)
    lockstep = cfg.deterministic or algo.flow_control == "lockstep"
    overdraft_after_s = 0.0 if cfg.deterministic else cfg.actor.overdraft_after_s
    return VersionThrottle(
        algo.batch_size,
        algo.chunk_size(cfg),
        actors,
        1 if lockstep else cfg.actor.rollout_ahead,
        overdraft_after_s,
        clock,
    )


# -- the learner's end ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StalenessBound:
    """On-policy: which chunks an update may use. `max_lag` None: only the current version (lockstep)."""

    max_lag: int | None

    def split(self, chunks: list[Chunk], version: int) -> tuple[list[Chunk], int]:
        """(chunks kept, how many were dropped)."""
        if self.max_lag is None:
            kept = [c for c in chunks if c.version == version]
        else:
            kept = [c for c in chunks if version - c.version <= self.max_lag]
        return kept, len(chunks) - len(kept)


def staleness_bound(cfg: ExperimentConfig) -> StalenessBound:
    return StalenessBound(None if cfg.algo.flow_control == "lockstep" else cfg.learner.max_staleness)


@dataclass(frozen=True)
class ReplayRatioLimiter:
    """Off-policy: gradient steps allowed at the env steps received, and the budget that holds actors."""

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


def replay_ratio_limiter(cfg: ExperimentConfig) -> ReplayRatioLimiter:
    algo = cfg.algo
    if not isinstance(algo, OffPolicyConfig):
        raise TypeError(f"{algo.name} is on-policy: it has no replay ratio")
    ahead = cfg.actor.rollout_ahead
    slack = ahead * cfg.topology.actors * algo.chunk_size(cfg) if ahead else None
    return ReplayRatioLimiter(algo.learning_starts, algo.replay_ratio, slack, algo.publish_interval)


def sample_size(cfg: ExperimentConfig) -> int:
    """What the learner asks a replay shard for per request: on-policy, a batch's worth of units (the FIFO
    packs whole chunks); off-policy, `learner.minibatches_per_sample` minibatches of `algo.batch_size`
    transitions, which the learner steps through as the replay ratio allows."""
    if cfg.algo.on_policy:
        return cfg.algo.batch_size
    return cfg.algo.batch_size * cfg.learner.minibatches_per_sample


@dataclass
class ShardEnvSteps:
    """Env steps received, summed over replay shards from the running count each sample reply carries.

    A shard restarted from empty reports a smaller count: everything it reports then is new. The per-shard
    counts are checkpointed with the learner, so a resumed learner neither recounts nor loses steps."""

    counts: list[int] = field(default_factory=list)

    def observe(self, shard: int, seen: int) -> int:
        """Record shard `shard`'s count; returns the env steps it adds."""
        self.counts.extend([0] * (shard + 1 - len(self.counts)))
        added = seen - self.counts[shard] if seen >= self.counts[shard] else seen
        self.counts[shard] = seen
        return added


LIVE_ROUNDS = 2  # an actor counts as live while it was heard within this many rounds (versions or slacks)


@dataclass
class LiveActors:
    """The actors the learner hears from, on a clock the learner passes in: on-policy its parameter version
    (a live actor sends at least one chunk per version), off-policy the env steps it has received (a live
    actor sends within every slack). An actor counts while heard within `window` ticks; None: none yet."""

    window: int
    last_heard: dict[int, int] = field(default_factory=dict)

    def heard(self, actor: int, now: int) -> None:
        self.last_heard[actor] = now

    def count(self, now: int) -> int | None:
        for actor in [a for a, t in self.last_heard.items() if now - t > self.window]:
            del self.last_heard[actor]  # gone: forgotten, so the map stays as small as the fleet
        return len(self.last_heard) or None


def live_actors(cfg: ExperimentConfig) -> LiveActors | None:
    """The learner's count of live actors, or None where shares stay as configured (deterministic runs, and
    off-policy runs without a budget)."""
    if cfg.deterministic:
        return None
    if cfg.algo.on_policy:
        return LiveActors(LIVE_ROUNDS)
    slack = replay_ratio_limiter(cfg).slack
    return None if slack is None else LiveActors(LIVE_ROUNDS * slack)
