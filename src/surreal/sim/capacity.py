"""The simulator as a capacity model: a scenario whose nodes spend measured costs per event, run until its learner
settles, read as throughput and as how busy each part of the system was.

`measure` runs a scenario without faults past a warm-up and over a window that starts and ends at a step of the
learner, so the window holds whole updates: env steps/s and updates/s are the learner's own counters over it. A
part's utilization is the share of the window it spent working (`Node.work_s`): the actors stepping their envs (the
fleet's mean), the learner updating, the busiest shard and the busiest ps replica, and, where links have a
bandwidth, the busiest link of the shards, the ps replicas and the learner (bytes over bandwidth). The bottleneck is
the busiest part. Every cost is per event, so a part's work grows with the flow through it: `capacity` is what it
would take fully busy, the throughput over its utilization (`capacities`).
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from surreal.sim.nodes import ActorNode, PsNode, ReplayNode
from surreal.sim.scenarios import Scenario, Sim
from surreal.sim.world import Node


@dataclass(frozen=True)
class Load:
    """What a window of a run carried: throughput, each part's utilization (0-1) and its work per env step
    (seconds of its nodes' time together, bytes for a link)."""

    env_steps_per_s: float
    updates_per_s: float
    utilization: dict[str, float]
    per_step: dict[str, float]
    window_s: float
    wall_s: float
    events: int

    @property
    def bottleneck(self) -> str:
        return max(self.utilization, key=self.utilization.__getitem__)

    @property
    def capacities(self) -> dict[str, float]:
        """Env steps/s each part would take fully busy."""
        return {k: math.inf if busy <= 0 else self.env_steps_per_s / busy for k, busy in self.utilization.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "env_steps_per_s": round(self.env_steps_per_s, 1),
            "updates_per_s": round(self.updates_per_s, 3),
            "bottleneck": self.bottleneck,
            "capacities": {k: round(v, 1) for k, v in self.capacities.items()},
            "utilization": {k: round(v, 3) for k, v in self.utilization.items()},
            "simulated_s": round(self.window_s, 1),
        }


@dataclass(frozen=True)
class Mark:
    """The counters at one learner step."""

    at: float
    env_steps: int
    updates: int
    work: dict[str, tuple[float, float, int, int]]  # node -> (work_s, egress work_s, bytes out, bytes in)


def _mark(sim: Sim) -> Mark:
    c = sim.learner.core.counters
    work = {
        name: (n.work_s, n.egress_work_s if isinstance(n, ReplayNode) else 0.0, n.bytes_out, n.bytes_in)
        for name, n in sim.net.nodes.items()
    }
    return Mark(sim.world.now, c.env_steps, c.updates, work)


def _part(node: Node) -> str | None:
    if isinstance(node, ActorNode):
        return "actors"
    if isinstance(node, ReplayNode):
        return "replay"
    if isinstance(node, PsNode):
        return "ps"
    return "learner" if node.name == "learner" else None


def measure(scenario: Scenario, seed: int = 0, warmup_s: float = 10.0, window_s: float = 20.0) -> Load:
    """Run `scenario` and read its load over a window of at least `window_s` virtual seconds and two updates,
    starting at the learner's first step after `warmup_s` (both stretched when updates are rarer: at most 20
    windows in all)."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="surreal-capacity-") as run_dir:
        sim = Sim(scenario, seed, Path(run_dir))
        marks: list[Mark] = []

        def progressed() -> None:
            """A mark at the learner's first step after the warm-up, and at its first step a window later."""
            now, updates = sim.world.now, sim.learner.core.counters.updates
            first = not marks and now >= warmup_s
            if first or (len(marks) == 1 and now >= marks[0].at + window_s and updates >= marks[0].updates + 2):
                marks.append(_mark(sim))

        sim.learner.progressed = progressed
        sim.world.run(warmup_s + 20 * window_s, lambda: len(marks) == 2, every=16)
        if len(marks) < 2:
            marks.append(_mark(sim))  # the learner stalled: the window ends where the run does
        sim.learner.release()
    return _load(sim, marks[0], marks[-1], time.perf_counter() - started)


def _load(sim: Sim, a: Mark, b: Mark, wall_s: float) -> Load:
    span = max(b.at - a.at, 1e-9)
    steps = b.env_steps - a.env_steps
    busy: dict[str, list[float]] = {}
    per_step: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        per_step[key] = per_step.get(key, 0.0) + value / max(steps, 1)

    for name, node in sim.net.nodes.items():
        part = _part(node)
        if part is None or name not in a.work:
            continue
        work, egress, out, into = (y - x for x, y in zip(a.work[name], b.work[name], strict=True))
        busy.setdefault(part, []).append(work / span)
        if part == "replay":
            add("replay ingest", work - egress)
            add("replay egress", egress)
        elif part == "ps":
            add("ps", work)
        if node.bandwidth and part != "actors":
            busy.setdefault(f"{part} network", []).append(max(out, into) / node.bandwidth / span)
            add(f"{part} network in", into)
            add(f"{part} network out", out)
    utilization = {
        part: sum(values) / len(values) if part == "actors" else max(values) for part, values in busy.items()
    }
    return Load(steps / span, (b.updates - a.updates) / span, utilization, per_step, span, wall_s, sim.world.events)
