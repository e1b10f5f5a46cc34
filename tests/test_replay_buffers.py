"""Replay semantics: FIFO order and drops, ring storage and overwrite ids, layout checks, uniform coverage,
prioritized proportions and importance weights, stale priority updates, the sum tree against brute
force, and the replay package staying torch-free."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from surreal.proto.codec import Limits, ProtocolError, header_cost
from surreal.proto.wire import Chunk, ShardReport, chunk_meta, encode_chunk
from surreal.replay import (
    ChunkFifo,
    InOrder,
    PrioritizedSampler,
    SumTree,
    TransitionStorage,
    UniformSampler,
    flatten_time_major,
)
from surreal.replay.buffers import REPLY_HEADER_RESERVE
from surreal.replay.shard import ReplayShard


def chunk(value: float, T: int = 4, K: int = 2) -> dict[str, np.ndarray]:
    return {"obs": np.full((T, K, 3), value, np.float32), "rewards": np.full((T, K), value, np.float32)}


def message(arrays: dict, version: int = 0):
    """The experience message an actor sends for `arrays`."""
    return encode_chunk(Chunk(arrays, version, 0), "")


def filled(mode: str, capacity: int, n: int, **kwargs) -> ReplayShard:
    """A shard holding transitions x = 0..n-1 in slots 0..n-1 (one chunk, T = n, K = 1)."""
    replay = ReplayShard(mode, capacity, **kwargs)
    replay.add(message({"x": np.arange(float(n)).reshape(n, 1)}))
    return replay


def tagged(value: float, i: int, T: int = 4, episodes: int = 0) -> tuple[Chunk, int]:
    """A chunk whose version is `i`, with `episodes` finished episodes in its metadata, and its T*K."""
    returns, lengths = [1.0] * episodes, [1] * episodes
    return Chunk(chunk(value, T), i, 0, returns, lengths), T * 2


def take(fifo: ChunkFifo, max_transitions: int) -> list[int]:
    """The versions of the chunks one reply of `max_transitions` takes, in order (`InOrder` picks them)."""
    slots, _ = InOrder().sample(fifo, max_transitions, np.random.default_rng())
    return [c.version for c in fifo.reply(ShardReport(0, 0), slots, None).chunks]


# -- FIFO -------------------------------------------------------------------------------------------------


def test_fifo_serves_each_chunk_once_in_order_and_drops_oldest_when_full():
    fifo = ChunkFifo(capacity_transitions=40)
    for i in range(7):  # 8 transitions each: the 6th and 7th evict the two oldest
        fifo.add(*tagged(i, i))
    assert (fifo.dropped_transitions, fifo.dropped_chunks, fifo.size, fifo.num_chunks) == (16, 2, 40, 5)
    assert take(fifo, 16) == [2, 3]
    assert take(fifo, 17) == [4, 5], "stops before exceeding"
    assert take(fifo, 1) == [6], "at least one chunk even if larger than asked"
    assert take(fifo, 1000) == [] and fifo.size == 0 and fifo.num_chunks == 0
    assert (fifo.added_transitions, fifo.served_transitions) == (56, 40)


def test_fifo_rejects_oversize_chunks_and_respects_the_frame_budget():
    fifo = ChunkFifo(capacity_transitions=100, reply=Limits(max_frames=5))
    for i in range(5):
        fifo.add(*tagged(i, i))
    fifo.add(*tagged(9, 9, T=60))  # bigger than the whole capacity: refused, queue untouched
    assert (fifo.dropped_transitions, fifo.dropped_chunks, fifo.size, fifo.num_chunks) == (120, 1, 40, 5)
    assert take(fifo, 1000) == [0, 1]  # two arrays per chunk
    assert take(fifo, 1000) == [2, 3]
    with pytest.raises(ValueError):
        fifo.add(tagged(0, 0)[0], -1)
    with pytest.raises(ProtocolError, match="too_large_for_reply"):  # refused when it arrives, never lost later
        ChunkFifo(100, reply=Limits(max_frames=1)).add(*tagged(0, 0))


def test_fifo_replies_keep_to_the_receivers_byte_and_header_limits():
    one = tagged(0, 0)[0]
    size = chunk(0)["obs"].nbytes + chunk(0)["rewards"].nbytes + header_cost(chunk_meta(one, ""), chunk(0))
    fifo = ChunkFifo(100, reply=Limits(max_bytes=REPLY_HEADER_RESERVE + 3 * size + 10))
    for i in range(6):
        fifo.add(*tagged(i, i))
    assert take(fifo, 1000) == [0, 1, 2], "three chunks' bytes fit, four do not"
    header = header_cost(chunk_meta(tagged(0, 0, episodes=500)[0], ""), chunk(0))
    wordy = ChunkFifo(100, reply=Limits(max_header_bytes=REPLY_HEADER_RESERVE + 2 * header + 10))
    for i in range(4):
        wordy.add(*tagged(i, i, episodes=500))
    assert take(wordy, 1000) == [0, 1], "the reply's header stays under its limit"
    with pytest.raises(ProtocolError, match="too_large_for_reply"):
        wordy.add(*tagged(0, 0, episodes=5000))


def test_capacity_in_bytes_evicts_the_oldest_chunks_and_bounds_a_transition_layout():
    per_chunk = chunk(0)["obs"].nbytes + chunk(0)["rewards"].nbytes
    fifo = ChunkFifo(1000, capacity_bytes=3 * per_chunk)
    for i in range(5):
        fifo.add(*tagged(i, i))
    assert take(fifo, 1000) == [2, 3, 4] and fifo.dropped_chunks == 2
    storage = TransitionStorage(1000, capacity_bytes=1000 * 4)
    with pytest.raises(ValueError, match="exceed"):
        storage.write({"x": np.zeros((3, 2), np.float32)})  # 8 bytes a transition: 8,000 > 4,000
    assert not storage.data


def test_a_fifo_shard_serves_whole_chunks_in_order_and_keeps_the_books():
    replay = ReplayShard("fifo", capacity=20)
    assert isinstance(replay.storage, ChunkFifo) and isinstance(replay.sampler, InOrder) and not replay.ready(1)
    for i in range(3):
        replay.add(message(chunk(i), version=i))  # the third evicts the first
    assert replay.ready(1000)
    chunks = replay.sample(1000).chunks
    assert [c.version for c in chunks] == [1, 2]
    assert chunks[1].arrays["obs"][0, 0, 0] == 2.0 and not replay.ready(1)
    stats = replay.stats()
    assert stats == {"size": 0, "capacity": 20, "added": 24, "served": 16, "dropped": 8}
    assert stats["added"] == stats["size"] + stats["served"] + stats["dropped"]
    with pytest.raises(ValueError):
        replay.update_priorities(np.zeros(1, np.int64), np.ones(1, np.uint64), np.ones(1))


# -- ring storage -----------------------------------------------------------------------------------------


def test_ring_storage_wraps_and_ids_detect_overwrites():
    storage = TransitionStorage(capacity=5)
    assert list(storage.write({"x": np.arange(3.0)})) == [0, 1, 2]
    assert list(storage.write({"x": np.arange(3.0, 7.0)})) == [3, 4, 0, 1] and storage.size == 5
    assert list(storage.data["x"]) == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert list(storage.ids) == [6, 7, 3, 4, 5], "ids are global insertion numbers"
    assert list(storage.write({"x": np.zeros(0)})) == [] and storage.added == 7
    slots = storage.write({"x": np.arange(100.0, 112.0)})  # more than capacity: the newest 5 are kept
    assert list(slots) == [2, 3, 4, 0, 1] and storage.added == 19
    assert list(storage.gather(slots)["x"]) == [107.0, 108.0, 109.0, 110.0, 111.0]
    assert list(storage.ids[slots]) == [15, 16, 17, 18, 19]


def test_storage_rejects_batches_that_do_not_match_the_first_layout():
    storage = TransitionStorage(capacity=8)
    storage.write({"obs": np.zeros((2, 3), np.float32), "done": np.zeros(2, bool)})
    bad = [
        {"obs": np.zeros((2, 3), np.float64), "done": np.zeros(2, bool)},  # dtype
        {"obs": np.zeros((2, 4), np.float32), "done": np.zeros(2, bool)},  # trailing shape
        {"obs": np.zeros((2, 3), np.float32)},  # keys
        {"obs": np.zeros((2, 3), np.float32), "done": np.zeros(3, bool)},  # lengths
        {"obs": np.zeros((2, 3), np.float32), "done": np.array(True)},  # no leading dimension
        {},
    ]
    for batch in bad:
        with pytest.raises(ValueError):
            storage.write(batch)
    assert storage.size == 2 and storage.added == 2, "a rejected batch writes nothing"


def test_flatten_time_major_keeps_transition_order_and_checks_the_lead_dims():
    T, K = 3, 2
    arrays = {"obs": np.arange(T * K * 2.0).reshape(T, K, 2), "extra": {"logp": np.arange(T * K).reshape(T, K)}}
    flat = flatten_time_major(arrays)
    assert sorted(flat) == ["extra/logp", "obs"]
    np.testing.assert_array_equal(flat["obs"], np.arange(12.0).reshape(6, 2))
    np.testing.assert_array_equal(flat["extra/logp"], np.arange(6))
    with pytest.raises(ValueError):
        flatten_time_major({"a": np.zeros((3, 2)), "b": np.zeros((2, 3))})  # same T*K, different [T, K]
    with pytest.raises(ValueError):
        flatten_time_major({"a": np.zeros(3)})


def test_a_transition_shard_returns_nested_batches_with_slots_and_ids():
    replay = ReplayShard("uniform", capacity=10, seed=3)
    assert not replay.ready(1)
    T, K = 3, 2
    replay.add(message({"obs": np.arange(6.0).reshape(T, K, 1), "extra": {"logp": -np.arange(6.0).reshape(T, K)}}))
    assert replay.ready(6) and not replay.ready(7)
    arrays = replay.sample(32).transitions
    assert sorted(arrays) == ["extra", "ids", "obs", "slots"] and len(arrays["slots"]) == 32
    assert arrays["slots"].dtype == np.int64 and arrays["ids"].dtype == np.uint64
    np.testing.assert_array_equal(arrays["obs"][:, 0], arrays["slots"])
    np.testing.assert_array_equal(arrays["extra"]["logp"], -arrays["slots"])
    np.testing.assert_array_equal(arrays["ids"], arrays["slots"] + 1)
    with pytest.raises(ValueError, match="reserved"):
        replay.add(message({"ids": np.zeros((1, 1))}))
    with pytest.raises(ValueError):  # the count announced differs from the chunk's T*K
        replay.storage.add(Chunk({"obs": np.zeros((1, 1, 1)), "extra": {"logp": np.zeros((1, 1))}}, 0, 0), 2)
    replay.add(message({"obs": np.zeros((4, 2, 1)), "extra": {"logp": np.zeros((4, 2))}}))
    assert replay.stats() == {"size": 10, "capacity": 10, "added": 14, "served": 32, "dropped": 4}
    with pytest.raises(ValueError):
        replay.update_priorities(np.zeros(1, np.int64), np.ones(1, np.uint64), np.ones(1))


# -- samplers ---------------------------------------------------------------------------------------------


def test_uniform_sampling_covers_the_filled_slots_evenly():
    storage = TransitionStorage(capacity=16)
    storage.write({"x": np.zeros(10)})  # slots 10..15 are empty and must never be drawn
    rng = np.random.default_rng(0)
    counts = np.bincount(UniformSampler().sample(storage, 100_000, rng)[0], minlength=16)
    assert counts[10:].sum() == 0
    expected = counts.sum() / 10
    chi2 = ((counts[:10] - expected) ** 2 / expected).sum()
    assert chi2 < 27.88  # chi-square, 9 degrees of freedom, p = 0.001


def test_prioritized_sampling_is_proportional_to_priority_to_the_alpha():
    alpha, eps = 0.7, 1e-3
    replay = filled("prioritized", capacity=8, n=6, alpha=alpha, beta=0.5, priority_eps=eps, seed=1)
    errors = np.array([1.0, -2.0, 4.0, 8.0, 0.5, 0.0])  # the sign of a TD error is irrelevant
    assert replay.update_priorities(np.arange(6), replay.storage.ids[:6].copy(), errors) == 6
    draws, batch = 200_000, 1000
    counts = np.zeros(8)
    for _ in range(draws // batch):
        counts += np.bincount(replay.sample(batch).transitions["slots"], minlength=8)
    p = (np.abs(errors) + eps) ** alpha
    p /= p.sum()
    assert counts[6:].sum() == 0
    # A multinomial count has std sqrt(n p (1-p)); stratification only lowers it. 4 sigma per cell.
    sigma = np.sqrt(draws * p * (1 - p))
    assert np.all(np.abs(counts[:6] - draws * p) < 4 * sigma), (counts[:6] / draws, p)


def test_importance_weights_follow_the_formula():
    alpha, beta, eps = 0.6, 0.4, 0.01
    replay = filled("prioritized", capacity=6, n=4, alpha=alpha, beta=beta, priority_eps=eps, seed=2)
    errors = np.array([1.0, 2.0, 3.0, 4.0])
    replay.update_priorities(np.arange(4), replay.storage.ids[:4].copy(), errors)
    arrays = replay.sample(64).transitions
    p = (errors + eps) ** alpha
    P = p / p.sum()
    w = (4 * P) ** -beta
    assert arrays["weights"].dtype == np.float32
    np.testing.assert_allclose(arrays["weights"], (w / w.max())[arrays["slots"]], rtol=1e-6)
    replay.sampler.beta = 1.0  # annealed by the learner
    arrays = replay.sample(64).transitions
    np.testing.assert_allclose(arrays["weights"], (p.min() / p)[arrays["slots"]], rtol=1e-6)


def test_new_transitions_enter_at_the_largest_priority_seen():
    replay = filled("prioritized", capacity=4, n=2, alpha=0.5, priority_eps=1e-6)
    replay.update_priorities(np.arange(2), replay.storage.ids[:2].copy(), np.array([9.0, 0.25]))
    replay.add(message({"x": np.ones((1, 1))}))
    tree = replay.sampler.tree
    assert tree.get(np.array([2]))[0] == pytest.approx((9.0 + 1e-6) ** 0.5)
    assert tree.min == pytest.approx((0.25 + 1e-6) ** 0.5)


def test_priority_updates_for_overwritten_or_empty_slots_are_skipped():
    replay = filled("prioritized", capacity=4, n=3, alpha=1.0, priority_eps=1e-6)
    stale = replay.storage.ids.copy()  # [1, 2, 3, 0]
    replay.add(message({"x": np.ones((2, 1))}))  # ids 4, 5 overwrite slots 3 and 0
    tree = replay.sampler.tree
    before = tree.get(np.arange(4)).copy()
    applied = replay.update_priorities(np.arange(4), stale, np.full(4, 50.0))
    assert applied == 2, "slots 1 and 2 still hold ids 2 and 3"
    np.testing.assert_allclose(tree.get(np.arange(4)), [before[0], 50.0, 50.0, before[3]], rtol=1e-6)
    empty = filled("prioritized", capacity=4, n=2)
    assert empty.update_priorities(np.array([3]), np.array([0], np.uint64), np.array([5.0])) == 0
    for slots, priorities in (
        (np.array([0]), np.array([np.nan])),
        (np.array([4]), np.ones(1)),
        (np.array([-1]), np.ones(1)),
        (np.array([0, 1]), np.ones(1)),
    ):
        with pytest.raises(ValueError):
            replay.update_priorities(slots, stale[: len(slots)], priorities)


def test_prioritized_sampler_rejects_a_zero_eps():
    with pytest.raises(ValueError):
        PrioritizedSampler(4, alpha=0.6, beta=0.4, eps=0.0)


# -- sum tree ---------------------------------------------------------------------------------------------

# Priorities that are multiples of 1/4 below 2^10: every sum a tree of <= 64 leaves forms is exact in
# float64, so the tree must agree with numpy's cumsum bit for bit.
dyadic = st.integers(0, 4096).map(lambda k: k / 4)
scattered = st.lists(st.tuples(st.integers(0, 63), dyadic), max_size=12)
# A run of consecutive slots (what an add writes) takes the tree's slice path; taken modulo the capacity
# below, a run may also wrap or repeat slots.
run = st.tuples(st.integers(0, 63), st.lists(dyadic, min_size=1, max_size=24)).map(
    lambda start_priorities: [(start_priorities[0] + i, p) for i, p in enumerate(start_priorities[1])]
)


@settings(max_examples=100, deadline=None)
@given(
    capacity=st.integers(1, 64),
    batches=st.lists(st.one_of(scattered, run), min_size=1, max_size=8),
    draws=st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=16),
)
def test_sum_tree_matches_brute_force(capacity, batches, draws):
    tree = SumTree(capacity)
    reference = np.zeros(capacity)
    ever_set = np.zeros(capacity, bool)
    for batch in batches:
        slots = np.array([s % capacity for s, _ in batch], np.int64)
        priorities = np.array([p for _, p in batch], np.float64)
        tree.update(slots, priorities)
        for slot, priority in zip(slots, priorities, strict=True):  # a repeated slot: the last write wins
            reference[slot] = priority
            ever_set[slot] = True
    assert tree.total == reference.sum()
    np.testing.assert_array_equal(tree.get(np.arange(capacity)), reference)
    assert tree.min == (reference[ever_set].min() if ever_set.any() else np.inf)
    if reference.sum() == 0:
        with pytest.raises(ValueError):
            tree.find_prefix_sum(np.zeros(1))
        return
    values = np.array(draws) * reference.sum()
    expected = np.searchsorted(np.cumsum(reference), values, side="right")
    np.testing.assert_array_equal(tree.find_prefix_sum(values), expected)


@settings(max_examples=60, deadline=None)
@given(priorities=st.lists(st.floats(0.0, 1e6), min_size=1, max_size=40), fill=st.integers(1, 40))
@example(priorities=[0.0, 0.0, 0.0, 0.29, 0.03, 0.0, 0.49], fill=7)  # a naive descent returns empty slot 7
def test_sum_tree_never_returns_an_empty_slot_under_round_off(priorities, fill):
    """Arbitrary floats make inner sums inexact; draws at the very top of the mass must still land on a
    positive-priority slot, never on an empty one to its right."""
    priorities = np.array(priorities[:fill])
    tree = SumTree(64)
    tree.update(np.arange(len(priorities)), priorities)
    if tree.total == 0:
        return
    top = np.nextafter(tree.total, 0.0)
    values = np.array([0.0, tree.total / 2, top, tree.total, 2 * tree.total])
    slots = tree.find_prefix_sum(values)
    assert np.all(slots < len(priorities)) and np.all(priorities[slots] > 0)


def test_sum_tree_rejects_bad_updates():
    tree = SumTree(4)
    with pytest.raises(IndexError):
        tree.update(np.array([4]), np.ones(1))
    for priorities in (np.array([-1.0]), np.array([np.inf])):
        with pytest.raises(ValueError):
            tree.update(np.array([0]), priorities)


# -- packaging and speed ----------------------------------------------------------------------------------


def test_replay_package_does_not_import_torch():
    code = "import sys, surreal.replay; assert 'torch' not in sys.modules, 'surreal.replay imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_halfcheetah_sized_adds_wrap_correctly_and_print_their_rate():
    """Correctness of many wrapping chunk adds; the rate is printed (-s) for a sanity look, not asserted."""
    T, K, capacity = 1000, 1, 100_000
    rng = np.random.default_rng(0)
    shapes = {"obs": (17,), "next_obs": (17,), "actions": (6,), "rewards": ()}
    base = {k: rng.standard_normal((T, K, *s), dtype=np.float32) for k, s in shapes.items()}
    for mode in ("uniform", "prioritized"):
        replay = ReplayShard(mode, capacity + 500)  # not a multiple of the chunk: adds straddle the wrap
        start = time.perf_counter()
        for i in range(300):
            base["rewards"][:, 0] = i  # tag each chunk
            replay.add(message({**base, "terminated": np.zeros((T, K), bool)}))
        rate = 300 * T * K / (time.perf_counter() - start)
        arrays = replay.sample(4096).transitions
        ids = arrays["ids"].astype(np.int64)
        np.testing.assert_array_equal(arrays["rewards"], (ids - 1) // T)
        np.testing.assert_array_equal(arrays["obs"], base["obs"][(ids - 1) % T, 0])
        print(f"\n{mode}: {rate / 1e6:.2f} M transitions/s added in chunks of {T * K}")


def test_a_shard_is_built_from_the_whole_replay_config():
    """Serial mode and the replay role build a shard the same way: every ReplayConfig field it uses arrives."""
    from surreal.config.schema import ReplayConfig
    from surreal.replay.shard import ReplayShard, message_limits

    config = ReplayConfig(mode="fifo", capacity=500, capacity_bytes=12_345, max_frames=7, max_message_bytes=99_999)
    shard = ReplayShard.of(config, seed=0, shard=3)
    assert isinstance(shard.storage, ChunkFifo) and (shard.shard, shard.capacity) == (3, 500)
    assert shard.storage.capacity_bytes == 12_345 and shard.storage.reply_limits == message_limits(config)
    assert (message_limits(config).max_frames, message_limits(config).max_bytes) == (7, 99_999)
    prioritized = ReplayShard.of(ReplayConfig(mode="prioritized", alpha=0.7, beta=0.5, priority_eps=0.01), seed=0)
    sampler = prioritized.sampler
    assert isinstance(sampler, PrioritizedSampler) and (sampler.alpha, sampler.beta, sampler.eps) == (0.7, 0.5, 0.01)


# -- a layout declared by the experiment -------------------------------------------------------------------------


def declared() -> dict:
    """One transition as `chunk` makes them: the experiment's declared layout (`replay.layout`)."""
    from surreal.proto.wire import Field

    return {"obs": Field(np.dtype(np.float32), (3,)), "rewards": Field(np.dtype(np.float32))}


