"""Live progress of a run, read from the learner's metrics.jsonl as it grows.

Rates are computed here from when rows arrive (metrics.jsonl itself holds no clock times, so two
deterministic runs write identical files). On a terminal the display is a rich live table; elsewhere
(CI, a log file) a plain line every `PLAIN_EVERY_S`.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

PLAIN_EVERY_S = 10.0
RATE_WINDOW = 10  # rows


class ProgressView:
    def __init__(self, metrics_path: Path, total_env_steps: int, live: bool) -> None:
        self.path = metrics_path
        self.total = total_env_steps
        self.offset = 0
        self.partial = ""
        self.last: dict[str, Any] = {}
        self.window: deque[tuple[float, int, int]] = deque(maxlen=RATE_WINDOW)
        self.started = time.monotonic()
        self.console = Console(stderr=False)
        self.live: Live | None = None
        if live and sys.stdout.isatty():
            self.live = Live(self._table({}), console=self.console, refresh_per_second=2)
            self.live.start()
        self._printed_at = 0.0

    def _read_new_rows(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as f:
            f.seek(self.offset)
            data = f.read()
            self.offset = f.tell()
        lines = (self.partial + data).split("\n")
        self.partial = lines.pop()  # an unfinished last line waits for the rest
        now = time.monotonic()
        for line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            self.last = row
            self.window.append((now, int(row.get("env_steps", 0)), int(row.get("updates", 0))))

    def rates(self) -> tuple[float, float]:
        """(env steps/s, updates/s) over the last rows."""
        if len(self.window) < 2:
            return 0.0, 0.0
        (t0, s0, u0), (t1, s1, u1) = self.window[0], self.window[-1]
        dt = max(t1 - t0, 1e-9)
        return (s1 - s0) / dt, (u1 - u0) / dt

    def _table(self, restarts: dict[str, int]) -> Table:
        steps_per_s, updates_per_s = self.rates()
        row = self.last
        table = Table(show_header=True, header_style="bold", title="surreal run")
        for column in ("env steps", "steps/s", "train return", "updates/s", "version lag", "restarts", "elapsed"):
            table.add_column(column, justify="right")
        ret = row.get("train_return_mean")
        table.add_row(
            f"{row.get('env_steps', 0):,} / {self.total:,}",
            f"{steps_per_s:,.0f}",
            "-" if ret is None else f"{ret:.1f}",
            f"{updates_per_s:.2f}",
            f"{row.get('version_lag_mean', 0.0):.2f}",
            str(sum(restarts.values())),
            f"{time.monotonic() - self.started:.0f} s",
        )
        return table

    def update(self, restarts: dict[str, int]) -> None:
        self._read_new_rows()
        if self.live is not None:
            self.live.update(self._table(restarts))
            return
        now = time.monotonic()
        if now - self._printed_at >= PLAIN_EVERY_S:
            self._printed_at = now
            steps_per_s, updates_per_s = self.rates()
            ret = self.last.get("train_return_mean")
            print(
                f"[surreal] env steps {self.last.get('env_steps', 0):,}/{self.total:,}  {steps_per_s:,.0f} steps/s  "
                f"return {'-' if ret is None else f'{ret:.1f}'}  {updates_per_s:.2f} updates/s  "
                f"lag {self.last.get('version_lag_mean', 0.0):.2f}  restarts {sum(restarts.values())}  "
                f"{now - self.started:.0f} s",
                flush=True,
            )

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
