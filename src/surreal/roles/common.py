"""What every role does the same way: stop on SIGTERM/SIGINT, hold when done, log, read its config."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable

from surreal.config import ExperimentConfig, config_from_env


class StopFlag:
    """Set by SIGTERM/SIGINT so a role's main loop ends cleanly (sockets closed, checkpoint flushed)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def install(self) -> StopFlag:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._event.set())
        return self

    def set(self) -> None:
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: float) -> bool:
        return self._event.wait(timeout_s)


def hold_until_stopped(stop: StopFlag, log: logging.Logger, service: Callable[[], object] | None = None) -> None:
    """SURREAL_HOLD_WHEN_DONE: stay up, idle, until SIGTERM/SIGINT. A StatefulSet restarts every container that
    exits, so a finished role that exited would run again forever; holding keeps /metrics answering (probes
    pass) and, with `service`, keeps doing that little work (the learner re-sends its final blob)."""
    log.info("training done: holding until stopped (SURREAL_HOLD_WHEN_DONE=1)")
    while not stop.wait(0.5):
        if service is not None:
            service()


def setup_logging(role: str, index: int) -> logging.Logger:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s {role}-{index} %(levelname)s %(message)s",
    )
    return logging.getLogger(f"surreal.{role}")


def load_config() -> ExperimentConfig:
    """The experiment config named by SURREAL_CONFIG (built-in defaults when unset)."""
    return config_from_env()
