"""The capacity model: per-event costs and a cluster description in, env steps/s, learner updates/s and the
bottleneck out, by running the simulator (src/surreal/sim/capacity.py) on the roles' own cores.

A cluster becomes a scenario (`scenario`): its actors collect chunks at the measured (or set) rate of the env
and policy on their cores, its shards spend the measured time per transition in and out, its ps replicas per blob
and per "not modified" answer, its learner per PPO minibatch step and sample (or DDPG gradient step), and its links,
given a network, carry each message's real bytes at its bandwidth and a quarter of the round trip on each side. The
cores decide everything else as they do in a run: the batch rule, shares and holds, staleness, the replay ratio,
backpressure. The simulated run's learner counters give the throughput and each part's busy share names the
bottleneck (sim/capacity.py); no formula per component.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cache
from typing import Any

from surreal.sim.capacity import Load, measure
from surreal.sim.nodes import Costs as LearnerTimes
from surreal.sim.nodes import ServiceCosts
from surreal.sim.scenarios import Scenario


@dataclass(frozen=True)
class LearnerCost:
    """One device's learner. PPO: a minibatch step costs `step_s + sample_s x minibatch` (framework overhead
    plus work per sample); DDPG: a gradient step of the default 256 batch costs `ddpg_step_s`."""

    step_s: float
    sample_s: float
    ddpg_step_s: float | None  # None: not measured on this device


@dataclass(frozen=True)
class Costs:
    """Per-component costs; `sources` says where each figure came from (a results file or --measure)."""

    actor_steps_per_core: dict[str, float]  # env id -> env steps/s one actor makes on one core (env + policy)
    learner: dict[str, LearnerCost]  # device name -> its learner cost
    shard_ingest_per_core: float  # transitions/s one shard takes in (decode, validate, store) per core
    shard_egress_per_core: float  # transitions/s one shard samples and frames per core
    ps_checks_per_core: float  # "newer than v?" requests answered "not modified" per second per core
    ps_fetches_per_core: float  # requests answered with the blob per second per core
    sources: dict[str, str] = field(default_factory=dict)
    pixel_learner: dict[str, LearnerCost] = field(default_factory=dict)  # device -> the Nature CNN's learner cost
    pixel_shard_ingest_per_core: float | None = None  # transitions/s of packed frame chunks into a shard, per core

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Costs:
        """The file's costs; what a message weighs (`blob_bytes`, `transition_bytes` in older files) the simulator
        takes from the messages themselves."""
        known = {f.name for f in fields(cls)} - {"learner", "pixel_learner"}
        return cls(
            **{k: v for k, v in data.items() if k in known},
            learner={k: LearnerCost(**v) for k, v in data["learner"].items()},
            pixel_learner={k: LearnerCost(**v) for k, v in data.get("pixel_learner", {}).items()},
        )


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


def actor_rate(c: Cluster, costs: Costs) -> float:
    """One actor's env steps/s while it steps."""
    if c.actor_rate is not None:
        return c.actor_rate
    if c.env not in costs.actor_steps_per_core:
        raise KeyError(f"no actor cost for env {c.env!r} (have: {', '.join(sorted(costs.actor_steps_per_core))})")
    return c.cores_per_actor * costs.actor_steps_per_core[c.env]


def learner_times(c: Cluster, costs: Costs) -> LearnerTimes:
    """The simulated learner's time per update: PPO's epochs x minibatch steps and its samples, or DDPG's step;
    for an env of image observations, the Nature CNN's (`pixel_learner`)."""
    learners, which = (costs.pixel_learner, "pixel learner") if env_shape(c.env)[1] else (costs.learner, "learner")
    if c.learner_device not in learners:
        raise KeyError(
            f"no {which} cost for device {c.learner_device!r} (have: {', '.join(sorted(learners)) or 'none'})"
        )
    cost = learners[c.learner_device]
    if c.algo == "ppo":
        return LearnerTimes(
            update_s=c.update_epochs * c.minibatches * cost.step_s, per_unit_s=c.update_epochs * cost.sample_s
        )
    if c.algo == "ddpg":
        if cost.ddpg_step_s is None:
            raise KeyError(f"no DDPG learner cost for device {c.learner_device!r}")
        return LearnerTimes(update_s=0.0, gradient_step_s=cost.ddpg_step_s)
    raise ValueError(f"the model knows ppo and ddpg, not {c.algo!r}")


@cache
def env_shape(env_id: str) -> tuple[tuple[int, int], tuple[int, ...] | None]:
    """The env's flat observation and action sizes (what a chunk and a blob weigh), from the env itself, and for
    image observations (an Atari stack, 4 x 84 x 84 uint8) their shape: the simulator then sends its chunks as
    frames and indices, as the actors do (sim/nodes.py `ScriptedChunks`), and its actions are discrete."""
    from gymnasium.spaces import Discrete, flatdim

    from surreal.envs import make_vec_env
    from surreal.spaces import is_channels_first

    envs = make_vec_env(env_id, 1, 0)
    try:
        obs, act = envs.single_observation_space, envs.single_action_space
        actions = int(act.n) if isinstance(act, Discrete) else flatdim(act)
        return (flatdim(obs), actions), tuple(obs.shape or ()) if is_channels_first(obs) else None
    finally:
        envs.close()


