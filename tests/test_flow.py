"""Flow control (runtime/regimes/), rule by rule, and the role cores driven in-process on in-process ports:
no sockets, no subprocesses, deterministic."""

from __future__ import annotations

import itertools
import json
import logging
from typing import cast

import numpy as np
import pytest
import torch

from surreal.algos import get_algorithm
from surreal.config import algo_config, load_config
from surreal.metrics import RoleMetrics
from surreal.metricsfile import read_evals, read_metrics
from surreal.proto.channels import SEND_POLL_S
from surreal.proto.codec import Message
from surreal.proto.wire import NO_VERSION, BlobMeta, Chunk, FifoReply, Params, SampleReply, ShardReport, TransitionReply
from surreal.replay.shard import ReplayShard
from surreal.roles.actor import (
    IDLE_S,
    PAUSE,
    REPLY,
    RETRY,
    SEND_TIMEOUT_S,
    Actor,
    ActorCore,
    ActorDriver,
    Collect,
    Fetch,
    Finish,
    Idle,
    Load,
    Send,
)
from surreal.roles.device import choose_device, update_seconds
from surreal.roles.learner import LearnerCore
from surreal.roles.loop import InlineLoop
from surreal.roles.ports import InProcessActorPorts, InProcessParams, InProcessReplay
from surreal.run.serial import run_serial
from surreal.runtime.regimes import regime_of
from surreal.runtime.regimes.common import GOLDEN, MAX_HOLD_S, LiveActors, Wait
from surreal.runtime.regimes.replay_ratio import (
    EnvStepAllowance,
    ReplayRatioLimiter,
    ReplayRatioRegime,
    ShardEnvSteps,
)
from surreal.runtime.regimes.versions import StalenessBound, VersionsRegime, VersionThrottle

torch.set_num_threads(1)


def chunks(*versions: int) -> list[Chunk]:
    return [Chunk({"rewards": np.zeros((1, 1))}, version=v, actor=0) for v in versions]


# -- the actor's end ------------------------------------------------------------------------------------


def sent_until_wait(throttle: VersionThrottle, version: int) -> int:
    sent = 0
    while not throttle.must_wait(version) and sent < 100:
        throttle.on_sent(1)
        sent += 1
    return sent


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def throttle_of(share: int, rollout_ahead: int, overdraft_after_s: float = 0.0, **kw) -> VersionThrottle:
    """A throttle whose share is `share` chunks with the configured single actor."""
    return VersionThrottle(share * 10, 10, 1, rollout_ahead, overdraft_after_s, **kw)


def test_an_actor_sends_rollout_ahead_shares_then_one_share_per_new_version():
    throttle = throttle_of(share=3, rollout_ahead=2)
    throttle.on_params(BlobMeta(version=5, incarnation="a"))
    assert sent_until_wait(throttle, 5) == 6, "two shares on the first version seen"
    throttle.on_params(BlobMeta(version=6, incarnation="a"))
    assert sent_until_wait(throttle, 6) == 3, "each new version releases one more share"
    assert sent_until_wait(throttle, 6) == 0


def test_a_learner_resumed_from_an_older_checkpoint_restarts_the_count_one_resumed_where_it_stopped_does_not():
    throttle = throttle_of(share=2, rollout_ahead=1)
    throttle.on_params(BlobMeta(version=40, incarnation="a"))
    assert sent_until_wait(throttle, 40) == 2
    throttle.on_params(BlobMeta(version=12, incarnation="b"))  # resumed from an older checkpoint
    assert sent_until_wait(throttle, 12) == 2, "versions count again from the resumed learner's"
    throttle.on_params(BlobMeta(version=12, incarnation="c"))  # stopped and resumed at the version counted
    assert sent_until_wait(throttle, 12) == 0, "the count goes on: those shares were sent"
    throttle.on_params(BlobMeta(version=13, incarnation="d"))
    assert sent_until_wait(throttle, 13) == 2, "one share for the version it moved on"


def test_lockstep_for_es_and_for_deterministic_runs_and_shares_from_the_topology():
    ppo = regime_of(load_config(["actors=4", "actor.chunk_steps=128"])).actor_throttle()
    assert isinstance(ppo, VersionThrottle) and ppo.share == 4 and ppo.rollout_ahead == 2  # ceil(2048 / 512)
    es = regime_of(load_config(["algo=es", "actors=2"])).actor_throttle()
    assert isinstance(es, VersionThrottle) and es.rollout_ahead == 1
    deterministic = regime_of(load_config(["deterministic=true", "actors=1"])).actor_throttle()
    assert isinstance(deterministic, VersionThrottle) and deterministic.rollout_ahead == 1
    assert isinstance(regime_of(load_config(["algo=ddpg"])).actor_throttle(), EnvStepAllowance)


def test_an_actor_with_a_fractional_share_waits_for_its_turn_and_hearing_progress_is_no_stall():
    """A quarter of a chunk a version: the actor asks to be woken at the version that completes its chunk, and
    holds as long as a stall takes; "not modified" at a newer version (the learner moved on, its turn has not
    come) restarts the stall clock, the same answer at the same version does not."""
    clock = FakeClock()
    throttle = VersionThrottle(256, 64, 16, 1, overdraft_after_s=30.0, clock=clock, phase=0.5)
    assert throttle.wait(-1) == Wait(0), "no parameters yet: any blob"
    throttle.on_params(BlobMeta(version=10, incarnation="a"))  # a quarter share, and half a chunk of turn
    assert throttle.allowance == 0.75 and throttle.must_wait(10)
    assert throttle.wait(10) == Wait(11, 30.0), "a quarter more completes the chunk; no interval known yet"
    for version in (11, 12, 13):
        clock.now += 1.0
        throttle.on_params(BlobMeta(version=version, incarnation="a"))
        sent_until_wait(throttle, version)
    assert throttle.allowance == 0.75 + 3 * 0.25 - 1 and throttle.stall_s() == 1.5, "one chunk sent, at 11"
    assert throttle.wait(13) == Wait(15, 1.5), "two versions to its next chunk; a stall's hold"
    assert throttle.must_wait(13)
    clock.now += 1.5
    throttle.on_heard(14, "a")
    assert throttle.must_wait(13) and throttle.allowance == 0.5, "the learner got to 14: no stall, no overdraft"
    clock.now += 1.5
    throttle.on_heard(14, "a")
    throttle.on_heard(99, "b")
    assert throttle.must_wait(13) and throttle.allowance == 0.75, "nothing new for a stall's time: a share more"


