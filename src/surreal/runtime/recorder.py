"""Where a learner's progress goes: `metrics.jsonl` (one row per record, no clock times, so two deterministic
runs write identical files), TensorBoard, and the learner's Prometheus gauges.

Every field and tag is listed in docs/metrics.md (tests/test_metrics_reference.py fails on one it does not list).
TensorBoard's x axis is env steps throughout. The learner owns the event files in `<run>/tensorboard/`; the
evaluator writes its curve to `<run>/tensorboard/evaluator/` (roles/evaluator.py), so no two processes ever write
one event file.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from surreal.fileio import atomic_write_text
from surreal.metrics import RoleMetrics
from surreal.metricsfile import METRICS_FILE, read_metrics


def truncate_metrics(path: Path, up_to: dict[str, int]) -> None:
    """Keep the rows whose every field in `up_to` is at most its value there, written at once: a learner resumed
    from a checkpoint continues metrics.jsonl from its updates and env steps, the evaluator its evals.jsonl from the
    env steps the learner resumed at."""
    kept = [
        row
        for row in read_metrics(path)
        if all(isinstance(row.get(field), int) and row[field] <= most for field, most in up_to.items())
    ]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in kept))


class WallTime:
    """Where the learner's wall time goes: `update` (the algorithm's update), `wait` (blocked on the next
    batch: the actors or the replay are the limit) and `io` (publishing, checkpoints, metrics). In all on
    /metrics (`learner_seconds_total{phase}`), and per metrics row since the previous one."""

    PHASES = ("update", "wait", "io")

    def __init__(self, metrics: RoleMetrics) -> None:
        self.m_seconds = metrics.counter("learner_seconds_total", "learner wall time by phase", ["phase"])
        self.since_row = dict.fromkeys(self.PHASES, 0.0)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - started
            self.since_row[name] += seconds
            self.m_seconds.labels(phase=name).inc(seconds)

    def take(self) -> dict[str, float]:
        """`time_<phase>_s` since the last call, for a metrics row."""
        row = {f"time_{name}_s": round(seconds, 6) for name, seconds in self.since_row.items()}
        self.since_row = dict.fromkeys(self.PHASES, 0.0)
        return row


# metrics.jsonl row fields -> TensorBoard tags (when the row has them: wall times only outside deterministic runs,
# success rates only for envs that report `is_success`).
ROW_TAGS = {
    "episodes": "train/episodes",
    "updates": "learner/updates",
    "train_return_mean": "train/return_mean",
    "train_episode_length_mean": "train/episode_length_mean",
    "train_success_rate": "train/success_rate",
    "time_update_s": "time/update_s",
    "time_wait_s": "time/wait_s",
    "time_io_s": "time/io_s",
    "version_lag_mean": "learner/version_lag_mean",
    "live_actors": "learner/live_actors",
    "stale_dropped": "learner/stale_dropped",
}
TENSORBOARD_DIR = "tensorboard"
SPS_TAG = "charts/SPS"  # env steps per second (CleanRL's and SB3 users' name for it): `SpsClock`
SPS_MIN_INTERVAL_S = 1.0  # the shortest wall-clock interval a `charts/SPS` point covers


class SpsClock:
    """`charts/SPS` from the rows' own clock (`time`, so metrics.jsonl gives the same): each point is the env steps
    over the wall-clock interval since the previous point, at least `SPS_MIN_INTERVAL_S` long and ending at a row
    whose env steps advanced. Two rows with the same env steps (an off-policy learner catching up on samples it
    already holds writes rows with no new env step) or a few rows within milliseconds (a reply's warm-up rows) are
    no interval of their own: they extend the next one, so no point is 0 while the actors step, and none is a
    spike of a few milliseconds."""

    def __init__(self) -> None:
        self.since: tuple[float, int] | None = None  # (time, env steps) where the next point's interval starts
        self.pending: tuple[float, int] | None = None  # the last row not yet covered by a point

    def row(self, time_s: float, env_steps: int) -> tuple[int, float] | None:
        """A row's time and env steps; the point (env steps, rate) it completes, if any."""
        if self.since is None:
            self.since = (time_s, env_steps)
            return None
        self.pending = (time_s, env_steps)
        if time_s - self.since[0] >= SPS_MIN_INTERVAL_S:
            return self._point()
        return None

    def last(self) -> tuple[int, float] | None:
        """At the end: the point of the rows left since the last one, over whatever interval they span."""
        if self.since is None or self.pending is None or self.pending[0] <= self.since[0]:
            return None
        return self._point()

    def _point(self) -> tuple[int, float] | None:
        assert self.since is not None and self.pending is not None
        (t0, s0), (t1, s1) = self.since, self.pending
        if s1 <= s0:
            return None  # no env step in between: the interval goes on
        self.since, self.pending = self.pending, None
        return s1, (s1 - s0) / (t1 - t0)


class Recorder:
    def __init__(self, run_dir: Path, metrics: RoleMetrics, purge_step: int | None = None) -> None:
        """`purge_step`: a resumed learner's env steps; TensorBoard hides the earlier writers' points from there on."""
        from torch.utils.tensorboard import SummaryWriter  # torch: the learner's dependency, not the package's

        self.file = open(run_dir / METRICS_FILE, "a", encoding="utf-8")  # noqa: SIM115
        self.tensorboard = SummaryWriter(str(run_dir / TENSORBOARD_DIR), purge_step=purge_step)
        self.sps = SpsClock()
        m = metrics
        self.m_env_steps = m.gauge("learner_env_steps", "environment steps consumed")
        self.m_updates = m.gauge("learner_updates", "updates done")
        self.m_version = m.gauge("learner_param_version", "latest published parameter version")
        self.m_stale = m.gauge("learner_stale_dropped", "chunks dropped for exceeding max_staleness")
        self.m_queue = m.gauge("learner_queued_transitions", "transitions received, waiting for an update")
        self.m_return = m.gauge("learner_train_return_mean", "mean return of recent training episodes")
        self.m_stat = m.gauge("learner_stat", "last update's statistics", ["name"])
        self.m_update_s = m.gauge("learner_update_seconds", "wall time of the last update")
        self.m_skipped = m.counter("learner_updates_skipped_total", "updates undone for going non-finite")
        self.skipped = 0

    def skipped_updates(self, skipped: int, updates: int, log: logging.Logger) -> None:
        """Count (and log, now and then) `skipped` updates the algorithm undid for going non-finite, at `updates`."""
        for _ in range(skipped):
            self.m_skipped.inc()
            self.skipped += 1
            if self.skipped == 1 or self.skipped % 100 == 0:
                log.warning("update %d went non-finite and was skipped (%d so far)", updates, self.skipped)

    def counters(self, env_steps: int, updates: int, stale_dropped: int) -> None:
        """The gauges the chart's `helm test` reads (also right after a resume, before any update)."""
        self.m_env_steps.set(env_steps)
        self.m_updates.set(updates)
        self.m_stale.set(stale_dropped)

    def row(self, row: dict[str, Any], stats: dict[str, float], update_s: float | None) -> None:
        """One metrics.jsonl row: the counters in `row`, then the update's statistics (a warm-up row has none, and
        no `update_s`)."""
        full = {**row, **{k: float(v) for k, v in stats.items()}}
        self.file.write(json.dumps(full) + "\n")
        self.file.flush()
        env_steps = row["env_steps"]
        self.counters(env_steps, row["updates"], row["stale_dropped"])
        if update_s is not None:
            self.m_update_s.set(update_s)
        if row["train_return_mean"] is not None:
            self.m_return.set(row["train_return_mean"])
        for field, tag in ROW_TAGS.items():
            if row.get(field) is not None:
                self.tensorboard.add_scalar(tag, float(row[field]), env_steps)
        if "time" in row and (point := self.sps.row(row["time"], env_steps)) is not None:
            self.tensorboard.add_scalar(SPS_TAG, point[1], point[0])
        for name, value in stats.items():
            self.m_stat.labels(name=name).set(float(value))
            self.tensorboard.add_scalar(f"learner/{name}", float(value), env_steps)

    def evaluation(self, summary: dict[str, Any], env_steps: int) -> None:
        """The final evaluation (eval.json's summary) at the env steps it was made at."""
        write_evaluation(self.tensorboard, summary, env_steps)
        self.tensorboard.flush()

    def close(self) -> None:
        if (point := self.sps.last()) is not None:
            self.tensorboard.add_scalar(SPS_TAG, point[1], point[0])
        self.file.close()
        self.tensorboard.close()


def write_evaluation(writer: Any, summary: dict[str, Any], env_steps: int) -> None:
    """An evaluation's `eval/*` tags (the learner's final one and each of the evaluator's): return mean and std,
    success rate where the env reports success, and how long it took where that was measured."""
    for field, tag in (
        ("eval_return_mean", "eval/return_mean"),
        ("eval_return_std", "eval/return_std"),
        ("eval_success_rate", "eval/success_rate"),
        ("eval_s", "eval/seconds"),
    ):
        if summary.get(field) is not None:
            writer.add_scalar(tag, float(summary[field]), env_steps)
