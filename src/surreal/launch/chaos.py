"""Rehearsed preemption for local runs: `chaos.*` (config/schema.py `ChaosConfig`) kills actors on a schedule.

Two schedules, alone or together:

- every `kill_every_s` seconds one running actor, drawn with `chaos.seed`, gets SIGKILL (a preemption whose
  notice was missed: the hard case). With `restart` it is started again at once, as a StatefulSet would;
  without, it stays down until the run ends. The last running actor is never killed: the run could not go on.
- from `window_start_s` for `window_s` seconds only `alive` actors run; the others are killed and held down,
  then all started again when the window closes.

Killed actors do not count against the supervisor's restart limit. Every event is a line of
`<run>/chaos.jsonl` (unix time, seconds since start, action, actor), so a benchmark or a test can line the
learner's `metrics.jsonl` up with what happened. In a cluster the chart's chaos Job runs the same schedule.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Protocol

from surreal.config import ChaosConfig
from surreal.metricsfile import read_metrics

CHAOS_FILE = "chaos.jsonl"


class Fleet(Protocol):
    """What chaos needs of the supervisor."""

    def running(self, role: str) -> list[str]: ...

    def kill(self, name: str, hold: bool = False) -> bool: ...

    def release(self, name: str) -> None: ...


class Chaos:
    def __init__(self, cfg: ChaosConfig, run_dir: Path) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.next_kill_s = cfg.kill_every_s if cfg.kill_every_s > 0 else float("inf")
        self.window = cfg.alive is not None and cfg.window_s > 0
        self.held_by_window: list[str] = []
        self.log_path = run_dir / CHAOS_FILE

    def tick(self, fleet: Fleet, elapsed_s: float) -> None:
        """Carry out whatever is due `elapsed_s` seconds into the run."""
        cfg = self.cfg
        if self.window and elapsed_s >= cfg.window_start_s:
            if elapsed_s < cfg.window_start_s + cfg.window_s:
                assert cfg.alive is not None
                running = fleet.running("actor")
                for name in self.rng.sample(sorted(running), max(0, len(running) - cfg.alive)):
                    if fleet.kill(name, hold=True):
                        self.held_by_window.append(name)
                        self._log(elapsed_s, "hold", name)
            else:
                for name in self.held_by_window:
                    fleet.release(name)
                    self._log(elapsed_s, "release", name)
                self.held_by_window.clear()
                self.window = False
        while elapsed_s >= self.next_kill_s:
            self.next_kill_s += cfg.kill_every_s
            running = sorted(fleet.running("actor"))
            if len(running) <= 1:
                continue  # never the last one
            name = self.rng.choice(running)
            if fleet.kill(name, hold=not cfg.restart):
                self._log(elapsed_s, "kill" if cfg.restart else "kill_for_good", name)

    def _log(self, elapsed_s: float, action: str, actor: str) -> None:
        event = {"time": round(time.time(), 3), "elapsed_s": round(elapsed_s, 3), "action": action, "actor": actor}
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")


def read_chaos(run_dir: Path) -> list[dict[str, Any]]:
    """The events of a run's chaos.jsonl (none if it has none), read as metrics.jsonl is."""
    return read_metrics(run_dir / CHAOS_FILE)
