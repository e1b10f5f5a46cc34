"""The capacity model: per-component costs and a cluster description in, env steps/s and the bottleneck out.

Every component is a capacity in env steps per second, the most it could accept if nothing else bound:

- actors: `actors x chunk / t_chunk`, where one chunk (`chunk_steps x envs_per_actor` steps) takes
  `chunk / rate + rtt / param_fetch_interval` (an actor steps on `cores_per_actor` cores at the env's rate per
  core, or at a set `actor_rate`, and waits one round trip for its "newer than v?" check every
  `param_fetch_interval` chunks);
- learner: PPO consumes whole batches, so it accepts `batch / t_update` env steps/s with
  `t_update = update_epochs x minibatches x (step_s + sample_s x minibatch)`; the actors collect the next batch
  while it updates (a version behind, within `learner.max_staleness`), which is why the learner and the actors
  are a min and not a sum.
  DDPG's replay ratio (gradient steps per env step) ties the two: `1 / (ddpg_step_s x replay_ratio)`;
- replay ingest: `shards x cores_per_shard x ingest_per_core` (every env step is one transition in);
- replay egress: `shards x cores_per_shard x egress_per_core`, over the transitions out per env step
  (PPO: 1, each transition once; DDPG: `replay_ratio x batch`);
- ps: `ps_replicas x cores_per_ps` cores over the CPU one env step costs there: its share of "newer than v?"
  checks answered "not modified" and of blob answers (PPO: every actor fetches each version once, i.e.
  `actors / batch` blobs per env step; DDPG: at most one blob per check);
- network (only with `network_gbit`): the ps replicas' links over the blob bytes per env step, the shards'
  links over the transition bytes in and, separately, out; the learner's one link over the bytes it samples.

Throughput is the minimum; the bottleneck is the component that sets it. Learner updates/s follow from it
(PPO: steps / batch; DDPG: steps x replay ratio). No sockets, no timing: `predict` is pure arithmetic, so the
unit tests construct costs and check the choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class LearnerCost:
    """One device's learner. PPO: a minibatch step costs `step_s + sample_s x minibatch` (framework overhead
    plus work per sample); DDPG: a gradient step of the default 256 batch costs `ddpg_step_s`."""

    step_s: float
    sample_s: float
    ddpg_step_s: float | None  # None: not measured on this device

    def ppo_update_s(self, batch: int, minibatches: int, epochs: int) -> float:
        minibatch = max(1, batch // minibatches)
        return epochs * minibatches * (self.step_s + self.sample_s * minibatch)


@dataclass(frozen=True)
class Costs:
    """Per-component costs; `sources` says where each figure came from (a results file or --measure)."""

    actor_steps_per_core: dict[str, float]  # env id -> env steps/s one actor makes on one core (env + policy)
    learner: dict[str, LearnerCost]  # device name -> its learner cost
    shard_ingest_per_core: float  # transitions/s one shard takes in (decode, validate, store) per core
    shard_egress_per_core: float  # transitions/s one shard samples and frames per core
    ps_checks_per_core: float  # "newer than v?" requests answered "not modified" per second per core
    ps_fetches_per_core: float  # requests answered with the blob per second per core
    blob_bytes: int  # one parameter blob on the wire (HalfCheetah-v5's PPO 64-64 policy)
    transition_bytes: int  # one HalfCheetah-v5 transition on the wire
    sources: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "actor_steps_per_core": self.actor_steps_per_core,
            "learner": {k: vars(v) for k, v in self.learner.items()},
            **{
                k: getattr(self, k)
                for k in (
                    "shard_ingest_per_core",
                    "shard_egress_per_core",
                    "ps_checks_per_core",
                    "ps_fetches_per_core",
                    "blob_bytes",
                    "transition_bytes",
                )
            },
            "sources": self.sources,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Costs:
        return cls(**{**data, "learner": {k: LearnerCost(**v) for k, v in data["learner"].items()}})


@dataclass(frozen=True)
class Cluster:
    """What runs where. `actor_rate` (env steps/s of one actor) replaces `cores_per_actor x` the env's rate per
    core when set: a simulated fleet's pace. `network_gbit` None: no network between the roles (one box)."""

    actors: int
    algo: str = "ppo"
    env: str = "HalfCheetah-v5"
    envs_per_actor: int = 1
    cores_per_actor: float = 1.0
    actor_rate: float | None = None
    shards: int = 1
    cores_per_shard: float = 1.0
    ps_replicas: int = 1
    cores_per_ps: float = 1.0
    learner_device: str = "cpu"
    network_gbit: float | None = None
    rtt_ms: float = 0.0
    chunk_steps: int = 64
    batch_size: int | None = None  # PPO; None: one chunk per actor per version, at least 2,048
    minibatches: int = 32
    update_epochs: int = 10
    ddpg_batch: int = 256
    replay_ratio: float = 0.1  # DDPG: gradient steps per env step
    param_fetch_interval: int = 1  # chunks between "newer than v?" checks

    @property
    def chunk(self) -> int:
        return self.chunk_steps * self.envs_per_actor

    @property
    def batch(self) -> int:
        return self.batch_size or max(2048, self.actors * self.chunk)