def test_shares_follow_the_actors_the_learner_hears_from():
    throttle = VersionThrottle(batch_units=2048, chunk_units=256, actors=4, rollout_ahead=1, overdraft_after_s=0)
    throttle.on_params(BlobMeta(version=1, incarnation="a"))
    assert sent_until_wait(throttle, 1) == 2, "configured 4 actors: 2048 / (4 * 256)"
    throttle.on_params(BlobMeta(version=2, incarnation="a", actors=2))
    assert sent_until_wait(throttle, 2) == 4, "two actors left: each sends half a batch"
    throttle.on_params(BlobMeta(version=3, incarnation="a", actors=8))
    assert sent_until_wait(throttle, 3) == 1, "eight actors heard: one chunk each"


def test_an_actor_waiting_past_a_stall_overdraws_one_share_and_never_sooner():
    clock = FakeClock()
    throttle = throttle_of(share=2, rollout_ahead=1, overdraft_after_s=30.0, clock=clock)
    throttle.on_params(BlobMeta(version=1, incarnation="a"))
    assert sent_until_wait(throttle, 1) == 2
    clock.now += 29.0
    assert throttle.must_wait(1), "no version interval known yet: waits overdraft_after_s"
    clock.now += 1.0
    assert sent_until_wait(throttle, 1) == 2, "a batch short of a lost actor's share: one more share"
    for version in range(2, 7):  # versions 1 s apart: a stall is 1.5 x 1 s (and never under 1 s)
        clock.now += 1.0
        throttle.on_params(BlobMeta(version=version, incarnation="a"))
        assert sent_until_wait(throttle, version) == 2
    assert throttle.stall_s() == 1.5
    clock.now += 1.4
    assert throttle.must_wait(6), "within an ordinary update's wait"
    clock.now += 0.1
    assert sent_until_wait(throttle, 6) == 2
    assert throttle_of(1, 1, overdraft_after_s=0.0).stall_s() == 0.0
    never = throttle_of(share=1, rollout_ahead=1, overdraft_after_s=0.0, clock=clock)
    never.on_params(BlobMeta(version=1, incarnation="a"))
    never.on_sent(1)
    assert never.must_wait(1)
    clock.now += 1e6
    assert never.must_wait(1), "overdraft_after_s=0: never overdraws"


def test_deterministic_runs_never_overdraw():
    throttle = lambda *overrides: cast(VersionThrottle, regime_of(load_config(list(overrides))).actor_throttle())
    assert throttle("deterministic=true", "actors=1").overdraft_after_s == 0
    assert throttle("actors=2").overdraft_after_s == 30.0


def test_the_learner_counts_the_actors_it_heard_from_lately():
    live = LiveActors(window=2)
    assert live.count(0) is None, "nothing heard: actors keep the configured count"
    for actor in (0, 1, 2):
        live.heard(actor, 3)
    live.heard(1, 4)
    live.heard(7, 5)  # an actor index beyond the configured count joined
    assert live.count(5) == 4
    assert live.count(6) == 2, "actors 0 and 2 not heard for more than two versions"


def test_an_off_policy_budget_is_shared_by_the_actors_heard():
    allowance = EnvStepAllowance(actors=4, slack=400)
    allowance.on_params(BlobMeta(version=1, incarnation="a", env_steps=1000, env_step_budget=1400, actors=2))
    allowance.on_sent(199)
    assert not allowance.must_wait(1)
    allowance.on_sent(1)
    assert allowance.must_wait(1), "(1400 - 1000) / 2 live actors = 200 steps each"


def test_an_off_policy_actor_takes_its_share_of_the_budget_then_waits():
    allowance = EnvStepAllowance(actors=4, slack=400)
    assert not allowance.must_wait(0), "no budget published: free-running"
    allowance.on_params(BlobMeta(version=1, incarnation="a", env_steps=1000, env_step_budget=1400))
    allowance.on_sent(60)
    assert not allowance.must_wait(1)
    allowance.on_sent(40)
    assert allowance.must_wait(1), "(1400 - 1000) / 4 = 100 steps each"


def test_a_later_blob_grants_the_budgets_growth_not_the_chunks_it_has_not_counted_yet():
    allowance = EnvStepAllowance(actors=4, slack=800)  # a slack wide enough that the floor (below) stays out
    allowance.on_params(BlobMeta(version=1, incarnation="a", env_steps=1000, env_step_budget=1300))
    allowance.on_sent(100)
    allowance.on_params(BlobMeta(version=2, incarnation="a", env_steps=1000, env_step_budget=1340))
    assert allowance.allowance == -15 and allowance.must_wait(2), "100 steps not counted yet: -25 + 10, not 85"
    allowance.on_params(BlobMeta(version=3, incarnation="a", env_steps=1000, env_step_budget=1380))
    assert allowance.allowance == -5, "a quarter of the budget's growth"
    allowance.on_params(BlobMeta(version=4, incarnation="a", env_steps=1300, env_step_budget=1400))
    assert allowance.allowance == 0 and allowance.must_wait(4)
    allowance.on_params(BlobMeta(version=5, incarnation="a", env_steps=1420, env_step_budget=1480))
    assert allowance.allowance == 15, "the fresh share caps the growth's 20: others sent more"
    allowance.on_params(BlobMeta(version=1, incarnation="b", env_steps=0, env_step_budget=400))
    assert allowance.allowance == 100, "a new learner's first blob grants its share afresh"


