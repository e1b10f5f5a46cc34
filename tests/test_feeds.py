"""The learner's half of each flow-control regime (runtime/regimes/), driven with scripted sample replies and a
fake algorithm learner: no sockets, files, torch or environments. What a reply counts, when work is ready, and
what follows an update."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from surreal.algos.ddpg.config import DDPGConfig
from surreal.algos.es.config import ESConfig
from surreal.algos.ppo.config import PPOConfig
from surreal.config.schema import ExperimentConfig, ReplayConfig
from surreal.proto.wire import BlobMeta, Chunk, FifoReply, SampleReply, ShardReport, TransitionReply
from surreal.runtime.regimes import Counters, regime_of
from surreal.runtime.regimes.common import LiveActors
from surreal.runtime.regimes.replay_ratio import ROW_UPDATES, ReplayRatioLimiter, TransitionFeed
from surreal.runtime.regimes.versions import GOLDEN, ChunkFeed, StalenessBound, VersionThrottle

# -- scripts and fakes ----------------------------------------------------------------------------------


def chunk(version: int, actor: int = 0, units: int = 4, returns: tuple[float, ...] = (), steps: int | None = None):
    return Chunk({"rewards": np.zeros((units, 1))}, version, actor, list(returns), [1] * len(returns), steps)


def fifo_reply(*chunks: Chunk) -> SampleReply:
    return FifoReply(ShardReport(0, 0), list(chunks))


class FakeChunkLearner:
    """Records each update's chunk versions and progress; returns fixed statistics."""

    def __init__(self, stats: dict[str, float] | None = None) -> None:
        self.stats = stats or {"policy_loss": 0.5}
        self.updates: list[tuple[list[int], float]] = []

    def update(self, chunks: list[Chunk], progress: float) -> dict[str, float]:
        self.updates.append(([c.version for c in chunks], progress))
        return dict(self.stats)


def chunk_feed(
    batch_size: int = 8, max_lag: int | None = 2, live: LiveActors | None = None, **kw: Any
) -> tuple[ChunkFeed, FakeChunkLearner, Counters]:
    learner, counters = FakeChunkLearner(kw.pop("stats", None)), Counters()
    feed = ChunkFeed(learner, counters, batch_size, kw.pop("total", 100), StalenessBound(max_lag), 3, live, 4, 1)
    return feed, learner, counters


class FakeTransitionLearner:
    """Records each call's slots and step count. A transition's new priority is its slot + 0.5, so what went
    home is traceable; steps listed in `skip` go non-finite (NaN priorities, `nonfinite_skipped`)."""

    def __init__(self, skip: tuple[int, ...] = ()) -> None:
        self.calls: list[tuple[list[int], int]] = []
        self.skip, self.step = set(skip), 0

    def update(self, batch: dict[str, Any], steps: int = 1) -> tuple[list[dict[str, float]], np.ndarray]:
        slots = np.asarray(batch["slots"])
        self.calls.append((slots.tolist(), steps))
        priorities = slots + 0.5
        stats = []
        for i, minibatch in enumerate(np.split(np.arange(len(slots)), steps)):
            self.step += 1
            if self.step in self.skip:
                priorities[minibatch] = np.nan
                stats.append({"critic_loss": math.nan, "nonfinite_skipped": 1.0})
            else:
                stats.append({"critic_loss": float(self.step), "nonfinite_skipped": 0.0})
            del i
        return stats, priorities


class ScriptedShard:
    """Transition replies as a shard sends them: `size` fresh slots each, and its running env-step count."""

    def __init__(self, shard: int = 0) -> None:
        self.shard, self.next_slot, self.env_steps = shard, 0, 0

    def reply(self, size: int, env_steps: int, actors: tuple[int, ...] = (), returns: tuple[float, ...] = ()):
        self.env_steps += env_steps
        slots = np.arange(self.next_slot, self.next_slot + size)
        self.next_slot += size
        arrays = {"rewards": np.zeros(size, np.float32), "slots": slots, "ids": slots.astype(np.uint64)}
        report = ShardReport(self.shard, self.env_steps, list(returns), [1] * len(returns), list(actors))
        return TransitionReply(report, arrays)


