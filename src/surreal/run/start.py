"""`start`: a prepared run folder (run/prepare.py) run to its end as supervised processes (launch/local.py) or
serially in the calling thread (run/serial.py), summary.json written however it ends. `surreal.train` hands the
folder it prepared, and its lock, to a child launcher instead (`handed_over`, `main`): nothing is prepared twice."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from surreal.config import ConfigError, read_config
from surreal.launch.local import launch
from surreal.run.folder import RunFolderLock, mirror_uri
from surreal.run.prepare import Mode, PreparedRun
from surreal.runjson import EXIT_CODES, write_summary

SERIAL_LOG = "serial.log"  # in <run>/logs/: a serial run's log (its learner's, actors' and evaluator's lines)


def start(
    prepared: PreparedRun, mode: Mode = "processes", *, live: bool = False, stop: Callable[[], str | None] | None = None
) -> dict[str, Any]:
    """Run `prepared` to its end, release its folder and return summary.json's content. `live`: the launcher's
    progress line redrawn in place. `stop` (serial): asked between steps, from any thread; a reason ends the run with
    a checkpoint, as Ctrl-C does a launcher's. A serial run that raises is summarized as failed and raises on."""
    with prepared.lock:
        if mode == "processes":
            cfg, run_dir = prepared.cfg, prepared.dir
            return launch(cfg, run_dir, live, prepared.resume, prepared.resumed_at, mirror_uri(cfg, run_dir))
        return _serial(prepared, stop)


def _serial(prepared: PreparedRun, stop: Callable[[], str | None] | None) -> dict[str, Any]:
    from surreal.run.serial import SerialResumeError, run_serial  # torch: only for a serial run

    run_dir, cfg = prepared.dir, prepared.cfg
    log = logging.getLogger(f"surreal.serial.{run_dir.name}")
    handler = logging.FileHandler(run_dir / "logs" / SERIAL_LOG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    started = time.monotonic()

    def summary(status: str, reason: str | None) -> dict[str, Any]:
        return write_summary(run_dir, cfg, time.monotonic() - started, status, {}, reason, prepared.resumed_at)

    stopping = (lambda: stop() is not None) if stop is not None else None
    try:
        try:
            result = run_serial(cfg, run_dir, log, resume=prepared.resume, stop=stopping)
        except SerialResumeError as exc:  # a process run's checkpoint: this world cannot be continued
            raise ConfigError(f"{run_dir}: {exc}; resume it with mode='processes'") from None
        if result is None:
            return summary("interrupted", stop() if stop is not None else None)
        return summary("completed", None)
    except BaseException as exc:  # summarized, then raised on
        interrupted = isinstance(exc, KeyboardInterrupt)
        with contextlib.suppress(Exception):
            summary("interrupted" if interrupted else "failed", "KeyboardInterrupt" if interrupted else f"{exc}")
        raise
    finally:
        log.removeHandler(handler)
        handler.close()


def handed_over(prepared: PreparedRun) -> list[str]:
    """The command of a child launcher (`main`) handed `prepared`: pass the lock's descriptor on (`pass_fds`)."""
    argv = [sys.executable, "-m", "surreal.run", str(prepared.dir), "--lock-fd", str(prepared.lock.file.fileno())]
    if prepared.resume:
        argv.append("--resume")
    if prepared.resumed_at is not None:
        argv += ["--resumed-at", str(prepared.resumed_at)]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m surreal.run RUN_DIR --lock-fd FD [--resume] [--resumed-at STEPS]`: the child launcher of
    `handed_over`, running config.yaml as prepared; `surreal run`'s exit code."""
    parser = argparse.ArgumentParser(prog="python -m surreal.run", description=main.__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--lock-fd", type=int, required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--resumed-at", type=int)
    args = parser.parse_args(argv)
    lock = RunFolderLock(args.run_dir, handed=args.lock_fd)
    cfg = read_config(args.run_dir / "config.yaml")
    return EXIT_CODES[start(PreparedRun(args.run_dir, cfg, lock, args.resume, args.resumed_at))["status"]]