def test_an_idle_learner_always_lets_an_actor_send_even_after_allowances_were_lost():
    allowance = EnvStepAllowance(actors=4, slack=400)
    allowance.on_params(BlobMeta(version=1, incarnation="a", env_steps=1000, env_step_budget=1400))
    allowance.on_sent(300)  # overdrawn (say its allowance went with an actor that left and came back)
    # The learner learned from everything it counted (budget - env_steps = the slack): a chunk may start.
    allowance.on_params(BlobMeta(version=2, incarnation="a", env_steps=1400, env_step_budget=1800))
    assert not allowance.must_wait(2)
    grown = EnvStepAllowance(actors=2, slack=100)  # 8 actors heard in a fleet configured for 2
    grown.on_params(BlobMeta(version=1, incarnation="a", env_steps=1000, env_step_budget=1100, actors=8))
    grown.on_sent(64)
    grown.on_params(BlobMeta(version=2, incarnation="a", env_steps=1100, env_step_budget=1200, actors=8))
    assert not grown.must_wait(2), "parts of 12.5 steps, smaller than a chunk: one starts"


def test_a_learner_waiting_between_its_publications_still_frees_an_overdrawn_actor():
    """The learner publishes every `publish_interval` steps, so its budget trails its own by up to that many steps
    at the ratio (`trail`): waiting for data a few steps past its last blob, it must still read as waiting. A
    learner resumed after a kill counts, in its first blob, fewer steps than the fleet had sent, so every actor
    overdraws at once; had the floor waited for the exact slack, none could start a chunk again and the learner
    none of its steps: the simulator's DDPG learner killed mid-run never finished."""
    blob = BlobMeta(version=7, incarnation="b", env_steps=22144, env_step_budget=24136)  # 56 steps behind 24192
    held = EnvStepAllowance(actors=16, slack=2048)
    held.on_params(BlobMeta(version=6, incarnation="b", env_steps=20000, env_step_budget=24072))
    held.on_sent(270)  # past its share: the first blob's count missed what was sent before the kill
    held.on_params(blob)
    assert held.must_wait(7), "the exact floor: no chunk, and so no step, ever again"
    freed = EnvStepAllowance(actors=16, slack=2048, trail=60)  # 15 steps between blobs at a ratio of 0.25
    freed.on_params(BlobMeta(version=6, incarnation="b", env_steps=20000, env_step_budget=24072))
    freed.on_sent(270)
    freed.on_params(blob)
    assert not freed.must_wait(7)


def test_an_idle_learner_frees_the_held_actors_in_their_turns_not_all_at_once():
    """The floor lags by each actor's turn, as its first grant does. Equal for all, it freed every held actor at
    once and left them the same allowance, so the budget's growth freed them together again: bench.fleet's DDPG
    at 1,024 actors sent about 470 chunks in one second every 28 s, and each burst's fan-out held the ps fetch p99
    above 100 ms. While the learner waits, an actor is also freed when its turn in the round has come: the
    learner never waits for the first turns if they left with their actors."""
    clock = FakeClock()
    chunk, n, slack = 64, 8, 2048
    fleet = [EnvStepAllowance(n, slack, chunk, i * GOLDEN % 1.0, clock=clock) for i in range(n)]
    turns = [a.phase for a in fleet]
    for a in fleet:
        a.on_params(BlobMeta(version=1, incarnation="a", env_steps=10_000, env_step_budget=10_000 + slack))
        a.on_sent(10 * chunk)  # overdrawn: say allowances went with actors that left
    clock.now += 1.0
    # The learner learned from all it counted; its budget rounds a fraction of an update down (half a step each).
    idle = BlobMeta(version=2, incarnation="a", env_steps=12_000, env_step_budget=12_000 + slack - 4)
    for a in fleet:
        a.on_params(idle)
    assert [not a.must_wait(2) for a in fleet] == [turn == 0.0 for turn in turns], "only the first turn at once"
    by_allowance = sorted(range(n), key=lambda i: -fleet[i].allowance)
    assert by_allowance == sorted(range(n), key=turns.__getitem__), "the budget's growth frees them in turn"
    # No growth comes (the learner waits for data): each actor is freed when its turn in the round has come. A
    # round: a chunk for each of 8 actors at the 1,996 env steps of budget a version grew by, 1 s a version.
    round_s = chunk * n / 1996 * 1.0
    for tenth in range(1, 11):
        clock.now = 101.0 + (tenth - 0.5) / 10 * round_s
        assert [not a.must_wait(2) for a in fleet] == [turn < (tenth - 0.5) / 10 for turn in turns]
    fleet[2].on_sent(chunk)  # a turn is one chunk: the actor waits for the next blob's verdict
    assert fleet[2].must_wait(2)
    clock.now = 102.0  # a blob that finds the learner still waiting, 8 env steps of budget later
    fleet[2].on_params(BlobMeta(version=3, incarnation="a", env_steps=12_008, env_step_budget=12_008 + slack))
    # At 8 env steps a version, a round (a chunk for each of 8 actors) takes 64 versions: capped at MAX_HOLD_S.
    turn_at = 102.0 + turns[2] * MAX_HOLD_S
    assert fleet[2].must_wait(3) and fleet[2].wait(3).hold_s == pytest.approx(turn_at - 102.0)
    clock.now = turn_at + 0.01
    assert not fleet[2].must_wait(3), "its turn in the next round"
    grown = BlobMeta(version=3, incarnation="a", env_steps=12_064, env_step_budget=12_064 + slack - 8)
    fleet[1].on_params(grown)  # the learner has data again: its turn no longer frees an actor, only growth
    assert fleet[1].idle_since is None and fleet[1].must_wait(3)


