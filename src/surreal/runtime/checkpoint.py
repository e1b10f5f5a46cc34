"""Atomic, rotated checkpoints that load without executing pickled code.

A checkpoint is written to a temporary file, fsynced, then renamed over its final name, so a learner
killed mid-write leaves the previous checkpoint intact; one that does not restore is set aside and the
previous one is used. Loading uses ``torch.load(weights_only=True)``:
only tensors, numbers, strings and containers come back, never arbitrary objects.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from surreal.fileio import atomic_writer

PATTERN = re.compile(r"^ckpt-(\d{10})\.pt$")


class CheckpointStore:
    def __init__(self, directory: Path, keep: int) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.directory = Path(directory)
        self.keep = keep
        self.directory.mkdir(parents=True, exist_ok=True)

    def paths(self) -> list[Path]:
        """Existing checkpoints, oldest first."""
        found = [(int(m.group(1)), p) for p in self.directory.iterdir() if (m := PATTERN.match(p.name))]
        return [p for _, p in sorted(found)]

    def save(self, step: int, state: dict[str, Any]) -> Path:
        final = self.directory / f"ckpt-{step:010d}.pt"
        with atomic_writer(final, durable=True) as f:  # fsynced, the rename too: survives a power cut
            torch.save(state, f)
        for old in self.paths()[: -self.keep]:
            old.unlink(missing_ok=True)
        return final

    def restore(self, apply: Callable[[dict[str, Any]], None], log: logging.Logger) -> dict[str, Any] | None:
        """Load the newest checkpoint and hand it to `apply`; one that fails either way (cut short by a full
        disk, written by another algorithm, damaged) is set aside as `<name>.corrupt`, with a log line, and
        the one before it is tried. None: no checkpoint could be restored."""
        for path in reversed(self.paths()):
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
                apply(state)
                return state
            except Exception as exc:  # torch.load and a load_state_dict raise many unrelated types
                aside = path.with_name(path.name + ".corrupt")
                path.replace(aside)
                log.warning("checkpoint %s does not restore (%s): set aside as %s", path.name, exc, aside.name)
        return None