@dataclass(frozen=True)
class Prediction:
    env_steps_per_s: float
    updates_per_s: float
    bottleneck: str
    capacities: dict[str, float]  # env steps/s each component could accept

    def to_json(self) -> dict[str, Any]:
        return {
            "env_steps_per_s": round(self.env_steps_per_s, 1),
            "updates_per_s": round(self.updates_per_s, 3),
            "bottleneck": self.bottleneck,
            "capacities": {k: round(v, 1) for k, v in self.capacities.items()},
        }


def actor_rate(c: Cluster, costs: Costs) -> float:
    """One actor's env steps/s while it steps."""
    if c.actor_rate is not None:
        return c.actor_rate
    if c.env not in costs.actor_steps_per_core:
        raise KeyError(f"no actor cost for env {c.env!r} (have: {', '.join(sorted(costs.actor_steps_per_core))})")
    return c.cores_per_actor * costs.actor_steps_per_core[c.env]


def learner_cost(c: Cluster, costs: Costs) -> LearnerCost:
    if c.learner_device not in costs.learner:
        raise KeyError(f"no learner cost for device {c.learner_device!r} (have: {', '.join(sorted(costs.learner))})")
    return costs.learner[c.learner_device]


def capacities(c: Cluster, costs: Costs) -> dict[str, float]:
    """Env steps/s each component could accept on its own (see the module's docstring)."""
    t_chunk = c.chunk / actor_rate(c, costs) + c.rtt_ms / 1e3 / c.param_fetch_interval
    cost = learner_cost(c, costs)
    if c.algo == "ppo":
        learner = c.batch / cost.ppo_update_s(c.batch, c.minibatches, c.update_epochs)
        out_per_step = 1.0
        blobs_per_step = min(c.actors / c.batch, 1.0 / (c.chunk * c.param_fetch_interval))
    elif c.algo == "ddpg":
        if cost.ddpg_step_s is None:
            raise KeyError(f"no DDPG learner cost for device {c.learner_device!r}")
        learner = 1.0 / (cost.ddpg_step_s * c.replay_ratio)
        out_per_step = c.replay_ratio * c.ddpg_batch
        blobs_per_step = 1.0 / (c.chunk * c.param_fetch_interval)  # at most: one per check
    else:
        raise ValueError(f"the model knows ppo and ddpg, not {c.algo!r}")
    checks_per_step = 1.0 / (c.chunk * c.param_fetch_interval)
    ps_cpu_per_step = max(0.0, checks_per_step - blobs_per_step) / costs.ps_checks_per_core
    ps_cpu_per_step += blobs_per_step / costs.ps_fetches_per_core
    caps = {
        "actors": c.actors * c.chunk / t_chunk,
        "learner": learner,
        "replay ingest": c.shards * c.cores_per_shard * costs.shard_ingest_per_core,
        "replay egress": c.shards * c.cores_per_shard * costs.shard_egress_per_core / out_per_step,
        "ps": c.ps_replicas * c.cores_per_ps / ps_cpu_per_step,
    }
    if c.network_gbit is not None:
        link = c.network_gbit * 1e9 / 8  # bytes/s, each way
        caps["ps network"] = c.ps_replicas * link / (blobs_per_step * costs.blob_bytes)
        caps["replay network in"] = c.shards * link / costs.transition_bytes
        caps["replay network out"] = c.shards * link / (out_per_step * costs.transition_bytes)
        caps["learner network"] = link / (out_per_step * costs.transition_bytes)
    return caps


def predict(c: Cluster, costs: Costs) -> Prediction:
    """Env steps/s accepted, learner updates/s and the component that binds first."""
    caps = capacities(c, costs)
    bottleneck = min(caps, key=caps.__getitem__)
    steps = caps[bottleneck]
    updates = steps / c.batch if c.algo == "ppo" else steps * c.replay_ratio
    return Prediction(steps, updates, bottleneck, caps)


def size_services(c: Cluster, costs: Costs, headroom: float = 1.5) -> Cluster:
    """The rule for a values file: replay shards and ps replicas whose capacities stay at least `headroom` x
    what can reach them, so neither binds however the fleet runs. What comes in (chunks, "newer than v?" checks
    and blobs) is sized for the most the actors could send; what goes out of replay (samples) only ever flows at
    the learner's pace, so it is sized for min(actors, learner). Links are sized the same way when a network is
    given. Counts are rounded up to a power of two, so a rerun of the micro-benchmarks on a loaded box (their
    figures move by 10-20 %) rarely moves them."""
    caps = capacities(replace(c, shards=1, ps_replicas=1), costs)
    inflow = headroom * caps["actors"]
    outflow = headroom * min(caps["actors"], caps["learner"])

    def count(needs: dict[str, float]) -> int:
        need = max(math.ceil(target / caps[k]) for k, target in needs.items() if k in caps)
        return 1 << (need - 1).bit_length()

    shards = count(
        {"replay ingest": inflow, "replay network in": inflow, "replay egress": outflow, "replay network out": outflow}
    )
    return replace(c, shards=shards, ps_replicas=count({"ps": inflow, "ps network": inflow}))
