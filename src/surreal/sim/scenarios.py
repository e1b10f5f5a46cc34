"""Scenarios: a topology, its workload and its faults, run from a seed with every invariant checked (ledger.py).

    surreal sim --list                      the scenarios and what each does
    surreal sim ppo-1024-churn --seed 7     one run: its report, and exit 1 if an invariant broke
    surreal sim --all --seeds 3             every scenario under seeds 0, 1, 2

A scenario is data (`Scenario`): the experiment's overrides, the fleet, the learner's costs, the network and the
faults at their times; `run` builds the world (sim/nodes.py), runs it to the scenario's deadline or until the run
completes, and returns a `Report` whose `violations` name each broken invariant with its first instances. The same
scenario and seed give the same run, event for event (`Report.fingerprint`).
"""

from __future__ import annotations

import hashlib
import math
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from surreal.algos import get_algorithm
from surreal.config import ExperimentConfig, algo_config, load_config
from surreal.launch.supervisor import BACKOFF_START_S
from surreal.run.preflight import with_layout
from surreal.runtime.regimes import regime_of
from surreal.runtime.regimes.replay_ratio import ReplayRatioRegime
from surreal.runtime.regimes.versions import STALL_MIN_S, VersionsRegime
from surreal.sim.hostile import PARKERS, HostileActor, HostileLearnerPeer, HostileParker, HostileShard
from surreal.sim.ledger import ChunkId, Ledger, chunks_in
from surreal.sim.nodes import (
    ActorNode,
    Costs,
    Fleet,
    FollowerNode,
    InferenceCosts,
    InferenceNode,
    LearnerNode,
    Process,
    ProcessGroup,
    PsNode,
    RemoteScriptedActor,
    ReplayNode,
    ScriptedChunks,
    ServiceCosts,
    fifo_chunks,
)
from surreal.sim.world import Network, Node, World

PENDULUM = (3, 1)  # Pendulum-v1's observation and action sizes: no env is ever made


def env_spaces(
    dims: tuple[int, int], pixels: tuple[int, ...] | None = None
) -> tuple[spaces.Box, spaces.Box | spaces.Discrete]:
    """An env's observation and action spaces of these sizes, as the actors' chunks and the blobs shape them; with
    `pixels`, uint8 images of that shape (planes, H, W) and `dims[1]` discrete actions, as an Atari env's."""
    if pixels is not None:
        return spaces.Box(0, 255, pixels, np.uint8), spaces.Discrete(dims[1])
    return spaces.Box(-np.inf, np.inf, (dims[0],), np.float32), spaces.Box(-2.0, 2.0, (dims[1],), np.float32)


@dataclass(frozen=True)
class Fault:
    """At `at` (virtual seconds): `kind` on `targets` (node names). kill: SIGKILL, the supervisor restarts it;
    term: SIGTERM (a preemption or drain; an actor leaves for good, a service comes back); pause: the process
    takes nothing in for `seconds`; partition: `targets` cut off from `others` for `seconds`; join: actors
    `targets` (indices as names: actor-<i>) start."""

    at: float
    kind: str
    targets: tuple[str, ...]
    seconds: float = 0.0
    others: tuple[str, ...] = ()


@dataclass(frozen=True)
class Churn:
    """Between `start` and `end`, every `every_s` on average one event: a random live actor killed (restarted by
    the supervisor), one leaving (SIGTERM, gone), or a new one joining, in these proportions."""

    start: float
    end: float
    every_s: float
    kill: float = 0.5
    leave: float = 0.25
    join: float = 0.25