def scenario(c: Cluster, costs: Costs, learner: LearnerTimes | None = None) -> Scenario:
    """The cluster as a simulated run (the module's docstring); `learner` replaces the measured learner's times."""
    overrides = [
        f"topology.envs_per_actor={c.envs_per_actor}",
        f"actor.param_fetch_interval={c.param_fetch_interval}",
        "learner.checkpoint_interval=1000000000",
        "learner.checkpoint_interval_s=1000000000",
    ]
    if c.algo == "ppo":
        overrides += [
            f"algo.batch_size={c.batch}",
            f"algo.minibatch_size={max(1, c.batch // c.minibatches)}",
            f"algo.update_epochs={c.update_epochs}",
            f"replay.capacity={4 * c.batch}",
        ]
    else:
        overrides += [f"algo.batch_size={c.ddpg_batch}", f"algo.replay_ratio={c.replay_ratio}"]  # replay: the default
    link = None if c.network_gbit is None else c.network_gbit * 1e9 / 8  # bytes/s, each way
    dims, pixels = env_shape(c.env)
    ingest = costs.shard_ingest_per_core
    if pixels is not None and costs.pixel_shard_ingest_per_core:
        ingest = costs.pixel_shard_ingest_per_core
    return Scenario(
        f"capacity-{c.actors}",
        "a cluster's capacity",
        algo=c.algo,
        actors=c.actors,
        shards=c.shards,
        ps=c.ps_replicas,
        overrides=tuple(overrides),
        total_env_steps=1 << 62,
        rate=actor_rate(c, costs),
        chunk_steps=c.chunk_steps,
        costs=learner or learner_times(c, costs),
        jitter_s=0.0,
        snapshot_interval_s=0.0,
        links=(c.rtt_ms / 1e3 / 4, link),  # a message crosses two links; a round trip, four
        service_costs=ServiceCosts(
            ingest_s=1 / (ingest * c.cores_per_shard),
            egress_s=1 / (costs.shard_egress_per_core * c.cores_per_shard),
            blob_s=1 / (costs.ps_fetches_per_core * c.cores_per_ps),
            not_modified_s=1 / (costs.ps_checks_per_core * c.cores_per_ps),
        ),
        env_dims=dims,
        pixels=pixels,
        hidden_sizes=None,
    )


def predict(c: Cluster, costs: Costs) -> Load:
    """Env steps/s accepted, learner updates/s and the part that binds first, from a simulated run."""
    return measure(scenario(c, costs))


SLICE = 16  # actors in the sizing rule's probe


def size_services(c: Cluster, costs: Costs, headroom: float = 1.5) -> Cluster:
    """The rule for a values file: replay shards and ps replicas that stay busy at most 1 / `headroom` of the
    time under what can reach them, so neither binds however the fleet runs. What comes in (chunks, "newer than
    v?" checks and blobs) is sized for the most the actors could send: a probe of SLICE of the cluster's actors
    (a batch of as many chunks per actor) against a learner and services that never bind (a shard and a ps replica
    per actor) gives each service's work and bytes per env step at the actors' full pace, scaled to the whole
    fleet. What goes out of replay (samples) only flows at the learner's pace: min(actors, learner), the learner's
    capacity from the cluster's own prediction. A shard does both on the same cores, so its two loads add. Counts
    are rounded up to a power of two, so a rerun of the micro-benchmarks on a loaded box (their figures move by
    10-20 %) rarely moves them."""
    k = min(c.actors, SLICE)
    batch = max(c.chunk, c.batch * k // c.actors) if c.algo == "ppo" else None
    probe_cluster = replace(c, actors=k, batch_size=batch, shards=k, ps_replicas=k)  # services that never bind
    probe = measure(scenario(probe_cluster, costs, LearnerTimes(0.0, 0.0, 0.0)), warmup_s=2.0, window_s=5.0)
    actors = probe.env_steps_per_s * c.actors / k  # env steps/s the whole fleet could send
    learner = predict(c, costs).capacities["learner"]
    inflow, outflow = headroom * actors, headroom * min(actors, learner)
    w = probe.per_step
    link = math.inf if c.network_gbit is None else c.network_gbit * 1e9 / 8

    def count(*need: float) -> int:
        return 1 << (max(1, math.ceil(max(need))) - 1).bit_length()

    shards = count(
        inflow * w["replay ingest"] + outflow * w["replay egress"],
        inflow * w.get("replay network in", 0.0) / link,
        outflow * w.get("replay network out", 0.0) / link,
    )
    ps = count(inflow * w["ps"], inflow * w.get("ps network out", 0.0) / link)
    return replace(c, shards=shards, ps_replicas=ps)
