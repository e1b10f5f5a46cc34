"""The simulation suite: every scenario of surreal/sim/scenarios.py run from its seed, every invariant checked
(surreal/sim/ledger.py), plus the properties the suite rests on: a seed replays exactly, the network keeps TCP's
and ZMQ's promises and no more, and the invariants catch what they are there to catch.

A scenario's verdict is the simulation's, on a virtual clock: it cannot depend on how fast this machine is."""

from __future__ import annotations

import ast
import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from surreal.cli import main as cli_main
from surreal.proto import channels
from surreal.proto.wire import Chunk, NotModified
from surreal.roles import replay as replay_role
from surreal.roles.learner_group import LeaderLearner
from surreal.roles.ps import PsCore
from surreal.runtime.checkpoint import LearnerCheckpoints
from surreal.runtime.regimes import replay_ratio, versions
from surreal.sim import nodes
from surreal.sim.ledger import Ledger, chunk_id, tag
from surreal.sim.scenarios import SCENARIOS, Fault, Scenario, run
from surreal.sim.world import Network, Node, World

SLOW = {"ppo-1024-churn"}  # 10 simulated minutes of 1,024 actors: tens of seconds


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in SCENARIOS]
)
@pytest.mark.system
def test_every_invariant_holds_in_the_scenario(name):
    report = run(SCENARIOS[name], seed=1)
    details = "\n".join(f"  {rule}: {line}" for rule, lines in report.violations.items() for line in lines)
    assert report.ok, f"{report.summary()}\n{details}"
    assert report.stats["env_steps"] >= SCENARIOS[name].config().total_env_steps


def test_the_suite_holds_at_least_twenty_scenarios_including_a_thousand_actors_for_ten_minutes():
    assert len(SCENARIOS) >= 20
    big = SCENARIOS["ppo-1024-churn"]
    assert big.actors == 1024 and big.min_duration_s >= 600 and big.churn is not None


@pytest.mark.parametrize(
    "name",
    [
        "ppo-ps-killed",
        "ddpg-learner-paused",
        "ppo-central-inference-worker-killed",
        "ppo-central-inference-slow-worker",
        "ppo-learner-group-rank0-paused",
    ],
)
@pytest.mark.system
def test_a_seed_replays_exactly_and_another_seed_runs_differently(name):
    scenario = SCENARIOS[name]
    first, again, other = run(scenario, seed=5), run(scenario, seed=5), run(scenario, seed=6)
    assert first.fingerprint == again.fingerprint and first.events == again.events
    assert first.stats == again.stats
    assert other.fingerprint != first.fingerprint


# The shells' transport constants the simulated network and supervisor run on (sim/nodes.py imports each).
SHELL_CONSTANTS = {
    "surreal.proto.channels": ("REPUBLISH_S", "LOST_AFTER_S", "PUBLISH_HWM", "SUBSCRIBE_HWM", "EXPERIENCE_HWM",
                               "NOT_READY_PAUSE_S"),
    "surreal.roles.replay": ("PULL_HWM",),
    "surreal.roles.actor": ("FLUSH_S",),
    "surreal.roles.learner": ("RECEIVE_TIMEOUT_S",),
    "surreal.launch.supervisor": ("MAX_RESTARTS",),
}  # fmt: skip
SIM_OWN_CONSTANTS = {"STOP_DRAIN_WINDOW_S", "SIGKILL", "EPISODE_STEPS"}  # the simulator's models, no shell's


def test_the_simulator_imports_the_shells_constants_and_restates_none():
    """Each shell constant comes from its module; a number written out in sim/nodes.py is one of the simulator's
    own, so a copied constant (`REPUBLISH_S = 1.0`, `PUSH_HWM = 4 + 64`) fails here, and with it the drift the
    copy would allow."""
    tree = ast.parse(Path(nodes.__file__).read_text())
    imported = {
        (node.module, alias.name) for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    missing = [(module, name) for module, names in SHELL_CONSTANTS.items() for name in names
               if (module, name) not in imported]  # fmt: skip
    assert not missing, f"sim/nodes.py does not import {missing}"
    written = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign) and all(isinstance(n, (ast.Constant, ast.operator, ast.BinOp, ast.UnaryOp,
                                                               ast.unaryop)) for n in ast.walk(node.value))
        for target in node.targets
        if isinstance(target, ast.Name) and target.id.isupper()
    }  # fmt: skip
    assert written <= SIM_OWN_CONSTANTS, f"numbers written out in sim/nodes.py: {sorted(written - SIM_OWN_CONSTANTS)}"
    assert nodes.PUB_HWM == channels.PUBLISH_HWM + channels.SUBSCRIBE_HWM
    assert nodes.PUSH_HWM == channels.EXPERIENCE_HWM + replay_role.PULL_HWM