class PrioritiesSent(list):
    def __call__(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        assert np.array_equal(slots, ids.astype(np.int64))
        self.append((shard, slots.tolist(), priorities.tolist()))


def transition_feed(
    ratio: float = 1.0,
    starts: int = 0,
    minibatches: int = 4,
    held: int = 2,
    publish_interval: int = 2,
    skip: tuple[int, ...] = (),
    prioritized: bool = True,
    slack: int | None = 100,
) -> tuple[TransitionFeed, FakeTransitionLearner, Counters, PrioritiesSent]:
    learner, counters, sent = FakeTransitionLearner(skip), Counters(), PrioritiesSent()
    limiter = ReplayRatioLimiter(starts, ratio, slack, publish_interval)
    live = None if slack is None else LiveActors(2 * slack)
    feed = TransitionFeed(learner, counters, limiter, 2, minibatches, held, 1, sent if prioritized else None, live)
    return feed, learner, counters, sent


# -- on-policy: whole chunks, a batch per update, a version per update ----------------------------------


def test_a_fifo_reply_counts_env_steps_episodes_and_actors_and_a_batch_is_ready_at_batch_size():
    feed, learner, counters = chunk_feed(batch_size=8, live=LiveActors(2))
    assert not feed.ready() and feed.sample_size == 8
    assert feed.take(fifo_reply(chunk(0, actor=1, returns=(10.0,)), chunk(0, actor=2, steps=3)))
    assert counters.env_steps == 4 + 3 and counters.episodes == 1 and counters.recent_returns == [10.0]
    assert feed.queued == 8 and feed.ready() and learner.updates == []
    assert feed.live_actors() == 2 and feed.env_step_budget() is None


def test_an_update_takes_whole_chunks_oldest_first_publishes_a_version_and_keeps_the_rest():
    feed, learner, counters = chunk_feed(batch_size=8, total=100)
    feed.take(fifo_reply(chunk(0, units=4), chunk(0, units=6), chunk(0, units=4)))
    outcome = feed.update()
    assert outcome is not None and outcome.publish and outcome.stats == {"policy_loss": 0.5}
    assert learner.updates == [([0, 0], 0.0)], "4 + 6 units: a batch of whole chunks, none split"
    assert feed.queued == 4 and not feed.ready()
    assert (counters.updates, counters.version) == (1, 1)
    assert outcome.row_fields == {"version_lag_mean": 0.0}
    feed.take(fifo_reply(chunk(1, units=4)))
    outcome = feed.update()
    assert outcome is not None and learner.updates[-1] == ([0, 1], 0.1), "annealing counts the 10 steps used before"
    assert outcome.row_fields == {"version_lag_mean": 0.5}


def test_chunks_beyond_the_staleness_bound_are_dropped_before_they_count_towards_a_batch():
    feed, learner, counters = chunk_feed(batch_size=8, max_lag=1)
    counters.version = 5
    feed.take(fifo_reply(chunk(3), chunk(4)))
    assert not feed.ready() and counters.stale_dropped == 1 and feed.queued == 4, "the stale chunk fills no batch"
    assert feed.update() is None and (counters.updates, counters.version) == (0, 5), "no update short of a batch"
    feed.take(fifo_reply(chunk(2), chunk(5)))
    outcome = feed.update()
    assert outcome is not None and learner.updates == [([4, 5], 0.08)] and counters.stale_dropped == 2  # dropped: used


def test_lockstep_learns_from_a_whole_population_of_the_current_version():
    """An overdraft's surplus for version 1 went stale when version 2 came: dropped, it takes no room in the
    batch, which waits for the current version's results (ES: every generation one whole population)."""
    feed, learner, counters = chunk_feed(batch_size=8, max_lag=None)
    counters.version = 2
    feed.take(fifo_reply(chunk(1), chunk(2)))
    assert not feed.ready() and counters.stale_dropped == 1
    feed.take(fifo_reply(chunk(2)))
    feed.update()
    assert learner.updates == [([2, 2], 0.04)] and feed.queued == 0


def test_checkpoint_interval_and_non_finite_updates_are_reported_in_the_outcome():
    feed, _, counters = chunk_feed(batch_size=4, stats={"policy_loss": math.nan, "nonfinite_skipped": 1.0})
    outcomes = []
    for _ in range(3):
        feed.take(fifo_reply(chunk(counters.version)))
        outcomes.append(feed.update())
    assert [o.checkpoint_interval for o in outcomes if o] == [False, False, True], "every 3 updates"
    assert [o.skipped for o in outcomes if o] == [1, 1, 1]


def test_on_policy_actors_count_on_the_clock_of_versions():
    feed, _, counters = chunk_feed(batch_size=8, live=LiveActors(2))  # shares of a whole chunk: a round a version
    feed.take(fifo_reply(chunk(0, actor=0), chunk(0, actor=1)))
    counters.version = 2
    feed.take(fifo_reply(chunk(2, actor=1)))
    assert feed.live_actors() == 2
    counters.version = 3
    assert feed.live_actors() == 1, "actor 0 unheard for more than two versions"
    small = chunk_feed(batch_size=4, live=LiveActors(2))[0]  # two actors' chunks are two batches: a chunk each 2
    small.take(fifo_reply(chunk(0, actor=0), chunk(0, actor=1)))
    small.counters.version = 4
    assert small.live_actors() == 2, "heard within two of their rounds (four versions)"
    small.counters.version = 5
    assert small.live_actors() is None


@pytest.mark.parametrize("actors", [8, 1024, 1500])
def test_a_fleet_larger_than_a_batch_sends_a_batch_a_version_and_every_actor_counts_live(actors):
    """Shares of a fraction of a chunk: 2,048-unit batches of 64-unit chunks, sent by up to 1,500 actors each
    sending a chunk every actors / 32 versions on its turn, woken by the ps at that version (its wake version)
    and at no other. The learner gets a batch a version (none stale), and counts every actor live."""
    batch, units = 2048, 64
    feed = ChunkFeed(
        FakeChunkLearner(), Counters(), batch, 10**9, StalenessBound(2), 10**6, LiveActors(2), units, actors
    )
    throttles = [VersionThrottle(batch, units, actors, 2, 0.0, phase=i * GOLDEN % 1.0) for i in range(actors)]
    sent_by = np.zeros(actors, int)
    wake = np.zeros(actors, int)  # the version each waiting actor asked the ps to wake it at
    arrived: list[int] = []  # chunks sent for each version
    blobs: list[int] = []  # blobs the ps sent for each version
    live: list[int | None] = []
    for _ in range(400):
        c = feed.counters
        blob = BlobMeta(c.version, "a", actors=feed.live_actors())
        live.append(blob.actors)
        chunks = []
        woken = np.flatnonzero(wake <= c.version)
        blobs.append(len(woken))
        for i in woken:
            throttle = throttles[i]
            throttle.on_params(blob)
            while not throttle.must_wait(c.version):
                throttle.on_sent(units)
                chunks.append(chunk(c.version, actor=int(i), units=units))
                sent_by[i] += 1
            wake[i] = throttle.wait(c.version).wake_version
        arrived.append(len(chunks))
        feed.take(fifo_reply(*chunks))
        assert feed.update() is not None, f"version {c.version}: {feed.queued} units queued, short of a batch"
    assert c.stale_dropped == 0 and feed.queued <= 2 * batch, "the surplus is rollout_ahead's, never more"
    assert all(abs(n - 32) <= 2 for n in arrived[1:]), f"a batch's 32 chunks a version, give or take: {arrived}"
    assert all(n <= max(34, actors) for n in blobs[1:]), f"a version is sent to the actors it frees: {blobs}"
    assert (sent_by > 0).all(), "every actor had its turn"
    assert live[0] is None and set(live[1:]) == {actors}, "every actor counted live, from the first reply on"


# -- off-policy: minibatches within the replay ratio ----------------------------------------------------


def test_work_is_ready_only_within_the_replay_ratio_and_a_sample_is_stepped_through_over_several_calls():
    feed, learner, counters, sent = transition_feed(ratio=0.5, starts=10, held=3)
    shard = ScriptedShard()
    assert not feed.take(shard.reply(8, env_steps=10)), "a sample alone is no progress"
    assert counters.env_steps == 10 and not feed.ready(), "learning_starts reached, no step allowed yet"
    feed.take(shard.reply(8, env_steps=6))
    assert feed.ready() and feed.queued == 16
    outcome = feed.update()
    assert learner.calls == [([0, 1, 2, 3, 4, 5], 3)], "(16 - 10) * 0.5 = 3 of the oldest sample's 4 minibatches"
    assert counters.updates == 3 and not feed.ready() and sent == []
    assert outcome.update_s >= 0 and outcome.stats is None
    feed.take(shard.reply(8, env_steps=2))
    feed.update()
    assert learner.calls[-1] == ([6, 7], 1), "the rest of the first sample, never beyond the ratio"
    assert sent == [(0, list(range(8)), [s + 0.5 for s in range(8)])], "used up: its priorities go home at once"


def test_a_sample_replaced_before_it_is_used_up_sends_the_priorities_it_earned_and_skipped_steps_send_none():
    feed, _, counters, sent = transition_feed(held=1, skip=(2,))
    shard = ScriptedShard(shard=3)
    feed.take(shard.reply(8, env_steps=3))
    feed.update()
    assert counters.updates == 3
    feed.take(shard.reply(8, env_steps=0))
    assert sent == [(3, [0, 1, 4, 5], [0.5, 1.5, 4.5, 5.5])], "minibatch 2 went non-finite: its slots stay"
    never_used, _, _, none_sent = transition_feed(held=1)
    never_used.take(shard.reply(8, env_steps=0))
    never_used.take(shard.reply(8, env_steps=0))
    assert none_sent == [], "nothing stepped on: nothing to send"


def test_a_replay_without_priorities_sends_none_home_and_a_reply_without_transitions_is_not_taken():
    feed, _, counters, sent = transition_feed(prioritized=False)
    feed.take(ScriptedShard().reply(8, env_steps=4))
    feed.update()
    assert counters.updates == 4 and sent == []
    assert not feed.take(FifoReply(ShardReport(0, 100), [])) and counters.env_steps == 4


def test_publish_every_interval_a_row_every_row_updates_of_the_unskipped_steps_and_checkpoints():
    feed, _, counters, _ = transition_feed(ratio=1.0, publish_interval=2, skip=(1,))
    shard, outcomes = ScriptedShard(), []
    while counters.updates < ROW_UPDATES:
        feed.take(shard.reply(8, env_steps=4))
        outcomes.append(feed.update())
    # Four steps a call cross a publish interval of 2 every call: one new version each.
    assert sum(o.publish for o in outcomes) == len(outcomes) == counters.version
    rows = [o for o in outcomes if o.stats is not None]
    assert len(rows) == 1 and rows[0] is outcomes[-1] and rows[0].checkpoint_interval
    assert [o.checkpoint_interval for o in outcomes].count(True) == 1
    steps = range(2, counters.updates + 1)  # step 1 went non-finite: left out of the row's means
    assert rows[0].stats == {"critic_loss": np.mean(steps), "nonfinite_skipped": 0.0}
    assert sum(o.skipped for o in outcomes) == 1


def test_env_steps_add_up_across_shards_and_a_restarted_shard_into_the_checkpointed_counters():
    feed, _, counters, _ = transition_feed()
    first, second = ScriptedShard(0), ScriptedShard(1)
    feed.take(first.reply(8, env_steps=100))
    feed.take(second.reply(8, env_steps=50))
    restarted = ScriptedShard(0)
    feed.take(restarted.reply(8, env_steps=30))
    assert counters.env_steps == 180 and counters.shard_env_steps == [30, 50]


def test_off_policy_actors_count_on_the_clock_of_env_steps_and_the_budget_follows_updates():
    feed, _, counters, _ = transition_feed(ratio=0.5, starts=10, slack=20)
    shard = ScriptedShard()
    feed.take(shard.reply(8, env_steps=10, actors=(0, 1), returns=(1.0, 3.0)))
    assert feed.live_actors() == 2 and counters.recent_returns == [1.0, 3.0]
    feed.take(shard.reply(8, env_steps=41, actors=(1,)))
    assert feed.live_actors() == 1, "actor 0 unheard for more than two slacks (40 env steps)"
    assert feed.env_step_budget() == 10 + 0 + 20
    feed.update()
    assert feed.env_step_budget() == 10 + 4 / 0.5 + 20


# -- the regime follows the algorithm's config ----------------------------------------------------------


def experiment(algo: Any, **kw: Any) -> ExperimentConfig:
    return ExperimentConfig(algo=algo, **kw)


@pytest.mark.parametrize(
    ("cfg", "kind", "max_lag", "live"),
    [
        (experiment(PPOConfig(batch_size=64, max_staleness=7)), ChunkFeed, 7, True),
        (experiment(ESConfig()), ChunkFeed, None, True),
        (experiment(PPOConfig(), deterministic=True), ChunkFeed, 4, False),
        (experiment(DDPGConfig()), TransitionFeed, None, True),
    ],
)
def test_the_config_picks_the_feed(cfg, kind, max_lag, live):
    feed = regime_of(cfg).learner_feed(FakeChunkLearner(), Counters(), 2, PrioritiesSent())
    assert isinstance(feed, kind) and feed.sample_size == regime_of(cfg).sample_size
    assert (feed.live is not None) == live
    if isinstance(feed, ChunkFeed):
        assert feed.bound.max_lag == max_lag and feed.sample_size == cfg.algo.batch_size


def test_an_off_policy_feed_holds_a_sample_per_request_counts_actors_over_two_slacks_and_sends_priorities():
    cfg = experiment(DDPGConfig(batch_size=32), replay=ReplayConfig(mode="prioritized"))
    cfg.topology.actors, cfg.actor.chunk_steps = 3, 32
    feed = regime_of(cfg).learner_feed(FakeTransitionLearner(), Counters(), 2, PrioritiesSent())
    assert isinstance(feed, TransitionFeed) and feed.sample_size == 4 * 32 and feed.held.samples_held == 2 * 2
    assert feed.live is not None and feed.live.window == 2 * 2 * 3 * 32, "two slacks of env steps"
    assert feed.held.priorities_home is not None
    uniform = regime_of(experiment(DDPGConfig())).learner_feed(FakeTransitionLearner(), Counters(), 1, PrioritiesSent())
    assert isinstance(uniform, TransitionFeed) and uniform.held.priorities_home is None
    cfg.algo.rollout_ahead = 0  # type: ignore[attr-defined]  # DDPG's
    free = regime_of(cfg).learner_feed(FakeTransitionLearner(), Counters(), 1, PrioritiesSent())
    assert isinstance(free, TransitionFeed) and free.live is None and free.env_step_budget() is None
