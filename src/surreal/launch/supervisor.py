"""Supervising a set of role processes: restart with backoff, show failures, leave no orphans.

Each child runs in a process group of its own, so the terminal's Ctrl-C reaches only the launcher, which
then stops the children in order (actors first, so nothing feeds a stopping learner; then the learner,
which checkpoints on SIGTERM; then the services it talks to). On Linux each child also gets
PR_SET_PDEATHSIG=SIGTERM, so even a `kill -9` of the launcher leaves no orphan behind. A child's stdout
and stderr go to `<logs>/<name>.log`; when it fails, the tail of that log is printed to the console so
the error is seen without opening the file.

The supervisor is single-threaded on purpose: `preexec_fn` is only safe when no other thread can hold a
lock at fork time, and PR_SET_PDEATHSIG fires when the *thread* that forked the child exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from surreal.roles.common import EXIT_STOPPED

Restart = Literal["always", "on-failure", "never"]

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0
GRACE_S = 5.0
LOG_TAIL_LINES = 20
LOG_TAIL_BYTES = 64 * 1024  # enough for 20 lines of traceback; a long log is never read whole
STOP_ORDER = ("actor", "learner", "ps", "replay")
WAIT_STEP_S = 0.05
MAX_RESTARTS = 5  # failures a child may restart after (a stop on a signal and a chaos kill are none)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True)
class ProcessSpec:
    """How to start one child and what to do when it exits.

    `restart`: "always" restarts even after exit code 0 (servers that should never end), "on-failure"
    restarts after a non-zero exit or a signal, "never" does not restart (a failure fails the run). A role that
    exits `EXIT_STOPPED` (stopped by a signal from outside, a preemption or drain, with its state saved) is
    started again at once unless "never", and that is no failure: it is not counted against `max_restarts`.
    `resume_argv` replaces `argv` for every restart: the learner continues from its checkpoint.
    `grace_s`: how long `stop` waits after SIGTERM before SIGKILL (None: the supervisor's); a replay shard
    writes its final snapshot in that time. `group`: children that only work together (a data-parallel
    learner's ranks, roles/learner_group.py): when one fails, the others still running are killed and all
    start again (with `resume_argv`); only the failure counts as a restart.
    """

    name: str
    role: str
    index: int
    argv: list[str]
    env: dict[str, str]
    restart: Restart = "on-failure"
    max_restarts: int = MAX_RESTARTS
    resume_argv: list[str] | None = None
    grace_s: float | None = None
    group: str | None = None


def _load_prctl() -> Callable[..., int] | None:
    """libc's prctl, resolved once in the parent (the forked child must not load libraries)."""
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(None, use_errno=True).prctl


_PRCTL = _load_prctl()


def die_with(parent_pid: int) -> Callable[[], None]:
    """A `preexec_fn` that makes the child receive SIGTERM when the launcher dies.

    If the launcher died between fork and prctl the signal would never come: the re-parented child
    sees a different parent pid and exits at once instead.
    """

    def setup() -> None:
        if _PRCTL is None:
            return
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent_pid:
            os._exit(1)

    return setup


def _kill_group(pgid: int) -> None:
    """SIGKILL what is left of a child's process group (its own children included)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def log_tail(path: Path) -> list[str]:
    """The last LOG_TAIL_LINES lines of a log, reading only its end."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]


def _print_stderr(text: str) -> None:
    # sys.stderr is looked up per call: rich's live display and pytest's capture both replace it.
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Exit:
    """What follows a child's exit: a start after `delay_s` (None: none), `why` (the log's and the console's words),
    `failed` when it exhausted its restarts (the run fails), `counted` when the restart counts against them."""

    delay_s: float | None
    why: str
    failed: bool = False
    counted: bool = False

    @property
    def takes_group_down(self) -> bool:
        """A group's member failed (`ProcessSpec.group`): the others still running are killed to start again with
        it, since a rank alone cannot go on (its peers' next collective would fail within their timeout anyway).
        A chaos kill or a stop on a signal is no failure, and takes nobody with it."""
        return self.counted or self.failed


@dataclass
class RestartPolicy:
    """The supervisor's restart decisions for one child, without a process or a clock (the simulator's supervisor
    asks the same): `ProcessSpec`'s rules, the failures counted in `restarts`, the backoff doubling up to
    BACKOFF_MAX_S."""

    restart: Restart
    max_restarts: int
    restarts: int = 0  # after failures (chaos kills and stops on a signal do not count)
    backoff_s: float = BACKOFF_START_S

    def on_exit(self, code: int, on_purpose: bool = False) -> Exit:
        """After an exit with `code` (negative: killed by that signal); `on_purpose`: a chaos kill."""
        if on_purpose:
            return Exit(0.0, "chaos")
        if code == EXIT_STOPPED and self.restart != "never":  # a signal from outside, its state saved
            return Exit(0.0, "after a stop on a signal")
        if code == 0 and self.restart != "always":
            return Exit(None, "done")
        if self.restart == "never" or self.restarts >= self.max_restarts:
            return Exit(None, f"gave up after {self.restarts} restart(s)", failed=True)
        self.restarts += 1
        delay_s, self.backoff_s = self.backoff_s, min(self.backoff_s * 2, BACKOFF_MAX_S)
        return Exit(delay_s, f"restart {self.restarts}/{self.max_restarts} in {delay_s:g} s", counted=True)


@dataclass
class _Child:
    spec: ProcessSpec
    log_path: Path
    policy: RestartPolicy
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0  # every start, uncounted restarts included: the log's start numbers
    uncounted_why: str = ""  # why the next start is no counted restart ("chaos", "after a stop"), if it is not
    restart_at: float | None = None  # monotonic time of a pending restart
    returncode: int | None = None  # of the last exit
    done: bool = False  # will not be started again
    killed: bool = False  # by `kill` (or with its group): its exit is no failure
    killed_why: str = "chaos"  # what the log says of the start after it
    held: bool = False  # killed and kept down until `release`


class Supervisor:
    """Starts named children, restarts them by policy, and stops them all in role order.

    Use as a context manager (or call `stop`) so every child is gone when the block ends, whatever
    happened inside it.
    """

    def __init__(
        self,
        log_dir: Path,
        grace_s: float = GRACE_S,
        report: Callable[[str], None] = _print_stderr,
    ) -> None:
        self.log_dir = log_dir
        self.grace_s = grace_s
        self.report = report
        self.failed: str | None = None  # the first child that exhausted its restarts
        self._children: dict[str, _Child] = {}

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, spec: ProcessSpec) -> None:
        if spec.name in self._children:
            raise ValueError(f"a child named {spec.name!r} is already supervised")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        child = _Child(spec, self.log_dir / f"{spec.name}.log", RestartPolicy(spec.restart, spec.max_restarts))
        self._children[spec.name] = child
        self._spawn(child, spec.argv)

    def _spawn(self, child: _Child, argv: list[str]) -> None:
        with open(child.log_path, "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            child.starts += 1
            why = f" ({child.uncounted_why})" if child.uncounted_why else ""
            child.uncounted_why = ""
            log.write(f"[surreal] {stamp} start #{child.starts}{why}: {shlex.join(argv)}\n".encode())
            log.flush()
            child.proc = subprocess.Popen(
                argv,
                env=child.spec.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
                preexec_fn=die_with(os.getpid()),
            )
        child.restart_at = None

    def poll(self) -> None:
        """Notice exits and start the restarts that are due; never blocks."""
        now = time.monotonic()
        for child in self._children.values():
            if child.done:
                continue
            if child.proc is None:
                if child.restart_at is not None and now >= child.restart_at:
                    self._spawn(child, child.spec.resume_argv or child.spec.argv)
                continue
            code = child.proc.poll()
            if code is not None:
                self._on_exit(child, code, now)

    def _on_exit(self, child: _Child, code: int, now: float) -> None:
        assert child.proc is not None
        _kill_group(child.proc.pid)  # anything the child started dies with it
        child.proc = None
        child.returncode = code
        exit = child.policy.on_exit(code, on_purpose=child.killed)
        child.killed = False
        if exit.failed:
            self.failed = self.failed or child.spec.name
        if exit.delay_s is None:
            child.done = True
        elif not exit.counted:
            child.uncounted_why = child.killed_why if exit.why == "chaos" else exit.why
            child.killed_why = "chaos"
            child.restart_at = None if child.held else now  # a held chaos kill waits for `release`
        else:
            child.restart_at = now + exit.delay_s
        if exit.why == "after a stop on a signal":
            self.report(
                f"[surreal] {child.spec.name} stopped on a signal (a preemption or drain) with its state saved; "
                "started again at once, not counted as a failure"
            )
        elif exit.counted or exit.failed:
            self._show_exit(child, exit.why)
        if exit.takes_group_down and child.spec.group is not None:
            self._restart_group(child)

    def _restart_group(self, failed: _Child) -> None:
        """`failed`'s group members still running are killed, to start again with it (`Exit.takes_group_down`)."""
        for name, child in self._children.items():
            if child is failed or child.spec.group != failed.spec.group or child.done or child.proc is None:
                continue
            if child.proc.poll() is None and not child.killed:
                self.report(f"[surreal] {name} killed to restart with its group {child.spec.group!r}")
                child.killed, child.killed_why = True, f"with its group, after {failed.spec.name} failed"
                _kill_group(child.proc.pid)

    def _show_exit(self, child: _Child, action: str) -> None:
        assert child.returncode is not None
        lines = log_tail(child.log_path) or ["(empty log)"]
        body = "\n".join(f"  {child.spec.name} | {line}" for line in lines)
        self.report(
            f"[surreal] {child.spec.name} {describe_exit(child.returncode)}; {action}. "
            f"Last lines of {child.log_path}:\n{body}"
        )

    def kill(self, name: str, hold: bool = False) -> bool:
        """SIGKILL a running child on purpose (rehearsed preemption): it is started again at once, or with
        `hold` only after `release`; neither counts as a restart. False: it was not running."""
        child = self._children[name]
        if child.done or child.proc is None or child.proc.poll() is not None:
            return False
        child.killed, child.held = True, hold
        _kill_group(child.proc.pid)
        return True

    def release(self, name: str) -> None:
        """Start a held child again (at the next `poll`)."""
        child = self._children[name]
        if child.held and not child.done:
            child.held = False
            if child.proc is None and not child.killed:
                child.restart_at = time.monotonic()

    def running(self, role: str) -> list[str]:
        """Names of the children of `role` that are running now."""
        return [
            name
            for name, child in self._children.items()
            if child.spec.role == role and child.proc is not None and child.proc.poll() is None and not child.killed
        ]

    def returncode(self, name: str) -> int | None:
        """Exit code of a child that will not be started again; None while it runs or awaits a restart."""
        child = self._children[name]
        return child.returncode if child.done else None

    def restarts(self) -> dict[str, int]:
        return {name: child.policy.restarts for name, child in self._children.items()}

    def alive_pids(self) -> list[int]:
        return [c.proc.pid for c in self._children.values() if c.proc is not None and c.proc.poll() is None]

    def stop(self) -> None:
        """Stop every child, one role at a time in STOP_ORDER (unlisted roles last); idempotent.

        Each wave gets SIGTERM, up to its longest grace (a child's own `grace_s`, else the supervisor's) to
        exit, then SIGKILL for its whole process group.
        """
        for child in self._children.values():
            child.done = True
            child.restart_at = None
        for wave in self._waves():
            self._stop_wave(wave)

    def _waves(self) -> list[list[_Child]]:
        rank = {role: i for i, role in enumerate(STOP_ORDER)}
        waves: dict[int, list[_Child]] = {}
        for child in self._children.values():
            if child.proc is not None:
                waves.setdefault(rank.get(child.spec.role, len(rank)), []).append(child)
        return [waves[key] for key in sorted(waves)]

    def _stop_wave(self, wave: list[_Child]) -> None:
        procs = [(child, child.proc) for child in wave if child.proc is not None]
        for _, proc in procs:
            proc.send_signal(signal.SIGTERM)
        grace_s = max(self.grace_s if child.spec.grace_s is None else child.spec.grace_s for child, _ in procs)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(proc.poll() is None for _, proc in procs):
            time.sleep(WAIT_STEP_S)
        for child, proc in procs:
            if proc.poll() is None:
                self.report(f"[surreal] {child.spec.name} ignored SIGTERM for {grace_s:g} s; killed")
            _kill_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be ignored; bounded anyway
                child.returncode = proc.wait(timeout=self.grace_s)
            child.proc = None if proc.poll() is not None else proc
