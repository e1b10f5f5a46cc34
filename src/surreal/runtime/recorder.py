"""Where a learner's progress goes: `metrics.jsonl` (one row per record, no clock times, so two deterministic
runs write identical files), TensorBoard, and the learner's Prometheus gauges."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from surreal.fileio import atomic_write_text
from surreal.metrics import RoleMetrics
from surreal.metricsfile import METRICS_FILE, read_metrics


def truncate_metrics(path: Path, updates: int) -> None:
    """Keep the rows written up to `updates` (a learner resumed from that checkpoint continues from there)."""
    kept = [row for row in read_metrics(path) if isinstance(row.get("updates"), int) and row["updates"] <= updates]
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


class Recorder:
    def __init__(self, run_dir: Path, metrics: RoleMetrics, purge_from: int | None = None) -> None:
        """`purge_from`: for a resumed learner, the first env step after its checkpoint. TensorBoard then hides
        what earlier event files hold from that step on (`purge_step`), as metrics.jsonl is cut back to the
        checkpoint."""
        from torch.utils.tensorboard import SummaryWriter  # torch: the learner's dependency, not the package's

        self.file = open(run_dir / METRICS_FILE, "a", encoding="utf-8")  # noqa: SIM115
        self.tensorboard = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge_from)
        m = metrics
        self.m_env_steps = m.gauge("learner_env_steps", "environment steps consumed")
        self.m_updates = m.gauge("learner_updates", "updates done")
        self.m_version = m.gauge("learner_param_version", "latest published parameter version")
        self.m_stale = m.gauge("learner_stale_dropped", "chunks dropped for exceeding max_staleness")
        self.m_queue = m.gauge("learner_queued_transitions", "transitions received, waiting for an update")
        self.m_return = m.gauge("learner_train_return_mean", "mean return of recent training episodes")
        self.m_stat = m.gauge("learner_stat", "last update's statistics", ["name"])
        self.m_update_s = m.gauge("learner_update_seconds", "wall time of the last update")

    def counters(self, env_steps: int, updates: int, stale_dropped: int) -> None:
        """The gauges the chart's `helm test` reads (also right after a resume, before any update)."""
        self.m_env_steps.set(env_steps)
        self.m_updates.set(updates)
        self.m_stale.set(stale_dropped)

    def row(self, row: dict[str, Any], stats: dict[str, float], update_s: float) -> None:
        """One metrics.jsonl row: the counters in `row`, then the update's statistics."""
        full = {**row, **{k: float(v) for k, v in stats.items()}}
        self.file.write(json.dumps(full) + "\n")
        self.file.flush()
        env_steps = row["env_steps"]
        self.counters(env_steps, row["updates"], row["stale_dropped"])
        self.m_update_s.set(update_s)
        if row["train_return_mean"] is not None:
            self.m_return.set(row["train_return_mean"])
            self.tensorboard.add_scalar("train/return_mean", row["train_return_mean"], env_steps)
        if "version_lag_mean" in row:
            self.tensorboard.add_scalar("learner/version_lag_mean", row["version_lag_mean"], env_steps)
        for name, value in stats.items():
            self.m_stat.labels(name=name).set(float(value))
            self.tensorboard.add_scalar(f"learner/{name}", float(value), env_steps)

    def evaluation(self, return_mean: float, env_steps: int) -> None:
        self.tensorboard.add_scalar("eval/return_mean", return_mean, env_steps)

    def close(self) -> None:
        self.file.close()
        self.tensorboard.close()
