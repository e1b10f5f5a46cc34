"""The replay snapshot file: a format of the project's own, so a shard restores from disk without pickle.

    b"surreal-replay\\n"                  magic (15 bytes)
    u64 little-endian                     length of the header
    header                                UTF-8 JSON: format, version, identity, books, array specs
    body                                  every array's raw bytes, back to back in the header's order
    sha256                                of everything before it (32 bytes)

The header names the arrays (`name`, `dtype` as numpy's `dtype.str`, `shape`); only plain numeric and
boolean dtypes are accepted, so reading a file can create nothing but numbers. The trailing checksum covers
the header too, so a file cut short by a crash or damaged on disk is recognised as corrupt; its identity and books
are trusted only once the checksum matched, and its array specs must add up to the file's size before anything
is allocated. A file is written through `fileio.atomic_writer` (temporary name,
fsync, rename): a reader sees a whole snapshot or none. Torch-free, like the rest of `replay/`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from surreal.boundedjson import JsonBounds, loads
from surreal.fileio import atomic_writer

MAGIC = b"surreal-replay\n"
FORMAT = "surreal-replay-snapshot"
VERSION = 1
DIGEST_BYTES = 32
MAX_HEADER_BYTES = 64 << 20  # a FIFO's chunk metadata can be long, but never this long
# The header's JSON, bounded before it is parsed (surreal/boundedjson.py): a shard's books and its arrays' specs, a
# FIFO's with one small metadata map per chunk; a snapshot can come back from a bucket.
HEADER_JSON = JsonBounds(MAX_HEADER_BYTES, max_depth=16, max_items=1 << 24, max_string=1 << 16, allow_nan=True)
DTYPE_KINDS = frozenset("biufc")  # bool, integers, floats: nothing that could hold an object
_LENGTH = struct.Struct("<Q")


class SnapshotError(ValueError):
    """A file that is not a snapshot this shard can restore: `reason` is `corrupt` (damaged, cut short,
    inconsistent) or `foreign` (another format or version, or written for another shard or experiment)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass
class ShardState:
    """What a snapshot holds besides its identity: the buffer's books (JSON values) and its named arrays."""

    books: Mapping[str, Any]
    arrays: dict[str, np.ndarray]


Pieces = Sequence[np.ndarray]  # one array as consecutive pieces along its first axis (written without joining them)


@dataclass
class Capture:
    """A shard's state as of the capture, ready to write: its books (a storage's and its sampler's `TypedDict`s, one
    JSON object), `arrays` in pieces, some still in the live ring, the `transitions` held, and `verify`, which raises
    when ingest may have overwritten a row those pieces read from (replay/buffers.py `Overrun`)."""

    books: Mapping[str, Any]
    arrays: dict[str, list[np.ndarray]]
    transitions: int
    verify: Callable[[], None] | None = None

    def joined(self) -> ShardState:
        """What a file of it reads back as, without the file: each array's pieces joined (copied)."""
        return ShardState(self.books, {name: np.concatenate(pieces) for name, pieces in self.arrays.items()})


def _raw(array: np.ndarray) -> memoryview:
    """The array's bytes, without a copy for the contiguous arrays a shard holds."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data


def write_snapshot(
    path: Path,
    identity: dict[str, Any],
    books: Mapping[str, Any],
    arrays: Mapping[str, Pieces],
    verify: Callable[[], None] | None = None,
) -> int:
    """Write `books` and `arrays` under `identity` to `path` atomically and durably; returns the file's size.
    `verify` runs after the body is written and before the file is renamed into place: if it raises, the file
    is not published (the pieces may have been read from memory that changed meanwhile)."""
    specs = []
    for name, pieces in arrays.items():
        first = pieces[0]
        if first.dtype.kind not in DTYPE_KINDS:
            raise ValueError(f"{name}: dtype {first.dtype} cannot be snapshotted")
        if any(p.dtype != first.dtype or p.shape[1:] != first.shape[1:] for p in pieces):
            raise ValueError(f"{name}: pieces differ in dtype or trailing shape")
        shape = [sum(len(p) for p in pieces), *first.shape[1:]]
        specs.append({"name": name, "dtype": first.dtype.str, "shape": shape})
    header = {"format": FORMAT, "version": VERSION, "identity": identity, "books": books, "arrays": specs}
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    digest = hashlib.sha256()
    out: list[bytes | memoryview] = [MAGIC, _LENGTH.pack(len(header_bytes)), header_bytes]
    out += [_raw(piece) for pieces in arrays.values() for piece in pieces]
    size = 0
    with atomic_writer(path, durable=True) as f:
        for piece in out:
            digest.update(piece)  # hashlib and write release the GIL for large buffers: the loop keeps running
            f.write(piece)
            size += len(piece)
        if verify is not None:
            verify()
        f.write(digest.digest())
    return size + DIGEST_BYTES


def read_snapshot(path: Path, identity: dict[str, Any]) -> ShardState:
    """The state in `path`, checked: magic, lengths and checksum (else `corrupt`), then format, version and
    `identity` (else `foreign`). Arrays are read straight into fresh numpy arrays, never through pickle."""
    file_size = os.path.getsize(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:

        def take(n: int) -> bytes:
            data = f.read(n)
            if len(data) != n:
                raise SnapshotError("corrupt", f"cut short ({file_size} bytes)")
            digest.update(data)
            return data

        if take(len(MAGIC)) != MAGIC:
            raise SnapshotError("foreign", "not a replay snapshot (magic)")
        (header_len,) = _LENGTH.unpack(take(_LENGTH.size))
        if header_len > min(MAX_HEADER_BYTES, file_size):
            raise SnapshotError("corrupt", f"header length {header_len}")
        try:
            header = loads(take(header_len), HEADER_JSON, "header")
            specs = [(s["name"], np.dtype(s["dtype"]), tuple(int(d) for d in s["shape"])) for s in header["arrays"]]
        except (ValueError, TypeError, KeyError) as exc:
            raise SnapshotError("corrupt", f"header: {exc}") from None
        if any(dtype.kind not in DTYPE_KINDS for _, dtype, _ in specs):
            raise SnapshotError("corrupt", "an array's dtype is not plain numbers")
        body = sum(dtype.itemsize * math.prod(shape) for _, dtype, shape in specs)  # Python ints: no overflow
        if len(MAGIC) + _LENGTH.size + header_len + body + DIGEST_BYTES != file_size:
            raise SnapshotError("corrupt", f"{file_size} bytes, the header accounts for another size")
        arrays = {}
        for name, dtype, shape in specs:
            array = np.empty(shape, dtype)
            raw = _raw(array)
            if f.readinto(raw) != len(raw):
                raise SnapshotError("corrupt", f"cut short in {name}")
            digest.update(raw)
            arrays[name] = array
        if f.read(DIGEST_BYTES) != digest.digest():
            raise SnapshotError("corrupt", "checksum mismatch")
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise SnapshotError("foreign", f"format {header.get('format')!r} version {header.get('version')!r}")
    if header.get("identity") != identity:
        raise SnapshotError("foreign", f"written for {header.get('identity')}, this shard is {identity}")
    books = header.get("books")
    if not isinstance(books, dict):
        raise SnapshotError("corrupt", "no books")
    return ShardState(books, arrays)
