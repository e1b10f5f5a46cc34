"""bench.throughput's reading of the learner's rows: which side bound a system point. Synthetic rows, exact verdicts."""

from __future__ import annotations

import math

import pytest
from bench._runs import WatchedRun
from bench.throughput import learner_phases


def test_the_learner_phases_say_which_side_bound_the_point() -> None:
    rows = [{"time_update_s": 0.3, "time_wait_s": 0.6, "time_io_s": 0.1}, {"time_update_s": 0.5, "time_wait_s": 0.4}]
    phases = learner_phases(rows)
    assert phases["learner_update_s"] == pytest.approx(0.4)  # (0.3 + 0.5) / 2 updates
    assert phases["learner_wait_share"] == pytest.approx(1.0 / 1.9)  # waited 1.0 of 1.9 s: the actors bound it


def test_no_steady_rows_is_no_figure_rather_than_zero() -> None:
    phases = learner_phases([])
    assert math.isnan(phases["learner_update_s"]) and math.isnan(phases["learner_wait_share"])


def watched(rows: list[tuple[float, dict]]) -> WatchedRun:
    run = WatchedRun.__new__(WatchedRun)  # no subprocess: only the rows a watcher would have read
    run.rows = rows
    return run


def test_the_steady_rate_is_timed_by_the_learner_rows_not_their_arrival() -> None:
    rows = [(5.0, {"env_steps": 2048 * i, "time": 100.0 + 0.5 * i}) for i in range(6)]  # all arrived in one read
    assert watched(rows).steady_rate(skip_rows=3) == pytest.approx(2 * 2048 / 1.0)  # rows 3 -> 5: 4,096 in 1 s
    assert math.isnan(watched(rows[:4]).steady_rate(skip_rows=3))  # one steady row: no interval
    same_time = [(5.0, {"env_steps": 2048 * i, "time": 100.0}) for i in range(5)]
    assert math.isnan(watched(same_time).steady_rate(skip_rows=3))  # rather than a division by zero
