"""Running `surreal run` from a benchmark and watching its metrics.jsonl with arrival times."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from surreal.metricsfile import MetricsTail

RESULTS = Path(__file__).resolve().parent / "results"

T = TypeVar("T")


def machine() -> str:
    """The `machine` a result names: host, architecture and core count."""
    return f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus"


def machine_at_end() -> str:
    """The `machine` of a microbenchmark's result: architecture, core count and the load it ran under (its figures
    move with what else the box runs)."""
    return f"{platform.machine()} {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f} at the end"


def in_spawned_process(work: Callable[..., T], *args: Any, timeout_s: float) -> T:
    """`work(*args)` in a fresh spawned process (pinning, thread counts and imports stay there), and its result; a
    failure there is a one-line RuntimeError here rather than a wait until `timeout_s`. `work` is a module-level
    function and its arguments pickle."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_put_outcome, args=(work, args, out))
    proc.start()
    got = out.get(timeout=timeout_s)
    proc.join(timeout=60)
    if isinstance(got, RuntimeError):
        raise got
    return got


def _put_outcome(work: Callable[..., Any], args: tuple[Any, ...], out: Any) -> None:
    try:
        out.put(work(*args))
    except Exception as exc:  # the parent waits on the queue: say what failed
        out.put(RuntimeError(f"{work.__name__} failed: {type(exc).__name__}: {exc}"))


def emit(result: dict, *outs: Path | None) -> None:
    """A benchmark's ending: its result as one JSON line, printed last (what scripts read) and written to each of
    `outs` that is given (bench/gpu.sh collects them there)."""
    line = json.dumps(result)
    for out in filter(None, outs):
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(line + "\n")
    print(line)


class WatchedRun:
    """A `surreal run` subprocess; `rows` holds (arrival time, metrics row) of the rows updates wrote, as the learner
    writes them (the warm-up's rows, before the first update, are not counted: start-up is skipped in update rows)."""

    def __init__(self, name: str, overrides: list[str], runs_root: Path, module: str = "surreal") -> None:
        """`module`: what `python -m` runs with `run` and the overrides (bench.plaintext_run: it without CURVE)."""
        self.run_dir = runs_root / name
        runs_root.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SURREAL_RUNS_ROOT": str(runs_root), "PYTHONUNBUFFERED": "1"}
        self.console = open(runs_root / f"{name}.console.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "run", f"name={name}", *overrides, "--no-progress"],
            env=env,
            stdout=self.console,
            stderr=subprocess.STDOUT,
        )
        self.rows: list[tuple[float, dict]] = []
        self._tail = MetricsTail(self.run_dir / "metrics.jsonl")

    def poll(self) -> None:
        rows = [row for row in self._tail.read() if row.get("updates")]
        now = time.monotonic()
        self.rows.extend((now, row) for row in rows)

    def steady_rate(self, skip_rows: int) -> float:
        """Env steps per second between row `skip_rows` (after start-up) and the last row, on the learner's clock
        (each row's `time`): rows read in one poll share an arrival time, and a start-up that compiles for most of
        a short window can leave every steady row in one read. NaN where the window holds no measurable interval."""
        if len(self.rows) < skip_rows + 2:
            return float("nan")
        r0, r1 = self.rows[skip_rows][1], self.rows[-1][1]
        seconds = r1["time"] - r0["time"]
        return (r1["env_steps"] - r0["env_steps"]) / seconds if seconds > 0 else float("nan")

    def run_for(self, seconds: float) -> None:
        """Watch for `seconds`, then stop the run as Ctrl-C would."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.poll()
            time.sleep(0.1)
        self.stop()

    def wait(self, timeout_s: float) -> dict:
        """Watch until the run ends (or `timeout_s` passes: then stop it as Ctrl-C would); its summary.json."""
        self.run_for(timeout_s)
        return json.loads((self.run_dir / "summary.json").read_text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.poll()
        self.console.close()


def kill_whole_run(launcher_pid: int) -> list:
    """SIGKILL a `surreal run` launcher and every process under it at once, as a power cut would: the launcher is
    frozen first (SIGSTOP), so it can neither restart a role nor have its roles save their state (their
    PR_SET_PDEATHSIG would SIGTERM them). Returns the processes killed, all of them gone."""
    import psutil

    launcher = psutil.Process(launcher_pid)
    launcher.suspend()
    roles = launcher.children(recursive=True)
    for process in roles:
        process.kill()
    launcher.kill()
    _, alive = psutil.wait_procs([*roles, launcher], timeout=30)
    if alive:
        raise RuntimeError(f"still alive after SIGKILL: {alive}")
    return roles