@dataclass(frozen=True)
class Scenario:
    name: str
    doc: str
    algo: str = "ppo"
    actors: int = 16
    shards: int = 1
    ps: int = 1
    overrides: tuple[str, ...] = ()
    total_env_steps: int = 200_000
    deadline_s: float = 600.0  # virtual seconds by which the run must complete
    min_duration_s: float = 0.0  # and it must last at least this long
    rate: float = 500.0  # env steps per second of one actor
    chunk_steps: int = 64
    costs: Costs | None = None  # default: PPO's update 0.2 s a batch; DDPG's 4 ms a gradient step
    faults: tuple[Fault, ...] = ()
    churn: Churn | None = None
    steady: tuple[tuple[float, float], ...] = ()  # windows where every blob must count the actors alive
    slow_half: tuple[float, float | None] | None = None  # (latency_s, bandwidth bytes/s) of half the fleet's links
    links: tuple[float, float | None] | None = None  # (latency_s, bandwidth bytes/s) of every node's link
    jitter_s: float = 0.0002
    drop_p: float = 0.0
    hostile: tuple[str, ...] = ()  # "actor", "shard", "learner", "parkers": hostile peers beside the honest ones
    snapshot_interval_s: float = 30.0
    tolerated_losses: int = 0
    service_costs: ServiceCosts = ServiceCosts()  # the shards' and ps replicas' time per event (none: instant)
    env_dims: tuple[int, int] = PENDULUM  # observation and action sizes: what chunks, samples and blobs weigh
    hidden_sizes: str | None = "[16]"  # the policy's widths (None: the algorithm's default)
    pixels: tuple[int, ...] | None = None  # image observations of this shape (an Atari stack: (4, 84, 84)), uint8
    inference_workers: int = 0  # central inference (`topology.inference=central`) with this many workers; 0: none
    inference_costs: InferenceCosts = InferenceCosts()
    slow_worker: float = 1.0  # what inference-0's costs are multiplied by
    replicas: int = 1  # a learner group of this many ranks (`learner.replicas`): rank 0 and FollowerNodes

    def config(self) -> ExperimentConfig:
        overrides = [
            f"algo={self.algo}",
            "env=Pendulum-v1",
            f"actors={self.actors}",
            f"topology.replay_shards={self.shards + ('shard' in self.hostile)}",
            f"topology.ps_replicas={self.ps}",
            "topology.envs_per_actor=1",
            f"actor.chunk_steps={self.chunk_steps}",
            f"steps={self.total_env_steps}",
            "device=cpu",
            "learner.keep_checkpoints=1",
            *([f"algo.hidden_sizes={self.hidden_sizes}"] if self.hidden_sizes else []),
        ]
        if self.replicas > 1:
            overrides.append(f"learner.replicas={self.replicas}")
        if self.inference_workers:
            overrides += ["topology.inference=central", f"topology.inference_workers={self.inference_workers}"]
        if self.algo == "ppo":
            overrides += ["algo.batch_size=2048", "algo.minibatch_size=256", "replay.capacity=16384"]
        elif self.algo == "es":
            overrides += ["algo.batch_size=32", "algo.noise_table_size=100000", "replay.capacity=1024"]
        else:
            overrides += ["algo.learning_starts=5000", "algo.replay_ratio=0.25", "replay.capacity=200000"]
        # The package's defaults under the scenario's own keys: a scenario models the configuration it names, and
        # the task defaults (conf/tasks.yaml, for `surreal run`'s users) would change it behind its back.
        return load_config([*overrides, *self.overrides], tasks=False)


@dataclass
class Report:
    scenario: str
    seed: int
    violations: dict[str, list[str]]
    sim_s: float
    wall_s: float
    events: int
    stats: dict[str, Any]
    fingerprint: str

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        verdict = "ok" if self.ok else "FAILED " + ", ".join(sorted(self.violations))
        s = self.stats
        learned = (
            f"{s['chunks_learned']:,}/{s['chunks_sent']:,} chunks learned"
            if s["chunks_learned"]
            else f"{s['transitions_learned']:,} transitions sampled"
        )
        return (
            f"{self.scenario} seed {self.seed}: {verdict}; {self.sim_s:.0f} s simulated in {self.wall_s:.1f} s "
            f"({self.events:,} events); {s['env_steps']:,} env steps, {s['updates']:,} updates, {learned}, "
            f"live {s['live_actors']}"
        )