@pytest.mark.system
def test_a_failing_seed_replays_its_failure_exactly(monkeypatch):
    monkeypatch.setattr(versions.StalenessBound, "split", lambda self, chunks, version: (chunks, 0))
    scenario = SCENARIOS["ppo-ps-partitioned"]
    first, again = run(scenario, seed=4), run(scenario, seed=4)
    assert "staleness" in first.violations, first.summary()
    assert first.violations == again.violations and first.fingerprint == again.fingerprint


# -- the invariants have teeth ----------------------------------------------------------------------------------


@pytest.mark.system
def test_a_learner_that_keeps_stale_chunks_breaks_the_staleness_invariant(monkeypatch):
    monkeypatch.setattr(versions.StalenessBound, "split", lambda self, chunks, version: (chunks, 0))
    report = run(SCENARIOS["ppo-learner-paused"], seed=1)
    assert "staleness" in report.violations, report.summary()


@pytest.mark.system
def test_a_fleet_that_ignores_the_live_count_breaks_the_live_actor_invariant(monkeypatch):
    monkeypatch.setattr(versions.ChunkFeed, "live_actors", lambda self: self.actors)
    report = run(SCENARIOS["ppo-fleet-grows-and-shrinks"], seed=1)
    assert "live_actors" in report.violations, report.summary()


@pytest.mark.system
def test_a_ps_that_ignores_wake_versions_breaks_the_fan_out_invariant(monkeypatch):
    monkeypatch.setattr(PsCore, "_answers", lambda self, request, quiet: True)  # every parked actor, every version
    report = run(SCENARIOS["ppo-256-fractional"], seed=1)
    assert "fan_out" in report.violations, report.summary()


def test_a_fleet_that_ignores_its_env_step_budget_breaks_the_replay_ratio_invariant(monkeypatch):
    monkeypatch.setattr(replay_ratio.EnvStepAllowance, "on_sent", lambda self, env_steps: None)
    report = run(SCENARIOS["ddpg-16-steady"], seed=1)
    assert "replay_ratio" in report.violations, report.summary()


def test_parking_by_caps_alone_breaks_the_parking_invariant(monkeypatch):
    """The rule before fair parking: a place only while one is free. Four hostile peers at their cap fill the
    shard's parking, and the learner is refused."""
    from surreal.roles.parking import FairParking

    def caps_only(self, peer):
        return self.counts.get(peer, 0) < self.per_peer and self.total < self.capacity, None

    monkeypatch.setattr(FairParking, "admit", caps_only)
    report = run(dataclasses.replace(SCENARIOS["ddpg-hostile-parkers"], deadline_s=30.0), seed=1)
    assert "parking" in report.violations, report.summary()


def test_four_peers_parking_at_their_cap_leave_the_learner_its_rate():
    """`ddpg-hostile-parkers` against itself without the parkers, on the same seed: the learner takes as many
    replies of data per virtual second (within 80 %), and no shard refuses it a place, while the parkers were
    there and were themselves turned away."""
    scenario = SCENARIOS["ddpg-hostile-parkers"]
    with_them, without = run(scenario, seed=1), run(dataclasses.replace(scenario, hostile=()), seed=1)
    assert with_them.ok and without.ok, (with_them.summary(), without.summary())

    def rate(report) -> float:
        return report.stats["learner_replies"] / report.stats["done_at"]

    assert rate(with_them) >= 0.8 * rate(without), (with_them.stats, without.stats)
    assert "too_many_pending" not in with_them.stats["learner_refused_by_shards"]
    assert with_them.stats["parkers_refused"] > 0 and without.stats["parkers_refused"] == 0


