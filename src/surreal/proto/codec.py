"""Messages on the wire: a msgpack header frame, then one raw frame per numpy array.

Why this shape: the header is small and self-describing (protocol version, kind, metadata, one
``[name, dtype, shape]`` spec per array), and the arrays travel as their own buffers, so neither side
copies or pickles them. Sending passes the arrays' memory to ZMQ (``copy=False``); receiving wraps the
received frames with ``np.frombuffer`` (read-only views, no copy).

Nested dicts of arrays (a trajectory chunk, a batch of chunks) are flattened to ``a/b/c`` names and
rebuilt on decode. Everything that arrives is checked against `Limits` before any array is built: a
malformed message raises `ProtocolError`, which servers count and drop.

Where a message travels as one buffer instead of ZMQ frames (the learner group's orders, sent over
torch.distributed), `pack_frames` lays the frames end to end behind their lengths and `unpack_frames` cuts them
apart again, checking the lengths against the buffer before `decode` checks the rest.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
import zmq

# 2: every message kind typed in proto/wire.py (a sample reply's kind says what it holds; requests carry no id).
# A peer of another version is refused with `bad_version`, not half understood.
PROTOCOL_VERSION = 2
SEPARATOR = "/"

# Plain numeric dtypes only: object arrays would need pickle, and structured dtypes carry names we
# would have to trust. Little-endian (or byte-order-free) codes, as numpy writes them on every host we run.
ALLOWED_DTYPES: frozenset[str] = frozenset(
    {"|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8"}
)

Arrays = Mapping[str, "np.ndarray | Arrays"]


class ProtocolError(ValueError):
    """A message that cannot be accepted; `reason` is a short stable label for metrics."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    """What a receiver accepts. ``max_bytes`` also goes to the socket as ZMQ_MAXMSGSIZE (per frame)."""

    max_frames: int = 256
    max_bytes: int = 64 * 1024 * 1024
    max_header_bytes: int = 64 * 1024
    max_ndim: int = 8
    kinds: frozenset[str] | None = None  # None accepts any kind; servers pass the kinds they serve


@dataclass
class Message:
    """A decoded message. `arrays` is nested as it was sent; views over the received frames."""

    kind: str
    meta: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, Any] = field(default_factory=dict)


def flatten(arrays: Arrays, prefix: str = "") -> list[tuple[str, np.ndarray]]:
    """Nested dict of arrays -> [(a/b/c, array)] in insertion order."""
    out: list[tuple[str, np.ndarray]] = []
    for key, value in arrays.items():
        if not isinstance(key, str) or not key or SEPARATOR in key:
            raise ValueError(f"array name {key!r} must be a non-empty string without {SEPARATOR!r}")
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.extend(flatten(value, name + SEPARATOR))
        else:
            out.append((name, np.asarray(value)))
    return out


def unflatten(items: Sequence[tuple[str, np.ndarray]]) -> dict[str, Any]:
    """[(a/b/c, array)] -> nested dict; a name that is both a leaf and a branch is malformed."""
    root: dict[str, Any] = {}
    for name, array in items:
        *branches, leaf = name.split(SEPARATOR)
        node = root
        for branch in branches:
            child = node.setdefault(branch, {})
            if not isinstance(child, dict):
                raise ProtocolError("bad_spec", f"{name!r} nests under an array")
            node = child
        if leaf in node:
            raise ProtocolError("bad_spec", f"duplicate array name {name!r}")
        node[leaf] = array
    return root


def encode(kind: str, meta: Mapping[str, Any] | None = None, arrays: Arrays | None = None) -> list[Any]:
    """Build the frames of one message: [header, array0, array1, ...]; no array data is copied
    unless an array is not C-contiguous."""
    specs: list[list[Any]] = []
    frames: list[Any] = []
    for name, array in flatten(arrays or {}):
        # Not np.ascontiguousarray: it turns 0-d arrays into 1-d ones.
        contiguous = array if array.flags.c_contiguous else array.copy(order="C")
        dtype = contiguous.dtype.newbyteorder("<") if contiguous.dtype.byteorder == ">" else contiguous.dtype
        contiguous = contiguous.astype(dtype, copy=False)
        if dtype.str not in ALLOWED_DTYPES:
            raise ValueError(f"array {name!r} has dtype {dtype} which the protocol does not carry")
        specs.append([name, dtype.str, list(contiguous.shape)])
        # A 0-d or empty array has no buffer worth sharing; a bytes frame is just as cheap.
        frames.append(contiguous.data if contiguous.ndim and contiguous.size else contiguous.tobytes())
    header = msgpack.packb({"v": PROTOCOL_VERSION, "k": kind, "m": dict(meta or {}), "a": specs}, use_bin_type=True)
    return [header, *frames]


def header_cost(meta: Mapping[str, Any], arrays: Arrays) -> int:
    """Bytes that `meta` and the array specs of `arrays` add to a header: what a sender adds up to keep a
    message it assembles from parts (a FIFO reply's chunks) under the receiver's `max_header_bytes`."""
    specs = [[name, array.dtype.str, list(array.shape)] for name, array in flatten(arrays)]
    return len(msgpack.packb(dict(meta), use_bin_type=True)) + len(msgpack.packb(specs, use_bin_type=True))


def decode(frames: Sequence[Any], limits: Limits = Limits()) -> Message:
    """Check and decode received frames (``zmq.Frame``, bytes or memoryviews) into a `Message`."""
    if not frames:
        raise ProtocolError("empty")
    if len(frames) > limits.max_frames + 1:
        raise ProtocolError("too_many_frames", f"{len(frames)} > {limits.max_frames + 1}")
    buffers = [_buffer(f) for f in frames]
    total = sum(b.nbytes for b in buffers)
    if total > limits.max_bytes:
        raise ProtocolError("too_large", f"{total} bytes > {limits.max_bytes}")
    header = _header(buffers[0], limits)
    kind, meta, specs = header["k"], header.get("m", {}), header.get("a", [])
    if len(specs) != len(buffers) - 1:
        raise ProtocolError("bad_spec", f"{len(specs)} specs for {len(buffers) - 1} frames")
    items = [_array(spec, buf, limits) for spec, buf in zip(specs, buffers[1:], strict=True)]
    return Message(kind=kind, meta=meta, arrays=unflatten(items))


def _header(frame: Any, limits: Limits) -> dict[str, Any]:
    """The header frame, decoded and checked (size, version, kind, the shapes of its meta and array specs)."""
    buf = _buffer(frame)
    if buf.nbytes > limits.max_header_bytes:
        raise ProtocolError("header_too_large", f"{buf.nbytes} bytes")
    try:
        header = msgpack.unpackb(buf, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise ProtocolError("bad_header", type(exc).__name__) from None
    if not isinstance(header, dict):
        raise ProtocolError("bad_header", "header is not a map")
    if header.get("v") != PROTOCOL_VERSION:
        raise ProtocolError("bad_version", repr(header.get("v"))[:32])
    kind = header.get("k")
    if not isinstance(kind, str):
        raise ProtocolError("bad_header", "kind is not a string")
    if limits.kinds is not None and kind not in limits.kinds:
        raise ProtocolError("unknown_kind", kind[:32])
    if not isinstance(header.get("m", {}), dict) or not isinstance(header.get("a", []), list):
        raise ProtocolError("bad_header", "meta or array specs malformed")
    return header


def _buffer(frame: Any) -> memoryview:
    if isinstance(frame, zmq.Frame):
        return frame.buffer
    return memoryview(frame).cast("B")


def _array(spec: Any, buf: memoryview, limits: Limits) -> tuple[str, np.ndarray]:
    if not (isinstance(spec, list) and len(spec) == 3):
        raise ProtocolError("bad_spec", "spec is not [name, dtype, shape]")
    name, dtype_str, shape = spec
    if not isinstance(name, str) or not name or any(not part for part in name.split(SEPARATOR)):
        raise ProtocolError("bad_spec", "bad array name")
    if dtype_str not in ALLOWED_DTYPES:
        raise ProtocolError("bad_dtype", str(dtype_str)[:16])
    if (
        not isinstance(shape, list)
        or len(shape) > limits.max_ndim
        or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= limits.max_bytes for d in shape)
    ):
        raise ProtocolError("bad_spec", f"bad shape for {name!r}")
    dtype = np.dtype(dtype_str)
    expected = dtype.itemsize * math.prod(shape)
    if expected != buf.nbytes:
        raise ProtocolError("size_mismatch", f"{name!r}: spec says {expected} bytes, frame has {buf.nbytes}")
    return name, np.frombuffer(buf, dtype=dtype).reshape(shape)


_COUNT = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")


def pack_frames(frames: Sequence[Any]) -> bytes:
    """One buffer holding `frames` (as `encode` makes them): their count, each one's length, then the frames."""
    views = [memoryview(f).cast("B") for f in frames]
    head = _COUNT.pack(len(views)) + b"".join(_LENGTH.pack(v.nbytes) for v in views)
    return b"".join([head, *views])


def unpack_frames(buffer: Any, limits: Limits = Limits()) -> list[memoryview]:
    """The frames of a `pack_frames` buffer, as views into it; their count and lengths must fit the buffer
    exactly and `limits` (frames, bytes). `decode` then checks the message itself."""
    view = memoryview(buffer).cast("B")
    if view.nbytes < _COUNT.size:
        raise ProtocolError("bad_frames", "shorter than its frame count")
    (count,) = _COUNT.unpack_from(view)
    if count == 0 or count > limits.max_frames + 1:
        raise ProtocolError("too_many_frames", f"{count} frames")
    offset = _COUNT.size + count * _LENGTH.size
    if view.nbytes < offset:
        raise ProtocolError("bad_frames", "shorter than its frame lengths")
    lengths = [_LENGTH.unpack_from(view, _COUNT.size + i * _LENGTH.size)[0] for i in range(count)]
    if sum(lengths) != view.nbytes - offset:
        raise ProtocolError("bad_frames", f"frame lengths add up to {sum(lengths)}, not {view.nbytes - offset}")
    if sum(lengths) > limits.max_bytes:
        raise ProtocolError("too_large", f"{sum(lengths)} bytes > {limits.max_bytes}")
    frames = []
    for length in lengths:
        frames.append(view[offset : offset + length])
        offset += length
    return frames