class Sim:
    """One scenario's world: the roles as nodes, the fleet, the faults, the ledger."""

    def __init__(self, scenario: Scenario, seed: int, run_dir: Path) -> None:
        self.scenario, self.seed = scenario, seed
        self.cfg = cfg = replace(scenario.config(), seed=seed)
        self.world = world = World(seed)
        self.net = net = Network(world, scenario.jitter_s, scenario.drop_p)
        algo = get_algorithm(cfg.algo.name)
        if scenario.pixels is not None and scenario.inference_workers:
            raise ValueError("the simulator's inference workers take flat observations only, not pixels")
        self.spaces = obs_space, act_space = env_spaces(scenario.env_dims, scenario.pixels)
        fields = algo.chunk_fields(obs_space, act_space, algo_config(cfg))
        if cfg.replay.mode != "fifo":  # the shards are laid out by the experiment, as the launcher lays them out
            cfg = self.cfg = with_layout(cfg, fields)
        pairs = cfg.algo.name == "es"  # a chunk of whole-episode pairs
        envs = cfg.algo.chunk_size(cfg) if pairs else cfg.topology.envs_per_actor
        self.chunks = ScriptedChunks(fields, scenario.chunk_steps, envs, pairs)
        max_staleness, ratio = ledger_rules(cfg)
        self.ledger = ledger = Ledger(max_staleness, self.chunks.env_steps, ratio, scenario.tolerated_losses)
        self.shards: list[Node] = [
            ReplayNode(world, net, i, cfg, ledger, scenario.snapshot_interval_s, scenario.service_costs)
            for i in range(scenario.shards)
        ]
        self.honest_shards = list(self.shards)
        if "shard" in scenario.hostile:  # among the learner's shards only: actors push to the honest ones
            self.shards.append(HostileShard(world, net, len(self.shards), cfg, fields))
        self.ps = [PsNode(world, net, i, ledger, scenario.service_costs) for i in range(scenario.ps)]
        self.workers: list[Node] = [
            InferenceNode(
                world,
                net,
                i,
                cfg,
                self.ps,
                ledger,
                *scenario.env_dims,
                replace(scenario.inference_costs, slow=scenario.slow_worker if i == 0 else 1.0),
            )  # fmt: skip
            for i in range(scenario.inference_workers)
        ]
        params = _blob_params(cfg, self.spaces)
        costs = scenario.costs or (Costs() if ledger.replay_ratio is None else Costs(update_s=0.001))
        group = ProcessGroup(scenario.replicas, cfg.learner.group_timeout_s) if scenario.replicas > 1 else None
        self.learner = LearnerNode(
            world, net, cfg, run_dir, self.spaces, fields, params, self.shards, self.ps, ledger, costs, group,
        )  # fmt: skip
        layout = regime_of(cfg).reply_layout(fields)
        self.ranks = [
            FollowerNode(world, net, rank, cfg, group, self.shards, layout, costs, ledger)
            for rank in range(1, scenario.replicas)
            if group is not None
        ]
        self.actors: dict[int, ActorNode] = {}
        self.fleet = Fleet(world)
        for i in range(scenario.actors):
            self.add_actor(i, start_at=world.rng.random())  # processes start over the first second
        self.next_index = scenario.actors
        self.hostile: list[Node] = []
        if "actor" in scenario.hostile:
            self.hostile.append(HostileActor(world, net, self.honest_shards, self.ps, fields, scenario.chunk_steps))
        if "learner" in scenario.hostile:
            self.hostile.append(HostileLearnerPeer(world, net, self.honest_shards))
        if "parkers" in scenario.hostile:
            self.hostile += [HostileParker(world, net, i, self.honest_shards) for i in range(PARKERS)]
        if scenario.links is not None:
            for node in net.nodes.values():
                node.latency_s, node.bandwidth = scenario.links
        if scenario.slow_half is not None:
            latency_s, bandwidth = scenario.slow_half
            for i, actor in self.actors.items():
                if i % 2:
                    actor.latency_s, actor.bandwidth = latency_s, bandwidth
        for fault in scenario.faults:
            world.at(fault.at, self.apply, fault)
        if scenario.churn is not None:
            world.at(scenario.churn.start, self.churn_event)

    # -- the fleet -----------------------------------------------------------------------------------------

    def add_actor(self, index: int, start_at: float) -> None:
        s = self.scenario
        self.actors[index] = ActorNode(
            self.world, self.net, index, self.cfg, self.chunks, self.honest_shards, self.ps, self.ledger, s.rate,
            self.fleet, start_at, self.workers, s.env_dims[0],
        )  # fmt: skip

    def apply(self, fault: Fault) -> None:
        nodes = self.net.nodes
        if fault.kind == "join":
            for name in fault.targets:
                self.add_actor(int(name.rsplit("-", 1)[1]), self.world.now)
            return
        if fault.kind == "partition":
            self.net.partition(set(fault.targets), set(fault.others))
            self.world.after(fault.seconds, self.net.heal)
            return
        for name in fault.targets:
            node = nodes[name]
            assert isinstance(node, Process)
            if fault.kind == "kill":
                node.sigkill()
            elif fault.kind == "term":
                node.sigterm()
            elif fault.kind == "pause":
                node.paused_until = self.world.now + fault.seconds
            else:
                raise ValueError(f"unknown fault {fault.kind!r}")

    def churn_event(self) -> None:
        churn, rng = self.scenario.churn, self.world.rng
        assert churn is not None
        if self.world.now > churn.end:
            return
        live = [a for a in self.actors.values() if a.alive and not a.finished]
        pick = rng.random() * (churn.kill + churn.leave + churn.join)
        if pick < churn.kill and live:
            rng.choice(live).sigkill()
        elif pick < churn.kill + churn.leave and live:
            rng.choice(live).sigterm()
        else:
            self.add_actor(self.next_index, self.world.now)
            self.next_index += 1
        self.world.after(rng.expovariate(1 / churn.every_s), self.churn_event)

    # -- running and checking ------------------------------------------------------------------------------

    def complete(self) -> bool:
        return self.learner.finished and all(a.finished or not a.alive for a in self.actors.values())

    def last_event_s(self) -> float:
        """When the scenario's last fault, churn or steady window ends: the run must outlast it (`completes`)."""
        s = self.scenario
        ends = [f.at + f.seconds for f in s.faults] + [end for _, end in s.steady] + [s.min_duration_s]
        if s.churn is not None and s.churn.end < s.deadline_s:
            ends.append(s.churn.end)
        return max(ends)

    def run(self) -> None:
        s, last = self.scenario, self.last_event_s()
        self.world.run(s.deadline_s, lambda: self.world.now >= last and self.complete())

    def held(self) -> Counter[ChunkId]:
        """Every honest chunk still held at the end: shards, the learner, pipes (held or on the wire)."""
        held: Counter[ChunkId] = Counter()
        for shard in self.shards:
            if isinstance(shard, ReplayNode) and shard.alive:
                held.update(fifo_chunks(shard.shard))
        if self.learner.alive:
            held.update(self.learner.held_chunks())
        for message in self.net.held():
            held.update(chunks_in(message))
        return held

    def check(self) -> dict[str, list[str]]:
        ledger, s, c = self.ledger, self.scenario, self.learner.core.counters
        if not self.learner.finished or ledger.done_at is None:
            ledger.violate("completes", f"the learner reached {c.env_steps} of {self.cfg.total_env_steps} env steps")
        for rank in self.ranks:
            if rank.alive or rank.exits[-1:] != [0]:
                ledger.violate("completes", f"{rank.name} was not ended by rank 0's `finish`")
            made = c.updates - self.learner.updates_at_start
            if rank.scripted.updates != made:
                ledger.violate(
                    "group", f"{rank.name} made {rank.scripted.updates} updates, rank 0 {made} since it began"
                )
        unfinished = [a.name for a in self.actors.values() if a.alive and not a.finished]
        if unfinished:
            ledger.violate("completes", f"{len(unfinished)} live actors never finished: {unfinished[:5]}")
        if self.world.now < self.last_event_s():
            ledger.violate("completes", f"ended at {self.world.now:.0f} s, before {self.last_event_s():.0f} s")
        if ledger.lost_on_stop:
            ledger.violate("chunks", f"{ledger.lost_on_stop} chunks refused on their actors' way out")
        if refused := ledger.learner_refused["too_many_pending"]:
            ledger.violate("parking", f"the learner was refused a parking place {refused} times")
        ledger.check_data(self.held())
        ledger.check_live(s.steady, self.fleet.history)
        return ledger.report()

    def stats(self) -> dict[str, Any]:
        c, ledger = self.learner.core.counters, self.ledger
        blobs = [meta.actors for _, meta in ledger.blobs if meta.actors is not None]
        return {
            "env_steps": c.env_steps,
            "updates": c.updates,
            "version": c.version,
            "stale_dropped": c.stale_dropped,
            "chunks_sent": len(ledger.sent),
            "chunks_learned": len(ledger.learned),
            "transitions_learned": ledger.transitions_learned,
            "chunks_lost_with_kills": len(ledger.lost_with_kill),
            "live_actors": blobs[-1] if blobs else None,
            "actors_alive": self.fleet.alive,
            "messages_dropped": self.net.dropped,
            "learner_refused": dict(self.learner.batches.errors),
            "learner_refused_by_shards": dict(ledger.learner_refused),
            "learner_replies": ledger.learner_data_replies,
            "parkers_refused": sum(node.refused for node in self.hostile if isinstance(node, HostileParker)),
            "restarts": {
                name: n.policy.restarts
                for name, n in self.net.nodes.items()
                if isinstance(n, Process) and n.policy.restarts
            },
            "done_at": ledger.done_at,
            "inference_failovers": sum(
                a.scripted.turns.failovers for a in self.actors.values() if isinstance(a.scripted, RemoteScriptedActor)
            ),
        }