def test_a_hostile_first_chunk_starves_a_shard_it_lays_out(monkeypatch):
    """Without the experiment's layout (a config no launcher prepared), the hostile actor's first chunk lays each
    transition shard out and every honest chunk after it is refused: the run never gets anywhere. With it (every
    scenario, as every launcher), `ddpg-hostile-peers` completes."""
    import surreal.sim.scenarios as scenarios

    monkeypatch.setattr(scenarios, "with_layout", lambda cfg, fields: cfg)
    report = run(dataclasses.replace(SCENARIOS["ddpg-hostile-peers"], deadline_s=30.0), seed=1)
    assert report.stats["env_steps"] == 0 and "completes" in report.violations, report.summary()


@pytest.mark.parametrize("name", ["ppo-central-inference-worker-killed", "ppo-central-inference-slow-worker"])
@pytest.mark.system
def test_actors_leave_a_killed_or_slow_inference_worker_for_the_next(name):
    report = run(SCENARIOS[name], seed=1)
    assert report.ok, report.summary()
    assert report.stats["inference_failovers"] > 0, "the fault reached the actors"


def test_actors_that_never_leave_a_slow_inference_worker_break_the_completion_invariant(monkeypatch):
    """`InferenceTurns.failed` without its failover: the actors of the slow worker wait 3 s a step."""
    from surreal.proto.channels import InferenceTurns

    monkeypatch.setattr(InferenceTurns, "failed", lambda self: None)
    report = run(dataclasses.replace(SCENARIOS["ppo-central-inference-slow-worker"], deadline_s=60.0), seed=1)
    assert "completes" in report.violations, report.summary()


def test_a_run_that_never_ends_breaks_the_completion_invariant():
    stalled = dataclasses.replace(
        SCENARIOS["ppo-16-steady"], name="stalled", deadline_s=60.0, faults=(Fault(5.0, "pause", ("learner",), 1e6),)
    )
    report = run(stalled, seed=1)
    assert "completes" in report.violations and report.sim_s == pytest.approx(60.0)


def test_the_ledger_finds_a_chunk_learned_twice_or_never_learned_nor_held():
    ledger = Ledger(max_staleness=4, chunk_env_steps=64)
    arrays = {"obs": np.zeros((64, 1, 3), np.float32)}
    tag(arrays, actor=7, serial=3)
    assert chunk_id(arrays) == (7, 3)
    chunk = Chunk(arrays, version=2, actor=7)
    ledger.chunk_sent(chunk, "learner-0", alive=1, now=0.0)
    ledger.chunks_learned([chunk, chunk], version=9, now=1.0)
    assert set(ledger.report()) == {"staleness", "chunks"}, "learned twice, seven versions old"
    lost = Ledger(max_staleness=4, chunk_env_steps=64)
    lost.chunk_sent(chunk, "learner-0", alive=1, now=0.0)
    lost.check_data(held=Counter())
    assert "chunks" in lost.report(), "sent, never learned, not held, no process died with it"


# -- the network ----------------------------------------------------------------------------------------------


class Inbox(Node):
    def __init__(self, world: World, net: Network, name: str) -> None:
        super().__init__(world, net, name)
        self.got: list[tuple[float, int]] = []

    def receive(self, src: Node, message) -> None:
        self.got.append((self.world.now, message.meta["version"]))


def pair(seed: int = 0, jitter_s: float = 0.01, drop_p: float = 0.0) -> tuple[World, Network, Inbox, Inbox]:
    world = World(seed)
    net = Network(world, jitter_s=jitter_s, drop_p=drop_p)
    return world, net, Inbox(world, net, "a"), Inbox(world, net, "b")


def note(version: int):
    return NotModified(version, "x").to_message()


def test_a_pipe_keeps_its_order_through_jitter_and_a_partition_holds_then_delivers_in_order():
    world, net, a, b = pair()
    for version in range(50):
        a.send(b, note(version))
    world.run(10.0)
    assert [v for _, v in b.got] == list(range(50)), "TCP: one connection never reorders"
    net.partition({"a"}, {"b"})
    a.send(b, note(50))
    a.send(b, note(51))
    world.run(20.0)
    assert len(b.got) == 50, "held while the partition lasts"
    world.at(30.0, net.heal)
    world.run(40.0)
    assert [v for _, v in b.got[50:]] == [50, 51] and b.got[50][0] >= 30.0


