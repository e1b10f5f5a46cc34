"""Replay semantics: FIFO order and drops, ring storage, uniform coverage, prioritized proportions and
importance weights, stale priority updates, and the sum tree against brute force."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surreal.replay import ChunkFifo, SumTree, TransitionStorage, make_replay


def chunk(value: float, T: int = 4, K: int = 2) -> dict[str, np.ndarray]:
    return {"obs": np.full((T, K, 3), value, np.float32), "rewards": np.full((T, K), value, np.float32)}


def test_fifo_serves_each_chunk_once_in_order_and_drops_oldest_when_full():
    fifo = ChunkFifo(capacity=40)
    for i in range(7):  # 8 transitions each: the 6th and 7th evict the two oldest
        fifo.add(chunk(i), {"i": i}, 8)
    assert fifo.dropped == 16 and fifo.dropped_chunks == 2 and fifo.size == 40
    taken = fifo.take(max_transitions=16)
    assert [item.meta["i"] for item in taken] == [2, 3]
    assert [item.meta["i"] for item in fifo.take(1)] == [4], "at least one chunk even if larger than asked"
    assert [item.meta["i"] for item in fifo.take(1000, max_frames=4)] == [5, 6]
    assert fifo.take(1000) == [] and fifo.served == 40 and fifo.size == 0


def test_fifo_respects_the_frame_budget_and_rejects_oversize_chunks():
    fifo = ChunkFifo(capacity=100)
    for i in range(5):
        fifo.add(chunk(i), {"i": i}, 8)
    assert len(fifo.take(1000, max_frames=5)) == 2  # two arrays per chunk
    fifo.add(chunk(9, T=60), {"i": 9}, 120)
    assert fifo.dropped == 120 and fifo.size == 24


def test_ring_storage_wraps_and_ids_detect_overwrites():
    storage = TransitionStorage(capacity=5)
    slots = storage.add({"x": np.arange(3.0)})
    assert list(slots) == [0, 1, 2]
    slots = storage.add({"x": np.arange(3.0, 7.0)})
    assert list(slots) == [3, 4, 0, 1] and storage.size == 5
    assert list(storage.data["x"]) == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert list(storage.ids) == [6, 7, 3, 4, 5]
    big = storage.add({"x": np.arange(100.0, 112.0)})  # more than capacity: the newest 5 are kept
    assert sorted(storage.data["x"]) == [107.0, 108.0, 109.0, 110.0, 111.0] and len(big) == 5
    with pytest.raises(ValueError):
        storage.add({"x": np.zeros(2, np.int32)})
    with pytest.raises(ValueError):
        storage.add({"y": np.zeros(2)})


def test_uniform_sampling_covers_every_slot_evenly():
    replay = make_replay("uniform", capacity=10, seed=0)
    replay.add_chunk({"x": np.arange(10.0).reshape(10, 1)}, {}, 10)
    counts = np.zeros(10)
    for _ in range(200):
        arrays, _ = replay.sample(500)
        counts += np.bincount(arrays["slots"], minlength=10)
    expected = counts.sum() / 10
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 27.9  # chi-square, 9 degrees of freedom, p = 0.001


def test_prioritized_sampling_is_proportional_to_priority_to_the_alpha():
    alpha = 0.7
    replay = make_replay("prioritized", capacity=8, alpha=alpha, beta=0.5, eps=1e-9, seed=1)
    replay.add_chunk({"x": np.arange(6.0).reshape(6, 1)}, {}, 6)
    priorities = np.array([1.0, 2.0, 4.0, 8.0, 0.5, 3.0])
    assert replay.update_priorities(np.arange(6), replay.storage.ids[:6].copy(), priorities) == 6
    draws = 200_000
    counts = np.zeros(6)
    for _ in range(draws // 1000):
        counts += np.bincount(replay.sample(1000)[0]["slots"], minlength=6)[:6]
    p = priorities**alpha / (priorities**alpha).sum()
    sigma = np.sqrt(draws * p * (1 - p))  # stratified sampling only lowers the variance
    assert np.all(np.abs(counts - draws * p) < 5 * sigma), (counts / draws, p)


def test_importance_weights_follow_the_formula():
    replay = make_replay("prioritized", capacity=4, alpha=1.0, beta=0.4, eps=0.0, seed=2)
    replay.add_chunk({"x": np.zeros((4, 1))}, {}, 4)
    priorities = np.array([1.0, 2.0, 3.0, 4.0])
    replay.update_priorities(np.arange(4), replay.storage.ids.copy(), priorities)
    arrays, _ = replay.sample(64)
    P = priorities / priorities.sum()
    expected = (4 * P) ** -0.4 / ((4 * P.min()) ** -0.4)
    np.testing.assert_allclose(arrays["weights"], expected[arrays["slots"]], rtol=1e-6)


def test_priority_updates_for_overwritten_slots_are_ignored():
    replay = make_replay("prioritized", capacity=3, seed=0)
    replay.add_chunk({"x": np.zeros((3, 1))}, {}, 3)
    stale_ids = replay.storage.ids.copy()
    replay.add_chunk({"x": np.ones((2, 1))}, {}, 2)  # overwrites slots 0 and 1
    applied = replay.update_priorities(np.arange(3), stale_ids, np.array([50.0, 50.0, 50.0]))
    assert applied == 1
    with pytest.raises(ValueError):
        replay.update_priorities(np.arange(1), stale_ids[:1], np.array([np.nan]))


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 40),
    updates=st.lists(st.tuples(st.integers(0, 39), st.floats(0.0, 100.0)), min_size=1, max_size=60),
)
def test_sum_tree_matches_brute_force(capacity, updates):
    tree = SumTree(capacity)
    reference = np.zeros(capacity)
    for slot, priority in updates:
        slot %= capacity
        tree.update(np.array([slot]), np.array([priority]))
        reference[slot] = priority
    assert tree.total == pytest.approx(reference.sum())
    if reference.sum() > 0:
        assert tree.min == pytest.approx(reference[[s % capacity for s, _ in updates]].min())
        values = np.linspace(0, reference.sum(), 17, endpoint=False)
        expected = np.searchsorted(np.cumsum(reference), values, side="right")
        np.testing.assert_array_equal(tree.find_prefix_sum(values), expected)


def test_replay_package_does_not_import_torch():
    code = "import sys, surreal.replay; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
