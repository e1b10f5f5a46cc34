"""Atomic, rotated checkpoints that load without executing pickled code.

A checkpoint is written to a temporary file, fsynced, then renamed over its final name, so a learner
killed mid-write leaves the previous checkpoint intact; one that does not restore is set aside and the
previous one is used. Loading uses ``torch.load(weights_only=True)``:
only tensors, numbers, strings and containers come back, never arbitrary objects.

A checkpoint may also come from outside (a run folder downloaded or pulled from a bucket, `surreal eval` of one), so
`load_checkpoint` bounds what it reads before torch does and what it hands back before anything walks it: the zip
archive torch writes (its entry count, every entry stored uncompressed as torch writes them, the pickled structure
`data.pkl` at most `MAX_PICKLE_BYTES`), then the loaded structure's nesting depth and size, counted without
recursion (code that walks a state recurses, and a pickle can share one container many times over).

NumPy state (generators, envs, chunks) therefore goes in through `pack`, which turns every array inside nested
dicts and lists into its dtype, shape and raw bytes (a uint8 tensor), which comes back bit for bit, whatever the
dtype (uint64 ids, bools, float64 statistics); NumPy scalars become Python numbers. `unpack` undoes it. Tuples
come back as lists.
"""

from __future__ import annotations

import logging
import os
import re
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

import numpy as np
import torch

from surreal.fileio import atomic_writer

PATTERN = re.compile(r"^ckpt-(\d{10})\.pt$")
MAX_ENTRIES = 1 << 20  # records in the archive: one per tensor storage (a learner's hold a few hundred)
MAX_PICKLE_BYTES = 64 << 20  # data.pkl, the structure around the tensors (a learner's is tens of kB)
MAX_DEPTH = 64  # containers within containers (a learner's state nests about 10 deep)
MAX_NODES = 1 << 22  # values reached walking the structure, shared ones counted each time they are reached
_TAG = "__ndarray__"
_KINDS = "biufc"  # bool, integers, floats, complex: an object array's bytes would be pointers


class CheckpointError(ValueError):
    """A file that is no checkpoint this code reads within its bounds; the message is one line."""


def load_checkpoint(path: str | os.PathLike[str], mmap: bool = False) -> Any:
    """What a checkpoint holds, read with `torch.load(weights_only=True)` once its archive is within bounds, and
    handed back once its structure is (`MAX_DEPTH`, `MAX_NODES`). CheckpointError for what is out of bounds or no
    torch archive; torch's own errors (a pickle it refuses, a damaged record) pass through as they come."""
    name = os.fspath(path)
    try:
        with zipfile.ZipFile(name) as archive:
            entries = archive.infolist()
            if len(entries) > MAX_ENTRIES:
                raise CheckpointError(f"{name}: {len(entries):,} records, over the {MAX_ENTRIES:,} a checkpoint holds")
            compressed = next((e.filename for e in entries if e.compress_type != zipfile.ZIP_STORED), None)
            if compressed is not None:
                raise CheckpointError(f"{name}: record {compressed[:100]!r} is compressed; torch stores its records")
            pickles = [e for e in entries if e.filename.endswith("/data.pkl") or e.filename == "data.pkl"]
            if len(pickles) != 1:
                raise CheckpointError(f"{name}: {len(pickles)} data.pkl records; a torch checkpoint has one")
            if pickles[0].file_size > MAX_PICKLE_BYTES:
                raise CheckpointError(
                    f"{name}: its structure (data.pkl) is {pickles[0].file_size:,} bytes, over {MAX_PICKLE_BYTES:,}"
                )
    except zipfile.BadZipFile as exc:
        raise CheckpointError(f"{name}: not a torch checkpoint ({exc})") from None
    state = torch.load(name, map_location="cpu", weights_only=True, mmap=mmap)
    check_structure(state, name)
    return state