def ledger_rules(cfg: ExperimentConfig) -> tuple[int | None, tuple[int, float] | None]:
    """The rules of its regime the ledger holds a run to: the versions regime's staleness bound (None in lock-step,
    where any older chunk breaks it), or the replay-ratio regime's (learning_starts, replay_ratio)."""
    regime = regime_of(cfg)
    if isinstance(regime, ReplayRatioRegime):
        return None, (regime.limiter.learning_starts, regime.limiter.replay_ratio)
    assert isinstance(regime, VersionsRegime)
    return None if regime.lockstep else regime.bound.max_lag, None


def _blob_params(cfg: ExperimentConfig, env: tuple[spaces.Box, spaces.Box | spaces.Discrete]) -> dict[str, Any]:
    """A real learner's parameters for the algorithm (built once per run): what blobs carry and checkpoints save."""
    import torch

    learner = get_algorithm(cfg.algo.name).make_learner(*env, algo_config(cfg), torch.device("cpu"))
    return learner.params()


def run(scenario: Scenario, seed: int = 0) -> Report:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="surreal-sim-") as run_dir:
        sim = Sim(scenario, seed, Path(run_dir))
        sim.run()
        violations = sim.check()
        stats = sim.stats()
        sim.learner.release()  # before its run folder goes
    wall_s = time.perf_counter() - started
    digest = hashlib.sha256(repr((sim.world.trace, sim.world.events, sorted(stats.items()), violations)).encode())
    digest.update(repr(sim.ledger.digest()).encode())
    return Report(
        scenario.name, seed, violations, sim.world.now, wall_s, sim.world.events, stats, digest.hexdigest()[:16]
    )