@pytest.mark.parametrize("mode", ["uniform", "prioritized"])
def test_a_declared_layout_lays_a_shard_out_at_start_and_its_first_chunk_is_checked_like_any(mode):
    """Laid out by the experiment, a transition replay knows its reply's size before any chunk, refuses a first
    chunk of other fields (it would have laid the storage out for every later one), and takes the honest ones."""
    replay = ReplayShard(mode, 100, layout=declared())
    assert set(replay.storage.data) == {"obs", "rewards"} and replay.storage.data["obs"].shape == (100, 3)
    weighted = mode != "uniform"
    per_transition = 16 + 12 + 4 + 4 * weighted
    assert replay.storage.max_batch(weighted) == (Limits().max_bytes - REPLY_HEADER_RESERVE) // per_transition
    hostile = [
        {**chunk(1.0), "obs": np.ones((4, 2, 4), np.float32)},  # one more observation dimension
        {**chunk(1.0), "extra": np.ones((4, 2), np.float32)},  # one more field
        {"obs": chunk(1.0)["obs"]},  # one fewer
        {**chunk(1.0), "rewards": np.ones((4, 2), np.float64)},  # another dtype
    ]
    for arrays in hostile:
        with pytest.raises(ValueError):
            replay.add(message(arrays))
    assert replay.storage.size == 0 and replay.stats()["added"] == 0
    replay.add(message(chunk(2.0)))
    assert replay.storage.size == 8 and np.all(replay.sample(4).transitions["obs"] == 2.0)