def budget_run(actors: int, ticks: int) -> tuple[list[int], list[int], int, list[int], np.ndarray]:
    """A fleet of `actors` sharing the budget of a learner that makes 16 updates a tick (one blob) at replay
    ratio 0.1 from 5,000 env steps; chunks of 64 steps, one per actor a tick, counted by the learner a tick
    after they were sent (in flight, in a shard's sample not yet taken). A waiting actor gets a blob only from
    its wake version on, as the ps sends it. Returns the env steps sent, the updates made and the blobs sent to
    actors at every tick, the learner's slack, and the chunks each actor sent in the second half of the run."""
    chunk, ratio, starts, per_tick = 64, 0.1, 5000, 16
    limiter = ReplayRatioLimiter(starts, ratio, 2 * actors * chunk, per_tick)
    fleet = [EnvStepAllowance(actors, 2 * actors * chunk, chunk, i * GOLDEN % 1.0) for i in range(actors)]
    wake = [0] * actors
    sent, counted, updates = 0, 0, 0
    sent_at, updates_at, blobs_at = [], [], []
    late_chunks = np.zeros(actors, int)
    for tick in range(ticks):
        blob = BlobMeta(tick, "a", env_steps=counted, env_step_budget=limiter.budget(updates))
        counted = sent  # what was sent before this tick is counted from the next blob on
        blobs = 0
        for i, allowance in enumerate(fleet):
            if tick < wake[i]:
                continue
            allowance.on_params(blob)
            blobs += 1
            if not allowance.must_wait(tick):
                allowance.on_sent(chunk)
                sent += chunk
                late_chunks[i] += tick >= ticks // 2
            wake[i] = allowance.wait(tick).wake_version if allowance.must_wait(tick) else tick + 1
        updates = min(updates + per_tick, limiter.updates_allowed(counted))
        sent_at.append(sent)
        updates_at.append(updates)
        blobs_at.append(blobs)
    return sent_at, updates_at, limiter.slack or 0, blobs_at, late_chunks


@pytest.mark.parametrize("actors", [4, 256, 1024])
def test_a_large_fleet_shares_the_budget_and_the_learner_keeps_updating(actors):
    """bench.fleet's DDPG at 256 actors: with a fresh share on every blob the fleet ran 60,000 env steps past
    the budget and the learner spent the whole measurement catching up; the actors then sent nothing. Each
    version goes to the actors its growth frees (their wake versions), not to the whole fleet."""
    sent, updates, slack, blobs, late_chunks = budget_run(actors, ticks=2000)
    for tick in range(len(sent)):
        budget = 5000 + updates[tick - 1] / 0.1 + slack if tick else 5000 + slack
        assert sent[tick] <= budget + actors * 64, f"tick {tick}: {sent[tick]} env steps sent, budget {budget}"
    half = len(sent) // 2
    assert all(b - a == 16 for a, b in itertools.pairwise(updates[half:])), "the learner updates at every tick"
    assert sent[-1] > sent[half], "the fleet still sends"
    assert (late_chunks > 0).all(), f"every actor still has its turns: {np.flatnonzero(late_chunks == 0)} starve"
    # A version grows the budget by 160 env steps (2.5 chunks): it frees a few actors, on their turns, and wakes
    # a few more whose part the fleet's sends have capped since (they wait again); never the whole fleet.
    assert np.mean(blobs[half:]) <= 4 + actors / 64, f"blobs per version: {blobs[half:]}"
    # 2.5 chunks a version on average, and never a crowd: with a floor equal for all, 1,024 actors sent up to 18
    chunks = np.diff(sent[half:]) // 64
    assert chunks.max() <= 6, f"chunks sent in one version: {np.bincount(chunks)}"


def test_an_off_policy_actor_waits_for_the_version_whose_growth_frees_it():
    clock = FakeClock()
    allowance = EnvStepAllowance(actors=10, slack=10_000, clock=clock)
    assert allowance.wait(-1) == Wait(0), "no parameters yet: any blob"
    allowance.on_params(BlobMeta(version=1, incarnation="a", env_steps=1000, env_step_budget=1100))
    allowance.on_sent(64)
    assert allowance.wait(1).wake_version == 2, "no growth seen yet: the next version"
    clock.now += 0.5
    allowance.on_params(BlobMeta(version=3, incarnation="a", env_steps=1000, env_step_budget=1140))
    assert allowance.allowance == 10 - 64 + 4 and allowance.growth == 20
    wait = allowance.wait(3)
    assert wait.wake_version == 3 + 26, "50 steps short at 2 steps a version: free at the 26th version"
    assert wait.hold_s == pytest.approx(1.5 * 26 * 0.25), "as long as those versions take, with a margin"
    allowance.on_sent(10_000)
    assert allowance.wait(3).hold_s == MAX_HOLD_S, "a wake thousands of versions away: the hold is capped"


# -- the learner's end ----------------------------------------------------------------------------------


def test_the_staleness_bound_drops_and_counts_old_chunks():
    kept, dropped = StalenessBound(max_lag=4).split(chunks(10, 7, 6, 3), version=10)
    assert [c.version for c in kept] == [10, 7, 6] and dropped == 1
    kept, dropped = StalenessBound(max_lag=None).split(chunks(3, 2, 3), version=3)
    assert [c.version for c in kept] == [3, 3] and dropped == 1, "lockstep: only the current version"
    assert VersionsRegime(load_config(["algo=es"])).bound.max_lag is None
    assert VersionsRegime(load_config(["algo.max_staleness=7"])).bound.max_lag == 7


