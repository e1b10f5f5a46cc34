"""bench.throughput's reading of the learner's rows: which side bound a system point. Synthetic rows, exact verdicts."""

from __future__ import annotations

import math

import pytest
from bench.throughput import learner_phases


def test_the_learner_phases_say_which_side_bound_the_point() -> None:
    rows = [{"time_update_s": 0.3, "time_wait_s": 0.6, "time_io_s": 0.1}, {"time_update_s": 0.5, "time_wait_s": 0.4}]
    phases = learner_phases(rows)
    assert phases["learner_update_s"] == pytest.approx(0.4)  # (0.3 + 0.5) / 2 updates
    assert phases["learner_wait_share"] == pytest.approx(1.0 / 1.9)  # waited 1.0 of 1.9 s: the actors bound it


def test_no_steady_rows_is_no_figure_rather_than_zero() -> None:
    phases = learner_phases([])
    assert math.isnan(phases["learner_update_s"]) and math.isnan(phases["learner_wait_share"])