def _ps(*indices: int) -> tuple[str, ...]:
    return tuple(f"ps-{i}" for i in indices)


def _actors(*indices: int) -> tuple[str, ...]:
    return tuple(f"actor-{i}" for i in indices)


LEARNER = ("learner",)


def overdrafts(actors: int, seconds: float, share: float) -> int:
    """The most chunks a fleet overdraws while the learner cannot move on for `seconds`: each actor one share per
    stall, a stall lasting STALL_MIN_S at least. Where a fault stops the learner's versions (a pause, a partition
    between it and the ps), those overdrafts are its surplus, and what the staleness bound drops of it is the
    loss the scenario tolerates."""
    return math.ceil(actors * seconds / STALL_MIN_S * share)


SLOW_LINK = (0.15, 100_000.0)  # 150 ms each way and 100 kB/s: a congested cross-zone link
# Every hostile peer, beside the honest roles.
HOSTILE = ("actor", "learner", "shard", "parkers")

ON_POLICY = [
    Scenario(
        "ppo-16-steady",
        "PPO, 16 actors, no fault: the baseline the others depart from.",
        total_env_steps=300_000,
        steady=((10.0, 30.0),),
    ),
    Scenario(
        "ppo-1024-churn",
        "PPO, 1,024 actors for 10 minutes, fractional shares (a chunk every 32 versions "
        "each); for 7 minutes actors are killed and restarted, leave and join, then the fleet settles.",
        actors=1024,
        shards=2,
        ps=4,
        total_env_steps=650_000,
        deadline_s=900.0,
        min_duration_s=600.0,
        costs=Costs(update_s=2.0),
        churn=Churn(30.0, 420.0, 2.0),
        steady=((560.0, 600.0),),
    ),
    Scenario(
        "ppo-256-fractional",
        "PPO, 256 actors sharing each batch a quarter chunk each, no fault.",
        actors=256,
        shards=2,
        ps=2,
        total_env_steps=300_000,
        costs=Costs(update_s=0.5),
        steady=((40.0, 80.0),),
    ),
    Scenario(
        "ppo-replay-shard-killed",
        "PPO, 32 actors on 2 shards; shard 1 is cut off from the learner at 15 s (its FIFO fills) and killed "
        "(SIGKILL) at 20 s, restarted empty: exactly the chunks it held and those on their way to it are lost.",
        actors=32,
        shards=2,
        total_env_steps=400_000,
        faults=(
            Fault(15.0, "partition", ("replay-1",), 10.0, LEARNER),
            Fault(20.0, "kill", ("replay-1",)),
        ),
        steady=((35.0, 45.0),),
    ),
    Scenario(
        "ppo-replay-shard-drained",
        "PPO, 32 actors on 2 shards; shard 0 is stopped (SIGTERM) and restarted "
        "with its final snapshot: nothing is lost.",
        actors=32,
        shards=2,
        total_env_steps=400_000,
        faults=(Fault(20.0, "term", ("replay-0",)),),
    ),
    Scenario(
        "ppo-ps-partitioned",
        "PPO, 64 actors, 3 ps replicas; two are cut off from the learner for 30 s: actors asking them hear of no "
        "new version and overdraw, and what of that goes stale is the one loss tolerated.",
        actors=64,
        ps=3,
        total_env_steps=500_000,
        costs=Costs(update_s=0.4),
        faults=(Fault(15.0, "partition", _ps(1, 2), 30.0, LEARNER),),
        steady=((80.0, 100.0),),
        tolerated_losses=overdrafts(64, 30.0, share=0.5),
    ),
    Scenario(
        "ppo-learner-preempted",
        "PPO, 32 actors; the learner is stopped (SIGTERM) twice in the middle of an "
        "update, checkpoints what it took and resumes: no chunk lost, no counter back.",
        actors=32,
        total_env_steps=400_000,
        costs=Costs(update_s=0.6),
        faults=(Fault(12.3, "term", LEARNER), Fault(31.7, "term", LEARNER)),
    ),
    Scenario(
        "ppo-half-fleet-slow-link",
        "PPO, 64 actors, half of them behind a slow link (150 ms, 100 kB/s).",
        actors=64,
        ps=2,
        total_env_steps=400_000,
        slow_half=SLOW_LINK,
        costs=Costs(update_s=0.3),
        steady=((40.0, 60.0),),
    ),
    Scenario(
        "ppo-learner-paused",
        "PPO, 64 actors; the learner stalls for 25 s (a paused VM): the ps wakes the held actors when it goes "
        "quiet, they overdraw once a stall, and what of that goes stale is the one loss tolerated.",
        actors=64,
        total_env_steps=400_000,
        costs=Costs(update_s=0.3),
        faults=(Fault(15.0, "pause", LEARNER, 25.0),),
        steady=((70.0, 90.0),),
        tolerated_losses=overdrafts(64, 25.0, share=0.5),
    ),
    Scenario(
        "ppo-slow-learner",
        "PPO, 64 actors against a learner 5 times slower than they: the actors wait.",
        actors=64,
        total_env_steps=300_000,
        costs=Costs(update_s=0.3, slow=5.0),
        steady=((100.0, 150.0),),
    ),
    Scenario(
        "ppo-drops-and-jitter",
        "PPO, 64 actors, 2 shards, 2 ps; 5 % of control messages lost and 30 ms of jitter (reordering across links).",
        actors=64,
        shards=2,
        ps=2,
        total_env_steps=400_000,
        jitter_s=0.03,
        drop_p=0.05,
        steady=((30.0, 45.0),),
    ),
    Scenario(
        "ppo-hostile-peers",
        "PPO, 32 actors with a hostile actor, a hostile learner-peer and a hostile shard "
        "among the learner's: every hostile message is refused and the run goes on.",
        actors=32,
        shards=2,
        ps=2,
        total_env_steps=400_000,
        hostile=HOSTILE,
        steady=((30.0, 45.0),),
    ),
    Scenario(
        "ppo-actors-killed-often",
        "PPO, 64 actors, one killed (and restarted) every second on average.",
        actors=64,
        total_env_steps=400_000,
        churn=Churn(5.0, 1e9, 1.0, kill=1.0, leave=0.0, join=0.0),
    ),
    Scenario(
        "es-lockstep",
        "ES in lockstep (one share a version, only the current version learned), 8 actors evaluating 4 pairs a "
        "chunk; a shard drained and the learner preempted on the way.",
        algo="es",
        actors=8,
        total_env_steps=400_000,
        costs=Costs(update_s=0.05),
        faults=(Fault(8.0, "term", ("replay-0",)), Fault(16.4, "term", LEARNER)),
    ),
    Scenario(
        "ppo-ps-killed",
        "PPO, 64 actors, 2 ps; ps 0 is killed and restarted, ps 1 later stopped: actors "
        "ask the other replica meanwhile.",
        actors=64,
        ps=2,
        total_env_steps=400_000,
        faults=(Fault(10.0, "kill", _ps(0)), Fault(25.0, "term", _ps(1))),
        steady=((35.0, 50.0),),
    ),
    Scenario(
        "ppo-fleet-grows-and-shrinks",
        "PPO, 16 actors; 48 more join from 15 s, 4 every 2.5 s (as an autoscaler adds them), and 32 of them leave "
        "from 60 s the same way.",
        total_env_steps=1_600_000,
        costs=Costs(update_s=0.05),
        faults=(
            *(Fault(15.0 + 2.5 * k, "join", _actors(*range(16 + 4 * k, 20 + 4 * k))) for k in range(12)),
            *(Fault(60.0 + 2.5 * k, "term", _actors(*range(32 + 4 * k, 36 + 4 * k))) for k in range(8)),
        ),
        steady=((55.0, 60.0), (95.0, 110.0)),
    ),
]

