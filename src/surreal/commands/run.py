"""`surreal run [--serial] [--resume RUN] [overrides...]`: one experiment, prepared and started in this process by
the run service (surreal/run/). Exit code: 0 completed (or nothing left to resume), 1 failed, 2 refused, 130
interrupted."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from surreal.config import ConfigError
from surreal.envs import env_ids_in, import_modules, modules_named
from surreal.launch.local import print_result
from surreal.roles.common import StopFlag
from surreal.run.prepare import RunComplete, prepare
from surreal.run.start import start
from surreal.runjson import EXIT_CODES, read_json


def run_experiment(
    overrides: list[str],
    live: bool = True,
    resume: str | os.PathLike[str] | None = None,
    imports: Sequence[str] = (),
    serial: bool = False,
) -> int:
    """One experiment: its roles as supervised local processes, or with `serial` every role's core in this process
    (deterministic for a seed). `resume`: continue the run in that folder or bucket URI instead. `imports`: the
    user's env modules (`--import`; a resume's `env=` imports its own)."""
    try:
        import_modules([*imports, *(modules_named(env_ids_in(overrides)) if resume is not None else [])])
        prepared = prepare(overrides, resume=resume, mode="serial" if serial else "processes")
    except RunComplete as complete:
        print(f"[surreal] {complete}", flush=True)
        return 0
    except ConfigError as exc:
        print(f"surreal: {exc}", file=sys.stderr)
        return 2
    for warning in prepared.warnings:
        print(f"surreal: warning: {warning}", file=sys.stderr, flush=True)
    for note in prepared.notes:
        print(f"[surreal] {note}", flush=True)
    if not serial:
        return EXIT_CODES[start(prepared, "processes", live=live)["status"]]
    print(f"[surreal] {prepared.dir.name}: every role in this process (--serial); log in {prepared.dir / 'logs'}")
    with StopFlag() as stop:  # SIGTERM or Ctrl-C: a checkpoint, and --resume continues

        def received() -> str | None:
            return f"{signal.Signals(stop.signal).name} received" if stop.signal else None

        summary: dict[str, Any] | None
        try:
            summary = start(prepared, "serial", stop=received)
        except ConfigError as exc:  # a checkpoint this world cannot continue
            print(f"surreal: {exc}", file=sys.stderr)
            return 2
        except Exception:  # noqa: BLE001 - written as failed: summary.json says why, and the result below
            summary = read_json(prepared.dir / "summary.json")
    if summary is None:
        return 1
    print_result(summary)
    return EXIT_CODES.get(summary["status"], 1)
