"""Flow control: how far actors may run ahead, and what the learner may learn from. Both ends of every rule
live here, side by side (after Acme's rate limiters), and the algorithm names the rule it uses
(`AlgoConfig.flow_control`); a role never asks which algorithm it runs.

- **staleness** (PPO). Actor: its share of a learner batch is `ceil(batch_size / (actors * chunk_size))`
  chunks; having seen versions `base .. base + n` of one learner incarnation it may have sent
  `(n + rollout_ahead)` shares, then waits for the next version (a new incarnation restarts the count).
  Learner: chunks more than `max_staleness` versions old are dropped and counted.
- **lockstep** (ES, and every on-policy algorithm in deterministic mode). Actor: as above with
  `rollout_ahead = 1`. Learner: for ES only results for the current version count.
- **replay_ratio** (DDPG). Learner: `floor((env_steps - learning_starts) * replay_ratio)` gradient steps
  are allowed, `env_steps` being the sum of the replay shards' counts (`ShardEnvSteps`, which survives a
  restarted shard); every blob carries `env_step_budget = learning_starts + updates / replay_ratio + slack`,
  `slack = rollout_ahead * actors * chunk_size`. Actor: may take `(budget - blob.env_steps) / actors` more
  env steps, then waits for a newer blob. More actors than the learner can serve therefore slow down instead
  of lowering the replay ratio; `rollout_ahead = 0` removes the budget.

Torch-free and transport-free: the cores call these, and the tests drive them directly.
"""

from __future__ import annotations

import math
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


@dataclass
class VersionThrottle:
    """On-policy: at most `rollout_ahead` shares per parameter version seen (0: never waits)."""

    share: int  # chunks per learner batch that fall to this actor
    rollout_ahead: int
    base_version: int = 0
    sent_since_base: int = 0
    incarnation: str | None = None

    def on_params(self, blob: BlobMeta) -> None:
        if blob.incarnation != self.incarnation:  # a resumed learner counts versions from its checkpoint
            self.base_version, self.sent_since_base, self.incarnation = blob.version, 0, blob.incarnation

    def on_sent(self, env_steps: int) -> None:
        del env_steps
        self.sent_since_base += 1

    def must_wait(self, version: int) -> bool:
        allowed = (version - self.base_version + self.rollout_ahead) * self.share
        return self.rollout_ahead > 0 and self.sent_since_base >= allowed


@dataclass
class EnvStepAllowance:
    """Off-policy: the env steps this actor may still take, its share of the budget the learner published."""

    actors: int
    allowance: float = math.inf  # no budget in the blob: unthrottled

    def on_params(self, blob: BlobMeta) -> None:
        if blob.env_step_budget is not None:
            self.allowance = (blob.env_step_budget - blob.env_steps) / self.actors

    def on_sent(self, env_steps: int) -> None:
        self.allowance -= env_steps

    def must_wait(self, version: int) -> bool:
        del version
        return self.allowance <= 0


def actor_throttle(cfg: ExperimentConfig) -> ActorThrottle:
    """The actor's end of the experiment's rule."""
    algo, actors = cfg.algo, cfg.topology.actors
    if algo.flow_control == "replay_ratio":
        return EnvStepAllowance(actors)
    lockstep = cfg.deterministic or algo.flow_control == "lockstep"
    share = math.ceil(algo.batch_size / (actors * algo.chunk_size(cfg)))
    return VersionThrottle(share, 1 if lockstep else cfg.actor.rollout_ahead)


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