CENTRAL_INFERENCE = [
    Scenario(
        "ppo-central-inference-worker-killed",
        "PPO, 16 actors acting through 2 inference workers; worker 0 is killed (SIGKILL) at 10 s and restarted: "
        "the requests it held time out and go to worker 1, and every chunk is made with actions.",
        inference_workers=2,
        total_env_steps=40_000,
        faults=(Fault(10.0, "kill", ("inference-0",)),),
    ),
    Scenario(
        "ppo-central-inference-slow-worker",
        "PPO, 16 actors, 2 inference workers, worker 0 so slow (3 s a batch) that its actors' requests time out: "
        "they go to worker 1 and stay there.",
        inference_workers=2,
        total_env_steps=40_000,
        slow_worker=3000.0,
    ),
    Scenario(
        "ppo-central-inference-ps-killed",
        "PPO, 16 actors, 2 inference workers, 2 ps; ps 0 killed at 8 s: the workers ask the other replica, and "
        "catch up to the versions their actors run.",
        ps=2,
        inference_workers=2,
        total_env_steps=40_000,
        faults=(Fault(8.0, "kill", _ps(0)),),
    ),
]

# A learner killed stalls its versions while it restarts (the supervisor's first backoff) and its group forms again:
# the fleet's overdraft of that stall is the loss tolerated, beside what the ledger forgives exactly.
KILLED_LEARNER_STALL_S = 2 * BACKOFF_START_S

