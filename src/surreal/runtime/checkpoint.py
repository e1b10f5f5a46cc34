"""Atomic, rotated checkpoints that load without executing pickled code.

A checkpoint is written to a temporary file, fsynced, then renamed over its final name, so a learner
killed mid-write leaves the previous checkpoint intact. Loading uses ``torch.load(weights_only=True)``:
only tensors, numbers, strings and containers come back, never arbitrary objects.
"""

from __future__ import annotations

import re
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

    def load_latest(self) -> dict[str, Any] | None:
        paths = self.paths()
        if not paths:
            return None
        return torch.load(paths[-1], map_location="cpu", weights_only=True)
