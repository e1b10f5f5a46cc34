"""RunningMeanStd: exact parallel merges (statistics gathered in pieces equal the whole), normalize, state."""

from __future__ import annotations

import numpy as np
import pytest

from surreal.algos.normalizer import RunningMeanStd


@pytest.fixture
def data() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((1000, 4)) * 3 + 1


def test_update_tracks_the_mean_and_variance_of_everything_seen(data):
    rms = RunningMeanStd((4,))
    rms.update(data)
    # The 1e-4 prior count (mean 0, var 1) is all that separates it from numpy's population statistics.
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-6)
    assert rms.count == pytest.approx(1000, abs=1e-3)


def test_updates_in_pieces_equal_one_update_of_the_whole(data):
    pieces, whole = RunningMeanStd((4,)), RunningMeanStd((4,))
    for part in np.array_split(data, 7):
        pieces.update(part)
    whole.update(data)
    np.testing.assert_allclose(pieces.mean, whole.mean, rtol=1e-12)
    np.testing.assert_allclose(pieces.var, whole.var, rtol=1e-12)
    assert pieces.count == pytest.approx(whole.count)


def test_merge_of_batch_statistics_is_order_independent(data):
    forward, backward = RunningMeanStd((4,)), RunningMeanStd((4,))
    parts = np.array_split(data, 5)
    for part in parts:
        forward.merge(len(part), part.mean(axis=0), part.var(axis=0))
    for part in reversed(parts):
        backward.merge(len(part), part.mean(axis=0), part.var(axis=0))
    np.testing.assert_allclose(forward.mean, backward.mean, rtol=1e-12)
    np.testing.assert_allclose(forward.var, backward.var, rtol=1e-12)


def test_empty_batch_changes_nothing():
    rms = RunningMeanStd((3,))
    rms.update(np.ones((4, 3)))
    before = rms.state()
    rms.update(np.empty((0, 3)))
    for key, value in rms.state().items():
        np.testing.assert_array_equal(value, before[key])


def test_normalize_standardizes_clips_and_returns_float32(data):
    rms = RunningMeanStd((4,))
    rms.update(data)
    normalized = rms.normalize(data, clip=10.0)
    assert normalized.dtype == np.float32
    np.testing.assert_allclose(normalized.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(normalized.std(axis=0), 1.0, atol=1e-5)
    far = rms.normalize(rms.mean + 1e6, clip=5.0)
    np.testing.assert_array_equal(far, np.full(4, 5.0, np.float32))


def test_scalar_shape_for_return_statistics():
    rms = RunningMeanStd(())
    rms.update(np.array([1.0, 2.0, 3.0, 4.0]))
    assert rms.mean.shape == () and rms.var == pytest.approx(1.25, rel=1e-3)


def test_state_load_round_trip(data):
    rms, copy = RunningMeanStd((4,)), RunningMeanStd((4,))
    rms.update(data)
    copy.load(rms.state())
    np.testing.assert_array_equal(copy.normalize(data, 10.0), rms.normalize(data, 10.0))
    rms.update(data[:10])  # the loaded copy owns its arrays
    assert not np.array_equal(copy.mean, rms.mean)