def test_only_a_pub_pipe_drops_and_a_full_push_pipe_refuses():
    world, net, a, b = pair(drop_p=0.5)
    net.pipe(a, b, cap=3)
    sent = [a.send(b, note(v)) for v in range(5)]
    assert sent == [True, True, True, False, False], "PUSH: room for three, then backpressure"
    world.run(1.0)
    assert len(b.got) == 3, "a live TCP connection loses nothing, whatever drop_p"
    c = Inbox(world, net, "c")
    net.pipe(a, c, cap=100, lossy=True)
    for v in range(100):
        a.send(c, note(v))
    world.run(2.0)
    assert 30 < len(c.got) < 70, "PUB drops: about half, though all of it fits"


def test_a_killed_node_loses_what_its_pipes_carry_and_its_peers_hear_of_it():
    world, net, a, b = pair()
    heard: list[str] = []
    a.disconnected = lambda peer: heard.append(peer.name)  # type: ignore[method-assign]
    a.send(b, note(1))
    b.kill()
    world.run(1.0)
    assert b.got == [] and heard == ["b"]
    b.start()
    a.send(b, note(2))
    world.run(2.0)
    assert [v for _, v in b.got] == [2]


# -- the command -----------------------------------------------------------------------------------------------


def test_surreal_sim_lists_runs_and_refuses_an_unknown_scenario(capsys):
    assert cli_main(["sim", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in SCENARIOS)
    assert cli_main(["sim", "es-lockstep", "--seed", "3"]) == 0
    assert "es-lockstep seed 3: ok" in capsys.readouterr().out
    assert cli_main(["sim", "ppo-16-stedy"]) == 2
    assert "did you mean ppo-16-steady" in capsys.readouterr().err


def test_a_scenario_whose_faults_outlast_its_run_fails_rather_than_passing_untested():
    short = dataclasses.replace(SCENARIOS["es-lockstep"], name="short", faults=(Fault(5000.0, "kill", ("ps-0",)),))
    assert isinstance(short, Scenario)
    report = run(short, seed=1)
    assert "completes" in report.violations


def test_a_rank_0_that_orders_no_updates_breaks_the_group_invariant(monkeypatch):
    """`LeaderLearner.update` without its order: the other ranks never learn what rank 0 learns."""
    monkeypatch.setattr(LeaderLearner, "update", lambda self, data, arg: self.learner.update(data, arg))
    report = run(SCENARIOS["ppo-learner-group-preempted"], seed=1)
    assert "group" in report.violations


def test_a_learner_that_restores_no_checkpoint_after_a_kill_breaks_the_counters_invariant(monkeypatch):
    """A learner killed and started again fresh (its checkpoint not restored) comes back below its last checkpoint's
    counters."""
    monkeypatch.setattr(LearnerCheckpoints, "restore", lambda self, load: None)
    report = run(SCENARIOS["ppo-learner-killed"], seed=1)
    assert any("its last checkpoint held" in found for found in report.violations.get("counters", []))


@pytest.mark.parametrize("name", ["ppo-learner-group-rank-killed", "ppo-learner-group-rank0-paused"])
def test_a_learner_group_restarts_whole_from_rank_0s_checkpoint(name):
    """A rank killed, or rank 0 stalled past the group's timeout: the group ends, starts again (only the first
    failure counted), and learns on from rank 0's last checkpoint to the end."""
    report = run(SCENARIOS[name], seed=1)
    assert report.ok, report.summary()
    assert sum(report.stats["restarts"].values()) >= 1
    assert report.stats["chunks_lost_with_kills"] > 0  # what rank 0 learned after its checkpoint went with it


class Ticker(nodes.Process):
    """A process whose core wants a timer every second from its start, as the roles' cores do."""

    def __init__(self, world: World, net: Network) -> None:
        super().__init__(world, net, "ticker", Ledger(max_staleness=None, chunk_env_steps=1))
        self.fired: list[tuple[int, float]] = []

    def boot(self, resumed: bool) -> None:
        self.arm(self.now() + 1.0)

    def on_timer(self) -> None:
        self.fired.append((self.incarnation, self.now()))
        self.arm(self.now() + 1.0)


def test_a_process_restarted_with_a_timer_pending_arms_its_new_incarnations_timers():
    """The old incarnation's pending timer dies with it; the new incarnation's `arm` is not shadowed by it (a
    restarted learner-group rank kept its watchdog)."""
    world = World(0)
    ticker = Ticker(world, Network(world))
    ticker.boot(resumed=False)
    world.run(until=0.5)  # its first timer, at 1.0, pending
    ticker.kill()
    ticker.restart_process()
    world.run(until=3.0)
    assert ticker.fired == [(1, 1.5), (1, 2.5)]