def test_replay_ratio_limiter_counts_from_learning_starts_and_its_budget_survives_a_restart():
    limiter = ReplayRatioLimiter(learning_starts=1000, replay_ratio=0.5, slack=200, publish_interval=16)
    assert limiter.updates_allowed(999) == 0 and limiter.updates_allowed(1000) == 0
    assert limiter.updates_allowed(1600) == 300
    # The budget is a function of the checkpointed update count alone: a resumed learner publishes the same.
    assert limiter.budget(300) == 1000 + 600 + 200
    cfg = load_config(["algo=ddpg", "actors=3", "actor.chunk_steps=32", "algo.learning_starts=100"])
    assert ReplayRatioRegime(cfg).limiter.slack == 2 * 3 * 32
    assert ReplayRatioRegime(load_config(["algo=ddpg", "algo.rollout_ahead=0"])).limiter.budget(5) is None
    with pytest.raises(TypeError, match="on-policy"):
        ReplayRatioRegime(load_config([]))


def test_shard_env_steps_add_up_across_shards_and_a_restarted_shard():
    steps = ShardEnvSteps()
    assert steps.observe(0, 100) == 100 and steps.observe(1, 50) == 50 and steps.observe(0, 160) == 60
    assert steps.observe(0, 30) == 30, "a restarted shard counts from zero: all of it is new"
    assert steps.counts == [30, 50]


# -- the cores, in process ------------------------------------------------------------------------------


def serial_actor(cfg, replay: InProcessReplay, params: InProcessParams) -> tuple[Actor, ActorDriver, InlineLoop]:
    """Actor 0 of `cfg` as serial mode runs it: its driver on an inline loop, on in-process ports."""
    loop = InlineLoop()
    actor = Actor(cfg, 0, RoleMetrics("actor", 0), loop)
    ports = InProcessActorPorts(replay, params)
    driver = ports.attach(actor.drive(ports))
    driver.start()
    return actor, driver, loop


def turns_with_progress(loop: InlineLoop, driver: ActorDriver, turns: int) -> int:
    """Of `turns` turns, those in which a chunk went out or a blob was loaded."""
    progressed = 0
    for _ in range(turns):
        before = driver.progress
        loop.turn()
        progressed += driver.progress > before
    return progressed


def test_actor_core_sends_its_shares_waits_and_resumes_on_a_new_version():
    cfg = load_config(["env=InvertedPendulum-v5", "actors=2", "actor.chunk_steps=64", "algo.batch_size=256"])
    shard = ReplayShard("fifo", 10_000)
    params = InProcessParams()
    actor, driver, loop = serial_actor(cfg, InProcessReplay(shard), params)
    try:
        assert not turns_with_progress(loop, driver, 1), "no parameters yet: nothing to run"
        spaces = actor.envs.single_observation_space, actor.envs.single_action_space
        blob = get_algorithm("ppo").make_learner(*spaces, algo_config(cfg), torch.device("cpu")).params()
        params.publish(BlobMeta(0, "inc"), blob)
        turns_with_progress(loop, driver, 20)
        assert shard.stats()["size"] == 4 * 64, "share 2 (256 / (2 actors x 64)) x rollout_ahead 2"
        params.publish(BlobMeta(1, "inc"), blob)
        progressed = turns_with_progress(loop, driver, 20)
        assert shard.stats()["size"] == 6 * 64 and progressed == 3, "one fetch, then one more share"
        params.publish(BlobMeta(2, "inc", done=True), blob)
        turns_with_progress(loop, driver, 2)
        assert actor.core.done and driver.finished
    finally:
        actor.close()


class ClosedThenOpenReplay(InProcessReplay):
    """Backpressure until `open` is set: what a full or unreachable replay looks like to an actor."""

    open = False

    def offer(self, message: Message) -> bool:
        return self.open and super().offer(message)


def test_a_preempted_actor_gives_a_refused_chunk_one_more_try():
    """A refused chunk waits a window (SEND_TIMEOUT_S) for room, is tried again as it ends, and only then counts as
    refused; stopped, the actor gives a chunk refused before one more window and its last try, not two."""
    cfg = load_config(["env=InvertedPendulum-v5", "actors=1", "actor.chunk_steps=32", "algo.batch_size=64"])
    shard = ReplayShard("fifo", 10_000)
    for opens in (True, False):
        replay, params = ClosedThenOpenReplay(shard), InProcessParams()
        actor, driver, loop = serial_actor(cfg, replay, params)
        try:
            spaces = actor.envs.single_observation_space, actor.envs.single_action_space
            params.publish(
                BlobMeta(0, "inc"),
                get_algorithm("ppo").make_learner(*spaces, algo_config(cfg), torch.device("cpu")).params(),
            )
            assert turns_with_progress(loop, driver, 2) == 1, "the blob loaded; the chunk refused"
            assert actor.core.unsent is not None and not actor.core.refused, "backpressure: the chunk waits its window"
            loop.turn()
            assert actor.core.refused and actor.m_blocked._value.get() == 1, "refused a whole window and its last try"
            replay.open = opens
            held = shard.stats()["size"]
            driver.stop()
            loop.turn()  # the window running ends: its last try
            if opens:
                assert driver.finished and actor.lost is None and actor.core.chunks_sent == 1
                assert shard.stats()["size"] == held + 32
            else:
                assert driver.finished and actor.lost is not None, "still refused: one more try, not two"
                assert actor.core.next_action() == Finish(actor.core.unsent), "it finishes, saying what was lost"
        finally:
            actor.close()


def core_at(clock: FakeClock, *overrides: str) -> ActorCore:
    cfg = load_config(["actors=1", "actor.chunk_steps=64", "algo.batch_size=64", "actor.fetch_timeout_s=2", *overrides])
    return ActorCore.of(cfg, 0, clock)