def check_structure(value: Any, name: str) -> None:
    """CheckpointError unless `value` nests at most `MAX_DEPTH` containers deep and walking it reaches at most
    `MAX_NODES` values; an explicit stack, so nothing here recurses however deep it goes."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    reached = 0
    while stack:
        item, depth = stack.pop()
        reached += 1
        if reached > MAX_NODES:
            raise CheckpointError(f"{name}: a structure of more than {MAX_NODES:,} values")
        if isinstance(item, dict):
            children: Any = [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= MAX_DEPTH:
            raise CheckpointError(f"{name}: containers nested deeper than {MAX_DEPTH}")
        stack.extend((child, depth + 1) for child in children)


def pack(value: Any) -> Any:
    """`value` with every NumPy array (at any depth of dicts, lists and tuples) made checkpoint-safe."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _KINDS:
            raise TypeError(f"cannot checkpoint an array of dtype {value.dtype}")
        raw = np.ascontiguousarray(value)
        data = torch.frombuffer(bytearray(raw.tobytes()), dtype=torch.uint8) if raw.nbytes else torch.empty(0)
        return {_TAG: raw.dtype.str, "shape": list(raw.shape), "data": data.to(torch.uint8)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {key: pack(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [pack(item) for item in value]
    return value


def unpack(value: Any) -> Any:
    """What `pack` was given (tuples as lists)."""
    if isinstance(value, dict):
        if _TAG in value:
            dtype = np.dtype(value[_TAG])
            if dtype.kind not in _KINDS:
                raise TypeError(f"a checkpointed array of dtype {dtype}")
            return np.frombuffer(value["data"].numpy().tobytes(), dtype).reshape(value["shape"]).copy()
        return {key: unpack(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unpack(item) for item in value]
    return value


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

    def save(self, step: int, state: Mapping[str, Any]) -> Path:
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
                state = load_checkpoint(path)
                apply(state)
                return state
            except Exception as exc:  # torch.load and a load_state_dict raise many unrelated types
                aside = path.with_name(path.name + ".corrupt")
                path.replace(aside)
                log.warning("checkpoint %s does not restore (%s): set aside as %s", path.name, exc, aside.name)
        return None


class LearnerCheckpoint(TypedDict):
    """A learner checkpoint's content: the algorithm's `state_dict`, the counters (`Counters`), and, through `pack`,
    what the feed holds and what the driver adds."""

    learner: dict[str, Any]
    counters: dict[str, Any]
    feed: NotRequired[Any]  # absent from checkpoints older than feeds
    extra: NotRequired[Any]  # only where the driver adds state (serial mode's world)


@dataclass
class Restored:
    """What a learner checkpoint gave back besides the algorithm's state (loaded in place)."""

    counters: dict[str, Any]
    feed: dict[str, Any]  # the feed's taken-but-unlearned work; empty from checkpoints older than feeds
    extra: dict[str, Any] | None  # the driver's state (serial mode's world); None where it added none


class LearnerCheckpoints:
    """What a learner checkpoint holds, written and read in one place: the algorithm's state (which carries
    its own torch RNG), the counters, what the feed holds, and whatever the driver adds (`extra_state`:
    serial mode's actors, replay and ps), so that a resumed run continues the very same run."""

    def __init__(
        self, directory: Path, keep: int, log: logging.Logger, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store, self.log, self.clock = CheckpointStore(directory, keep), log, clock
        self.extra_state: Callable[[], Mapping[str, Any]] | None = None
        self.saved_at = clock()

    def save(self, step: int, algo_state: dict[str, Any], counters: dict[str, Any], feed: dict[str, Any]) -> None:
        state: LearnerCheckpoint = {"learner": algo_state, "counters": counters, "feed": pack(feed)}
        if self.extra_state is not None:
            state["extra"] = pack(self.extra_state())
        self.store.save(step, state)
        self.saved_at = self.clock()

    def restore(self, load_algo_state: Callable[[dict[str, Any]], None]) -> Restored | None:
        """The newest checkpoint that restores whole (damaged ones are set aside); None: none does."""
        restored: list[Restored] = []

        def apply(loaded: dict[str, Any]) -> None:
            state = cast(LearnerCheckpoint, loaded)  # what `save` wrote; a key missing raises: set aside
            feed = unpack(state["feed"]) if "feed" in state else {}
            extra = unpack(state["extra"]) if "extra" in state else None
            load_algo_state(state["learner"])
            restored.append(Restored(dict(state["counters"]), feed, extra))

        return restored[-1] if self.store.restore(apply, self.log) is not None else None
