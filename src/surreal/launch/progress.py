"""Live progress of a run, read from the learner's metrics.jsonl as it grows.

metrics.jsonl holds no clock times (two deterministic runs write identical files), so rates are computed
here from when rows arrive. On a terminal the display is a rich live table redrawn by the launcher's
own loop (no refresh thread: the supervisor forks children with a `preexec_fn`); elsewhere (CI, a log
file) a plain line every `PLAIN_EVERY_S`.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from surreal.metricsfile import MetricsTail

PLAIN_EVERY_S = 10.0
RATE_WINDOW_S = 30.0  # rates are averaged over the rows of the last half minute
MIN_RATE_SPAN_S = 1.0  # rows that arrived closer together than this give no rate yet


class Rates:
    """env steps/s and updates/s from (arrival time, env_steps, updates) samples over a sliding window."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int, int]] = deque()

    def add(self, now: float, env_steps: int, updates: int) -> None:
        if self._samples and env_steps < self._samples[-1][1]:
            self._samples.clear()  # the learner resumed from an earlier checkpoint
        self._samples.append((now, env_steps, updates))
        while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()

    def per_second(self) -> tuple[float, float] | None:
        if len(self._samples) < 2:
            return None
        (t0, s0, u0), (t1, s1, u1) = self._samples[0], self._samples[-1]
        if t1 - t0 < MIN_RATE_SPAN_S:
            return None
        return (s1 - s0) / (t1 - t0), (u1 - u0) / (t1 - t0)


def format_duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class ProgressView:
    """What the launcher shows while a run goes: call `update` from its loop, use as a context manager."""

    def __init__(self, metrics_path: Path, total_env_steps: int, live: bool, resumed_at: int | None = None) -> None:
        self.total = total_env_steps
        self.resumed_at = resumed_at  # a resumed run's env steps at its checkpoint: shown beside its progress
        self._tail = MetricsTail(metrics_path)
        self._rates = Rates()
        self.last: dict[str, Any] = {}
        self._started = time.monotonic()
        self._next_plain = self._started + PLAIN_EVERY_S
        self._live = Live(console=Console(), auto_refresh=False) if live and sys.stdout.isatty() else None

    def __enter__(self) -> ProgressView:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def update(self, restarts: dict[str, int]) -> None:
        now = time.monotonic()
        rows = self._tail.read()
        if rows:
            self.last = rows[-1]
            self._rates.add(now, int(self.last.get("env_steps", 0)), int(self.last.get("updates", 0)))
        fields = self._fields(restarts, now)
        if self._live is not None:
            self._live.update(_table(fields), refresh=True)
        elif now >= self._next_plain:
            self._next_plain = now + PLAIN_EVERY_S
            print("[surreal] " + "  ".join(f"{key} {value}" for key, value in fields.items()), flush=True)

    def _fields(self, restarts: dict[str, int], now: float) -> dict[str, str]:
        # A resumed run's progress starts at its checkpoint, though rows written after it may still be read
        # until the learner cuts metrics.jsonl back to it.
        steps = max(int(self.last.get("env_steps", 0)), self.resumed_at or 0)
        rates = self._rates.per_second()
        ret = self.last.get("train_return_mean")
        lag = self.last.get("version_lag_mean")
        restarted = {name: n for name, n in restarts.items() if n}
        resumed = "" if self.resumed_at is None else f", resumed at {self.resumed_at:,}"
        return {
            "env steps": f"{steps:,}/{self.total:,} ({100 * steps / max(self.total, 1):.0f}%{resumed})",
            "steps/s": "-" if rates is None else f"{rates[0]:,.0f}",
            "return": "-" if ret is None else f"{ret:.1f}",
            "updates/s": "-" if rates is None else f"{rates[1]:.2f}",
            "lag": "-" if lag is None else f"{lag:.2f}",
            "restarts": ", ".join(f"{name} x{n}" for name, n in restarted.items()) or "none",
            "elapsed": format_duration(now - self._started),
        }


def _table(fields: dict[str, str]) -> Table:
    """One row of numbers; restarts, which can name several processes, go in the caption (fits 80 columns)."""
    numbers = {key: value for key, value in fields.items() if key != "restarts"}
    table = Table(
        title="surreal run",
        title_justify="left",
        caption=f"restarts: {fields['restarts']}",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in numbers:
        table.add_column(column, justify="right", no_wrap=True)
    table.add_row(*numbers.values())
    return table
