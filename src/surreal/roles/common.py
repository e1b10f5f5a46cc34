"""What every role does the same way: stop on SIGTERM/SIGINT, hold when done, log, count what its clients drop.

`StopFlag` also serves the launcher (`surreal run`), which stops on the same signals.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, NoReturn

import zmq

from surreal.config import ExperimentConfig
from surreal.metrics import RoleMetrics
from surreal.proto.channels import ErrorSink, ParamClient
from surreal.proto.codec import Limits
from surreal.settings import Settings

# The exit code of a learner, replay shard or ps that a signal stopped (a preemption notice, a drain, a scale-down)
# after it saved what it holds: 128 + SIGTERM, what a container runtime reports for a SIGTERM'd process. A
# supervisor starts such a role again without counting a failure (launch/supervisor.py); training that ended
# exits 0, a crash anything else.
EXIT_STOPPED = 128 + signal.SIGTERM


class StopFlag:
    """Set by SIGTERM/SIGINT instead of raising, so a loop that checks it ends cleanly: a role's (sockets
    closed, checkpoint flushed) or the launcher's (children stopped in order, which a second Ctrl-C cannot
    interrupt). `signal` is the first signal received.

    A role calls `install()` once: its handlers stay for the life of the process. The launcher, which
    tests and callers also run inside a bigger process, uses it as a context manager: the handlers that
    were there before are put back when the block ends.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> StopFlag:
        self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        self.signal = self.signal or signum
        self._event.set()

    def __enter__(self) -> StopFlag:
        return self.install()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def set(self) -> None:
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: float) -> bool:
        return self._event.wait(timeout_s)


def hold_until_stopped(stop: StopFlag, log: logging.Logger) -> None:
    """SURREAL_HOLD_WHEN_DONE: stay up, idle, until SIGTERM/SIGINT. A StatefulSet restarts every container that
    exits, so a finished role that exited would run again forever; holding keeps /metrics answering (probes
    pass)."""
    log.info("training done: holding until stopped (SURREAL_HOLD_WHEN_DONE=1)")
    while not stop.wait(0.5):
        pass


def end_process(code: int) -> NoReturn:
    """End a role's process with exit status `code` once its `main` has returned, skipping the interpreter's
    finalization. A role has closed its sockets, files, checkpoint and mirror by then, and what finalization would
    still do (tear down torch's and every imported module's objects) takes a role with torch loaded 0.7 s of a core
    on a quiet box and 2-3 s on a busy 2-core one: a stopping run waits for it role by role (actors, then the
    learner, then the services), so a Ctrl-C took several seconds more than the roles' own stop. Logs and the
    standard streams are flushed first, and a coverage measurement of the process (the test suite's) saves its data,
    which it would have done at exit; the kernel closes the rest."""
    measuring = sys.modules.get("coverage")
    current = measuring.Coverage.current() if measuring is not None else None
    if current is not None:
        current.stop()
        current.save()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def setup_logging(role: str, index: int) -> logging.Logger:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s {role}-{index} %(levelname)s %(message)s",
    )
    return logging.getLogger(f"surreal.{role}")


def count_errors(
    metrics: RoleMetrics,
    name: str = "messages_dropped_total",
    description: str = "malformed replies counted and dropped",
) -> ErrorSink:
    """A client's `on_error`: each reply it dropped counted by reason in `name`."""
    by_reason = metrics.counter(name, description, ["reason"])

    def on_error(reason: str) -> None:
        by_reason.labels(reason=reason).inc()

    return on_error


def param_client(
    ctx: zmq.Context,
    settings: Settings,
    cfg: ExperimentConfig,
    on_error: ErrorSink,
    stopped: Callable[[], bool] | None = None,
) -> ParamClient:
    """A client of the experiment's ps replicas, taking blobs up to `ps.max_message_bytes`; `stopped` (the role's
    stop flag) ends a wait for the ps at once: a held actor's long poll must not outlast its SIGTERM."""
    ps_addrs = [settings.connect(a) for a in settings.ps_addrs]
    return ParamClient(ctx, ps_addrs, Limits(max_bytes=cfg.ps.max_message_bytes), on_error, stopped)
