"""Supervising a set of role processes: restart with backoff, show failures, leave no orphans.

Each child runs in its own process group (the terminal's Ctrl-C reaches only the launcher, which then
stops the children in order) and, on Linux, with PR_SET_PDEATHSIG so it is killed even if the launcher
itself is `kill -9`ed. Its stdout and stderr go to a log file; when it fails, the tail of that log is
printed to the console so the error is seen without opening the file.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0
LOG_TAIL_LINES = 20


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM when the launcher dies, and a process group of its own."""
    os.setpgrp()
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class ProcessSpec:
    name: str
    argv: list[str]
    env: dict[str, str]
    restart: str = "on-failure"  # always | on-failure | never
    max_restarts: int = 5
    resume_argv: list[str] | None = None  # used for restarts (the learner's --resume)


@dataclass
class Child:
    spec: ProcessSpec
    log_path: Path
    proc: subprocess.Popen | None = None
    restarts: int = 0
    next_start: float = 0.0
    backoff_s: float = BACKOFF_START_S
    exit_code: int | None = None
    finished: bool = False  # exited 0 and is not to be restarted


@dataclass
class Supervisor:
    log_dir: Path
    cwd: Path | None = None
    report: Callable[[str], None] = field(default=lambda text: print(text, file=sys.stderr, flush=True))
    children: dict[str, Child] = field(default_factory=dict)
    failed: str | None = None  # name of a child that exhausted its restarts

    def start(self, spec: ProcessSpec) -> Child:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        child = Child(spec, self.log_dir / f"{spec.name}.log")
        self.children[spec.name] = child
        self._spawn(child, spec.argv)
        return child

    def _spawn(self, child: Child, argv: list[str]) -> None:
        with open(child.log_path, "ab") as log:
            child.proc = subprocess.Popen(
                argv, env=child.spec.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.cwd, preexec_fn=_die_with_parent,
            )
        child.exit_code = None

    def poll(self) -> None:
        """Notice exits and restart what should be restarted (non-blocking)."""
        now = time.monotonic()
        for child in self.children.values():
            if child.finished:
                continue
            if child.proc is None:  # waiting out its backoff
                if now >= child.next_start:
                    self._spawn(child, child.spec.resume_argv or child.spec.argv)
                continue
            code = child.proc.poll()
            if code is None:
                continue
            child.exit_code = code
            child.proc = None
            wants_restart = child.spec.restart == "always" or (child.spec.restart == "on-failure" and code != 0)
            if not wants_restart:
                child.finished = True
                if code != 0:
                    self._show_failure(child, code, "not restarted")
                continue
            if child.restarts >= child.spec.max_restarts:
                child.finished = True
                self.failed = child.spec.name
                self._show_failure(child, code, f"gave up after {child.restarts} restarts")
                continue
            self._show_failure(child, code, f"restarting in {child.backoff_s:.1f} s")
            child.restarts += 1
            child.next_start = now + child.backoff_s
            child.backoff_s = min(child.backoff_s * 2, BACKOFF_MAX_S)

    def _show_failure(self, child: Child, code: int, action: str) -> None:
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        tail = _tail(child.log_path, LOG_TAIL_LINES)
        self.report(f"[surreal] {child.spec.name} {how}; {action}. Last lines of {child.log_path}:\n{tail}")

    def exited(self, name: str) -> int | None:
        """Exit code of a child that finished for good, else None."""
        child = self.children[name]
        return child.exit_code if child.finished else None

    def restarts(self) -> dict[str, int]:
        return {name: child.restarts for name, child in self.children.items()}

    def alive_pids(self) -> list[int]:
        return [c.proc.pid for c in self.children.values() if c.proc is not None and c.proc.poll() is None]

    def stop(self, order: list[str] | None = None, grace_s: float = 5.0) -> None:
        """SIGTERM each child (in `order`, then the rest), wait up to `grace_s`, then SIGKILL."""
        names = [n for n in (order or []) if n in self.children]
        names += [n for n in self.children if n not in names]
        for name in names:
            child = self.children[name]
            child.finished = True
            if child.proc is None or child.proc.poll() is not None:
                continue
            child.proc.terminate()
            try:
                child.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait(timeout=grace_s)
            child.exit_code = child.proc.returncode


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "  (no log)"
    return "\n".join("  " + line for line in text.splitlines()[-lines:])