def test_a_declared_layout_that_the_capacity_cannot_hold_or_a_reply_carry_is_refused_at_start():
    with pytest.raises(ValueError, match="exceed 1000 bytes"):
        ReplayShard("uniform", 100, capacity_bytes=1000, layout=declared())
    from surreal.proto.wire import Field

    wide = {f"f{i}": Field(np.dtype(np.float32)) for i in range(10)}
    with pytest.raises(ValueError, match="exceeds 8 frames"):
        ReplayShard("uniform", 100, reply=Limits(max_frames=8), layout=wide)


def test_a_layout_travels_as_plain_data_and_anything_else_is_refused():
    from surreal.proto.wire import Field, fields_of, layout_of

    fields = {"obs": Field(np.dtype(np.float32), (3, 2)), "a/b": Field(np.dtype(np.int64), (), 0, 5)}
    assert fields_of(layout_of(fields)) == fields
    assert fields_of(json.loads(json.dumps(layout_of(fields)))) == fields
    for bad in (
        {},
        {"obs": {"dtype": "object", "shape": []}},
        {"obs": {"dtype": ">f4", "shape": []}},
        {"obs": {"dtype": "float32", "shape": [-1]}},
        {"obs": {"dtype": "float32", "shape": [1 << 20, 1 << 20]}},
        {"obs": {"dtype": "float32", "code": "import os"}},
        {"a//b": {"dtype": "float32"}},
        {"obs": {"dtype": "float32", "low": 0.5}},
    ):
        with pytest.raises(ValueError):
            fields_of(bad)


def test_a_shard_is_laid_out_from_its_config_without_torch_or_gymnasium(tmp_path):
    """The replay role reads the layout the launcher resolved from its config: no env, no algorithm, no torch."""
    from surreal.config import load_config, save_config
    from surreal.run.preflight import checked

    save_config(checked(load_config(["algo=ddpg", "env=Pendulum-v1"]))[0], tmp_path / "config.yaml")
    code = (
        "import sys\n"
        "from surreal.config import read_config\n"
        "from surreal.replay.shard import ReplayShard\n"
        f"shard = ReplayShard.of(read_config({str(tmp_path / 'config.yaml')!r}).replay, 0)\n"
        "assert shard.storage.data['obs'].shape == (100_000, 3), shard.storage.data.keys()\n"
        "assert 'torch' not in sys.modules and 'gymnasium' not in sys.modules, 'the replay image has neither'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