def blob(version: int, incarnation: str = "a") -> Params:
    return Params(BlobMeta(version, incarnation), {})


def test_an_actor_fetch_times_out_at_its_timeout_plus_its_hold_and_a_late_answer_is_read_by_the_next():
    clock = FakeClock()
    core = core_at(clock)
    first = core.next_action()
    assert isinstance(first, Fetch) and first.request.hold_ms > 0, "no parameters yet: a long poll"
    core.asked(True)
    wait = core.next_action()
    assert isinstance(wait, Idle) and wait.until == clock.now + 2 + first.request.hold_ms / 1000
    clock.now = wait.until
    assert core.on_timeout() == REPLY, "no answer in time"
    assert core.next_action() == Idle(clock.now + IDLE_S), "a held fetch that brought nothing: a pause"
    core.on_reply(blob(3))  # the answer to the fetch that timed out, late
    assert core.version == NO_VERSION, "kept for the next fetch, not taken as it came"
    clock.now += IDLE_S
    assert core.on_timeout() == PAUSE
    again = core.next_action()
    assert isinstance(again, Fetch), "the pause over, it asks again"
    core.asked(True)
    assert core.next_action() == Load(blob(3)) and core.version == 3, "the late answer is what the fetch reads first"


def test_an_actor_asks_again_when_a_ps_connection_breaks_or_no_replica_took_its_request():
    clock = FakeClock()
    core = core_at(clock)
    request = core.next_action()
    assert isinstance(request, Fetch)
    core.asked(False)  # no replica connected
    retry = core.next_action()
    assert isinstance(retry, Idle) and retry.until == pytest.approx(clock.now + SEND_POLL_S)
    clock.now = retry.until
    assert core.on_timeout() == RETRY and core.next_action() == request, "asked again shortly"
    core.asked(True)
    deadline = core.next_action()
    core.disconnected()  # the replica holding it went away
    assert core.next_action() == request, "asked again at once, of the others"
    core.asked(True)
    assert core.next_action() == deadline, "the same fetch: its deadline stands"


def test_a_refused_chunk_goes_as_soon_as_there_is_room_within_its_window():
    clock = FakeClock()
    core = core_at(clock)
    core.next_action()
    core.asked(True)
    core.on_reply(blob(0))
    assert isinstance(core.next_action(), Load)
    collect = core.next_action()
    assert isinstance(collect, Collect)
    core.collected(Chunk({"rewards": np.zeros((64, 1))}, version=0, actor=0))
    send = core.next_action()
    assert isinstance(send, Send) and core.sent(False) is None
    window = core.next_action()
    assert window == Idle(clock.now + SEND_TIMEOUT_S, room=True), "it waits for room, up to its window"
    clock.now += 0.3
    core.on_room()
    assert core.next_action() == send, "room: tried at once"
    assert core.sent(True) is not None and core.chunks_sent == 1 and not core.refused


def serial(tmp_path, name: str, *overrides: str) -> dict:
    return run_serial(load_config(["device=cpu", "learner.eval_episodes=2", *overrides]), tmp_path / name)


# The off-policy algorithms with small networks: both run the same replay-ratio path.
OFF_POLICY = {"ddpg": ["algo=ddpg"], "sac": ["algo=sac", "algo.critic_hidden_sizes=[16,16]"]}


@pytest.mark.parametrize("algo", sorted(OFF_POLICY))
@pytest.mark.parametrize("actors", [1, 3])
@pytest.mark.system
def test_the_replay_ratio_is_held_as_actors_are_added(tmp_path, actors, algo):
    result = serial(
        tmp_path,
        f"{algo}{actors}",
        *OFF_POLICY[algo],
        "env=Pendulum-v1",
        f"actors={actors}",
        "steps=1500",
        "algo.learning_starts=300",
        "algo.hidden_sizes=[16,16]",
        "algo.batch_size=32",
        "algo.replay_ratio=0.5",
        "actor.chunk_steps=16",
    )
    ratio = result["updates"] / (result["env_steps"] - 300)
    assert 0.45 <= ratio <= 0.5, f"{actors} actors: {ratio:.3f} updates per env step"
    slack = 2 * actors * 16
    assert result["env_steps"] <= 1500 + slack, "the budget held the actors"