LEARNER_GROUP = [
    Scenario(
        "ppo-learner-killed",
        "PPO, 32 actors; the learner is killed (SIGKILL) at 20 s and resumes from its last checkpoint: what it "
        "learned since is forgotten, what that checkpoint's feed held is learned again, no counter goes below it.",
        actors=32,
        total_env_steps=300_000,
        overrides=("learner.checkpoint_interval=8",),
        faults=(Fault(10.3, "kill", LEARNER),),
        tolerated_losses=overdrafts(32, KILLED_LEARNER_STALL_S, share=0.5),
    ),
    Scenario(
        "ppo-learner-group-rank-killed",
        "PPO, 32 actors, a learner group of 2 ranks; rank 1 is killed at 20 s in the middle of an update: the "
        "supervisor takes rank 0 down with it and the group starts again from rank 0's last checkpoint.",
        actors=32,
        replicas=2,
        total_env_steps=300_000,
        overrides=("learner.checkpoint_interval=8",),
        faults=(Fault(8.9, "kill", ("learner-1",)),),
        tolerated_losses=overdrafts(32, KILLED_LEARNER_STALL_S, share=0.5),
    ),
    Scenario(
        "ppo-learner-group-rank0-paused",
        "PPO, 32 actors, a learner group of 4 ranks; rank 0 stalls for 30 s, past the group's 10 s timeout: the "
        "other ranks' wait for its orders times out, they fail and take rank 0 down, and the group resumes from "
        "its checkpoint.",
        actors=32,
        replicas=4,
        total_env_steps=300_000,
        overrides=("learner.checkpoint_interval=8", "learner.group_timeout_s=10"),
        faults=(Fault(15.0, "pause", LEARNER, 30.0),),
        tolerated_losses=overdrafts(32, 30.0 + KILLED_LEARNER_STALL_S, share=0.5),
    ),
    Scenario(
        "ddpg-learner-killed",
        "DDPG, 16 actors, 2 shards; the learner is killed at 17 s and resumes from its checkpoint, counting fewer "
        "env steps in its first blob than the fleet had sent: overdrawn actors start again on their turns.",
        algo="ddpg",
        shards=2,
        total_env_steps=60_000,
        overrides=("learner.checkpoint_interval=8",),
        faults=(Fault(17.1, "kill", LEARNER),),
    ),
    Scenario(
        "ddpg-learner-group-rank-killed",
        "DDPG, 16 actors, a learner group of 2 ranks, each sampling its own minibatches from 2 shards; rank 1 is "
        "killed at 20 s: the group starts again from rank 0's checkpoint, which counts every shard's env steps "
        "once.",
        algo="ddpg",
        shards=2,
        replicas=2,
        total_env_steps=60_000,
        overrides=("learner.checkpoint_interval=8",),
        faults=(Fault(20.3, "kill", ("learner-1",)),),
    ),
    Scenario(
        "ddpg-learner-group-prioritized-preempted",
        "DDPG on a prioritized replay, 16 actors, a learner group of 2 ranks, each sending its own priorities home; "
        "rank 0 is stopped twice and the group resumes.",
        algo="ddpg",
        replicas=2,
        total_env_steps=60_000,
        overrides=("replay.mode=prioritized",),
        faults=(Fault(15.3, "term", LEARNER), Fault(30.7, "term", LEARNER)),
    ),
    Scenario(
        "ppo-learner-group-preempted",
        "PPO, 32 actors, a learner group of 2 ranks; rank 0 is stopped (SIGTERM) twice: it checkpoints, orders "
        "`stop`, and every rank starts again at once, none counted as a failure.",
        actors=32,
        replicas=2,
        total_env_steps=300_000,
        faults=(Fault(6.3, "term", LEARNER), Fault(13.7, "term", LEARNER)),
    ),
]

