"""What every role does the same way: stop on SIGTERM/SIGINT, log, read its config."""

from __future__ import annotations

import logging
import signal
import sys
import threading

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