@pytest.mark.system
def test_a_serial_run_trains_the_same_with_the_evaluator_and_writes_its_curve(tmp_path):
    """The evaluator's core steps after the learner in serial mode and changes nothing of the training: metrics
    and the final eval equal a run without it."""
    common = (
        *OFF_POLICY["sac"],
        "env=Pendulum-v1",
        "steps=1600",
        "algo.learning_starts=300",
        "algo.hidden_sizes=[16,16]",
        "algo.batch_size=32",
        "actor.chunk_steps=16",
    )
    plain = serial(tmp_path, "plain", *common)
    watched = serial(tmp_path, "watched", *common, "learner.eval_interval=500")
    untimed = lambda name: [  # noqa: E731
        {k: v for k, v in row.items() if not k.startswith("time")}
        for row in read_metrics(tmp_path / name / "metrics.jsonl")
    ]
    assert json.dumps(untimed("plain")) == json.dumps(untimed("watched"))
    assert plain["eval_returns"] == watched["eval_returns"]
    rows = read_evals(tmp_path / "watched")
    assert [r["env_steps"] // 500 for r in rows] == [1, 2, 3], "one row per interval passed; done ends it"
    assert all(r["eval_episodes"] == 2 for r in rows) and not (tmp_path / "plain" / "evals.jsonl").exists()


class ScriptedSamples:
    """A `BatchesIn` whose every reply is a sample of Pendulum-shaped transitions as large as asked for, and
    reports `steps_per_reply` more env steps; it records what was asked and the priority messages sent home."""

    shards = 1

    def __init__(self, steps_per_reply: int) -> None:
        self.steps_per_reply = steps_per_reply
        self.asked: list[int] = []
        self.sent: list[tuple[np.ndarray, np.ndarray]] = []  # (slots, priorities) per message
        self.rng = np.random.default_rng(0)

    def next(self, batch_size: int, timeout_s: float) -> SampleReply:
        del timeout_s
        self.asked.append(batch_size)
        first = (len(self.asked) - 1) * batch_size  # slots never repeat across replies: each message is traceable
        arrays = {
            "obs": self.rng.standard_normal((batch_size, 3)).astype(np.float32),
            "actions": self.rng.uniform(-2, 2, (batch_size, 1)).astype(np.float32),
            "rewards": self.rng.standard_normal(batch_size).astype(np.float32),
            "next_obs": self.rng.standard_normal((batch_size, 3)).astype(np.float32),
            "discounts": np.full(batch_size, 0.99, np.float32),
            "slots": np.arange(first, first + batch_size),
            "ids": np.arange(first, first + batch_size, dtype=np.uint64),
            "weights": np.ones(batch_size, np.float32),
        }
        return TransitionReply(ShardReport(0, len(self.asked) * self.steps_per_reply), arrays)

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        assert shard == 0 and np.array_equal(slots, ids.astype(np.int64))
        self.sent.append((slots, priorities))


@pytest.mark.parametrize("algo", sorted(OFF_POLICY))
def test_a_sample_of_four_minibatches_is_stepped_through_at_the_replay_ratio_and_its_priorities_go_home_once(
    tmp_path, algo
):
    """Each reply allows 3 more gradient steps and brings 4 minibatches: the learner never steps beyond what
    the replay ratio allows, finishes a sample over two calls, and sends each sample's priorities in one
    message."""
    cfg = load_config(
        [*OFF_POLICY[algo], "env=Pendulum-v1", "device=cpu", "replay.mode=prioritized", "algo.batch_size=8"]
        + ["algo.learning_starts=0", "algo.hidden_sizes=[8]", "learner.minibatches_per_sample=4"]
    )
    samples = ScriptedSamples(steps_per_reply=3)
    log = logging.getLogger("t")
    core = LearnerCore(cfg, tmp_path, samples, InProcessParams(), RoleMetrics("learner", 0), False, log)
    for _ in range(60):
        core.step(0.0)
        assert core.counters.updates <= core.counters.env_steps, "never beyond the replay ratio"
    assert set(samples.asked) == {32}, "one request: 4 minibatches of 8"
    assert core.counters.updates >= core.counters.env_steps - 3  # and never far behind it
    starts = [int(slots[0]) for slots, _ in samples.sent]
    assert len(samples.sent) >= 5 and len(set(starts)) == len(starts), "one message per sample"
    for (slots, priorities), start in zip(samples.sent, starts, strict=True):
        # The minibatches stepped on, in order: the whole sample, or its first ones when a newer sample replaced it.
        assert start % 32 == 0 and len(slots) in (8, 16, 24, 32)
        np.testing.assert_array_equal(slots, np.arange(start, start + len(slots)))
        assert np.all(np.isfinite(priorities) & (priorities >= 0))
    assert 32 in [len(slots) for slots, _ in samples.sent], "a sample stepped through over two calls, sent whole"


@pytest.mark.parametrize("algo", ["ppo", "es"])
@pytest.mark.system
def test_serial_on_policy_runs_are_deterministic(tmp_path, algo):
    overrides = [f"algo={algo}", "env=InvertedPendulum-v5", "actors=1", "steps=4096", "seed=3", "deterministic=true"]
    if algo == "ppo":
        overrides += ["algo.batch_size=1024", "actor.chunk_steps=256", "algo.update_epochs=2"]
    else:
        overrides += ["algo.batch_size=8", "topology.envs_per_actor=4"]
    first, second = serial(tmp_path, "a", *overrides), serial(tmp_path, "b", *overrides)
    assert first == second
    rows = (tmp_path / "a" / "metrics.jsonl").read_text()
    assert rows == (tmp_path / "b" / "metrics.jsonl").read_text() and rows
    assert read_metrics(tmp_path / "a" / "metrics.jsonl")[-1]["stale_dropped"] == 0
    assert json.loads((tmp_path / "a" / "eval.json").read_text())["env_steps"] >= 4096


@pytest.mark.slow
def test_serial_ddpg_learns_pendulum(tmp_path, claim):
    result = serial(
        tmp_path,
        "ddpg",
        "algo=ddpg",
        "env=Pendulum-v1",
        "actors=1",
        "steps=15000",
        "seed=1",
        "algo.learning_starts=1000",
        "algo.hidden_sizes=[64,64]",
        "actor.chunk_steps=32",
        "learner.eval_episodes=10",
    )
    print(f"serial DDPG Pendulum-v1: {result['eval_return_mean']:.1f} at {result['env_steps']} env steps")
    claim("eval_return_mean", result["eval_return_mean"], at_least=-250)


# -- device=auto ----------------------------------------------------------------------------------------


def test_device_auto_picks_the_faster_device_and_only_measures_when_cuda_is_there(caplog):
    log = logging.getLogger("test")
    timings = {"cpu": 0.2, "cuda": 0.5}
    timed: list[str] = []

    def seconds(device: torch.device) -> float:
        timed.append(device.type)
        return timings[device.type]

    assert choose_device(load_config(["device=cpu"]), seconds, log, cuda_available=True).type == "cpu"
    assert choose_device(load_config([]), seconds, log, cuda_available=False).type == "cpu"
    assert timed == [], "an explicit device, or no CUDA, needs no measurement"
    with caplog.at_level(logging.INFO):
        assert choose_device(load_config([]), seconds, log, cuda_available=True).type == "cpu"
        timings["cuda"] = 0.05
        assert choose_device(load_config([]), seconds, log, cuda_available=True).type == "cuda"
    assert "device=auto: cuda (one update: cpu 0.2000 s, cuda 0.0500 s)" in caplog.text


@pytest.mark.parametrize(
    "overrides",
    [
        ["algo.batch_size=256", "actor.chunk_steps=64", "algo.update_epochs=1"],
        ["algo=ddpg", "algo.batch_size=64", "actor.chunk_steps=16", "algo.hidden_sizes=[16,16]"],
    ],
)
def test_an_update_is_timed_on_real_experience(overrides):
    cfg = load_config(["env=Pendulum-v1", "topology.envs_per_actor=2", *overrides])
    assert 0 < update_seconds(cfg, torch.device("cpu"), repeats=1) < 60  # a bound on hangs, not on speed


# -- checkpoints: a restart never resets counters or rewrites history ------------------------------------


def small_ppo(tmp_path, *overrides: str):
    cfg = load_config(
        [
            "env=InvertedPendulum-v5",
            "actors=1",
            "device=cpu",
            "algo.batch_size=128",
            "actor.chunk_steps=64",
            "algo.update_epochs=1",
            "learner.keep_checkpoints=2",
            *overrides,
        ]
    )
    replay, params = InProcessReplay(ReplayShard("fifo", 10_000)), InProcessParams()
    actor, driver, loop = serial_actor(cfg, replay, params)

    def learner(resume: bool) -> LearnerCore:
        return LearnerCore(cfg, tmp_path, replay, params, RoleMetrics("learner", 0), resume, logging.getLogger("t"))

    def train(core: LearnerCore, updates: int) -> None:
        core.publish()
        target = core.counters.updates + updates
        for _ in range(1000):
            if core.counters.updates >= target:
                return
            if not core.step(0.0):
                loop.turn()
        raise AssertionError("no progress")

    return learner, train, actor


def updates_written(tmp_path) -> list[int]:
    """The updates of the rows updates wrote (the warm-up's rows, before the first update, say 0)."""
    return [row["updates"] for row in read_metrics(tmp_path / "metrics.jsonl") if row["updates"]]


def test_a_learner_killed_before_its_first_interval_resumes_from_its_start_checkpoint(tmp_path):
    learner, train, actor = small_ppo(tmp_path, "learner.checkpoint_interval=50")
    first = learner(resume=False)
    train(first, 3)
    assert updates_written(tmp_path) == [1, 2, 3]
    first.close()  # killed: no checkpoint since the one at start
    second = learner(resume=True)
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert second.counters.updates == 0 and rows == [], "rows after the checkpoint go, the warm-up's too"
    train(second, 2)
    second.close()
    actor.close()
    assert updates_written(tmp_path) == [1, 2], "metrics.jsonl never goes backwards"


def test_a_damaged_newest_checkpoint_is_set_aside_and_the_previous_one_restored(tmp_path, caplog):
    learner, train, actor = small_ppo(tmp_path, "learner.checkpoint_interval=1")
    first = learner(resume=False)
    train(first, 3)
    first.close()
    newest = sorted((tmp_path / "checkpoints").glob("ckpt-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # cut short, as a full disk would
    with caplog.at_level(logging.WARNING):
        second = learner(resume=True)
    assert second.counters.updates == 2 and updates_written(tmp_path) == [1, 2]
    assert newest.with_name(newest.name + ".corrupt").exists() and "set aside" in caplog.text
    second.close()
    actor.close()


def test_checkpoints_are_also_written_on_a_timer(tmp_path):
    learner, train, actor = small_ppo(tmp_path, "learner.checkpoint_interval=50", "learner.checkpoint_interval_s=1e-9")
    core = learner(resume=False)
    train(core, 2)
    core.close()
    actor.close()
    assert [p.name for p in sorted((tmp_path / "checkpoints").glob("ckpt-*.pt"))] == [
        "ckpt-0000000001.pt",
        "ckpt-0000000002.pt",
    ]


class PoisonedBatches:
    """A `BatchesIn` whose every reply holds a batch that makes the update diverge (infinite rewards)."""

    shards = 1

    def next(self, batch_size: int, timeout_s: float) -> SampleReply:
        T = batch_size
        arrays = {
            "obs": np.zeros((T, 1, 4), np.float32),
            "next_obs": np.zeros((T, 1, 4), np.float32),
            "actions": np.zeros((T, 1, 1), np.float32),
            "logprobs": np.zeros((T, 1), np.float32),
            "rewards": np.full((T, 1), np.inf, np.float32),
            "terminated": np.zeros((T, 1), bool),
            "truncated": np.zeros((T, 1), bool),
        }
        return FifoReply(ShardReport(0, T), [Chunk(arrays, version=0, actor=0)])

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        raise AssertionError("on-policy: no priorities")


def test_the_learner_core_counts_and_survives_updates_that_go_non_finite(tmp_path, caplog):
    cfg = load_config(["env=InvertedPendulum-v5", "device=cpu", "algo.batch_size=64", "algo.minibatch_size=32"])
    metrics = RoleMetrics("learner", 0)
    core = LearnerCore(cfg, tmp_path, PoisonedBatches(), InProcessParams(), metrics, False, logging.getLogger("t"))
    before = {k: v.copy() for k, v in core.algo_learner.params()["policy"].items()}
    with caplog.at_level(logging.WARNING):
        assert core.step(0.0) and core.step(0.0)
    core.close()
    assert core.recorder.skipped == 2 and "went non-finite and was skipped" in caplog.text
    assert metrics.registry.get_sample_value("surreal_learner_updates_skipped_total", metrics.labels) == 2
    for name, value in core.algo_learner.params()["policy"].items():
        np.testing.assert_array_equal(value, before[name])