OFF_POLICY = [
    Scenario(
        "ddpg-16-steady",
        "DDPG, 16 actors, the replay ratio held by the learner and the actors' budget.",
        algo="ddpg",
        total_env_steps=60_000,
        steady=((40.0, 60.0),),
    ),
    Scenario(
        "ddpg-256-churn",
        "DDPG, 256 actors, 2 shards, 2 ps, churn for 2 minutes, then the fleet settles.",
        algo="ddpg",
        actors=256,
        shards=2,
        ps=2,
        total_env_steps=260_000,
        churn=Churn(10.0, 120.0, 1.0),
        steady=((195.0, 225.0),),  # a departed actor counts for two slacks more: 65,536 env steps, about 60 s
    ),
    Scenario(
        "ddpg-replay-shard-killed",
        "DDPG, 32 actors on 2 shards with periodic snapshots; shard 1 is killed "
        "and comes back with its last snapshot: the learner counts every shard's env steps once.",
        algo="ddpg",
        actors=32,
        shards=2,
        total_env_steps=60_000,
        snapshot_interval_s=5.0,
        faults=(Fault(30.0, "kill", ("replay-1",)),),
    ),
    Scenario(
        "ddpg-learner-preempted",
        "DDPG, 32 actors; the learner is stopped (SIGTERM) twice and resumes.",
        algo="ddpg",
        actors=32,
        total_env_steps=60_000,
        faults=(Fault(25.1, "term", LEARNER), Fault(45.9, "term", LEARNER)),
    ),
    Scenario(
        "ddpg-hostile-peers",
        "DDPG with a prioritized replay and every hostile peer: priorities for slots "
        "they never saw, batches no shard could serve, replies with fields missing.",
        algo="ddpg",
        actors=32,
        shards=2,
        ps=2,
        total_env_steps=60_000,
        hostile=HOSTILE,
        overrides=("replay.mode=prioritized",),
        steady=((40.0, 60.0),),
    ),
    Scenario(
        "ddpg-hostile-parkers",
        "DDPG, 16 actors, a prioritized shard whose parking places four hostile peers keep full, each at its cap, "
        "with requests it can never serve: the learner still parks its requests and is served at its rate.",
        algo="ddpg",
        total_env_steps=60_000,
        hostile=("parkers",),
        overrides=("replay.mode=prioritized",),
        steady=((40.0, 60.0),),
    ),
    Scenario(
        "ddpg-half-fleet-slow-link",
        "DDPG, 64 actors, half of them behind a slow link.",
        algo="ddpg",
        actors=64,
        ps=2,
        total_env_steps=60_000,
        slow_half=SLOW_LINK,
        steady=((40.0, 60.0),),
    ),
    Scenario(
        "ddpg-ps-partitioned",
        "DDPG, 64 actors, 3 ps; two cut off from the learner for 20 s.",
        algo="ddpg",
        actors=64,
        ps=3,
        total_env_steps=60_000,
        faults=(Fault(20.0, "partition", _ps(1, 2), 20.0, LEARNER),),
    ),
    Scenario(
        "ddpg-learner-paused",
        "DDPG, 64 actors; the learner stalls for 20 s.",
        algo="ddpg",
        actors=64,
        total_env_steps=60_000,
        faults=(Fault(20.0, "pause", LEARNER, 20.0),),
    ),
]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in [*ON_POLICY, *CENTRAL_INFERENCE, *LEARNER_GROUP, *OFF_POLICY]}
