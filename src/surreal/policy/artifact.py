"""The policy artifact's file format: one safetensors file whose metadata holds a JSON header. Torch-free.

    <run>/policy/policy.safetensors        the latest policy (written at every learner checkpoint and at the end)
    <run>/policy/best/policy.safetensors   the best one by the evaluator's score (runs with learner.eval_interval)

The file is plain safetensors (https://github.com/huggingface/safetensors), readable from any language:

    8 bytes        N, the header's length, unsigned little-endian
    N bytes        a JSON object: {tensor name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
                   "__metadata__": {"surreal.policy": "<the header, JSON text>"}}, padded with spaces to 8 bytes
    the rest       the tensors' bytes, little-endian, C order, back to back in the order of their offsets

The tensors are the learner's parameter blob, the one actors load (`params()` of the algorithm's learner),
flattened with `/` as the wire codec does: `policy/actor_mean.0.weight`, `obs_norm/mean` (float64, as the
learner's statistics are), `theta`. Reading one never executes anything: it is JSON and raw numbers, checked
before use. Both JSON texts are bounded (length, nesting, values, strings) before they are parsed, and every float
tensor must be finite; a writer refuses what a reader would. The header (format version 1) has exactly these keys:

    format, format_version   "surreal-policy", 1; a reader refuses another version rather than guess
    algorithm, algo_config   the algorithm's name and its whole typed config (surreal.config.schema), which with
                             the spaces rebuilds the policy: nothing else of the run is needed
    env                      {"id", "kwargs"}: what `surreal eval` rolls the policy out in
    observation_space,       {"type": "box", "shape", "dtype", "low", "high"} (bounds as lists, "inf"/"-inf"
    action_space             where infinite; one value each where every element shares it, as a uint8 image's
                             0 and 255 do) or {"type": "discrete", "n", "start"}; a Box's dtype is float32, float64
                             or uint8 (images, channels first)
    action_head              how actions come out: {"type": "box", "squash": "none"|"tanh", "clip": bool}; a
                             categorical head would be {"type": "discrete", "select": "argmax"}
    network                  {"kind", "hidden_sizes", "activation", "parameters", "tensors": {name: shape}}; a
                             recurrent PPO policy's kind is "lstm" or "gru", with "rnn_hidden_size" and the per-env
                             "state_shape" [L, H] its `act` keeps (hidden_sizes: the heads' MLPs on the cell's output);
                             a PPO policy on images is "cnn" (or its cell's kind) with "encoder" ("nature" or
                             "impala") and "features" (the encoder's width, which linear heads take)
    normalizer               null, or {"tensors": {"mean", "var", "count"}, "clip", "epsilon", "count"}: observations
                             enter the network as clip((obs - mean) / sqrt(var + epsilon), -clip, clip)
    parameter_version,       the blob's version, the env steps and updates behind it (updates null where the
    env_steps, updates       writer did not know them: the evaluator's best, from the ps's blob)
    evaluation               null, or {"return_mean", "return_std", "episodes", "success_rate", "seed", "env_steps"}:
                             the deterministic policy's score on episodes seeded from `seed` (roles/evaluation.py)
    seed, git_sha,           the run's seed, the commit that trained it ("unknown" outside a checkout), the
    surreal_version          package version that wrote the file

`action_head`, `network` and `normalizer` describe what `algorithm` + `algo_config` + the tensors already
determine; a reader recomputes them and refuses a file where they disagree (surreal/policy/load.py).
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from surreal.boundedjson import JsonBounds, JsonBoundsError, loads
from surreal.fileio import atomic_writer

FORMAT = "surreal-policy"
FORMAT_VERSION = 1
FILE_NAME = "policy.safetensors"
POLICY_DIR = "policy"  # in the run folder
BEST_DIR = "best"  # in the policy folder
METADATA_KEY = "surreal.policy"
# A policy's safetensors header is a few kB (one entry per tensor, the spaces' bounds, the config). The bound is
# checked on the 8-byte length before a byte of the header is read, so a file claiming a huge header costs nothing.
MAX_HEADER_BYTES = 1 << 20
MAX_FILE_BYTES = 1 << 30  # a 1 GiB policy is a network no learner here trains: refused before it is read
# What either JSON text may hold, checked before `json.loads` sees it (surreal/boundedjson.py): the safetensors header
# is a flat map of tensor entries around the policy header, a string of its own; the policy header nests a few levels
# (a space's bounds in a list, the config's lists) and lists at most a space's bounds, two per dimension.
SAFETENSORS_JSON = JsonBounds(MAX_HEADER_BYTES, max_depth=4, max_items=1 << 18, max_string=MAX_HEADER_BYTES)
POLICY_JSON = JsonBounds(MAX_HEADER_BYTES, max_depth=16, max_items=1 << 18, max_string=1 << 16)

HEADER_TYPES: dict[str, type | tuple[type, ...]] = {  # every header field but the format and its version
    "algorithm": str,
    "algo_config": dict,
    "env": dict,
    "observation_space": dict,
    "action_space": dict,
    "action_head": dict,
    "network": dict,
    "normalizer": (dict, type(None)),
    "parameter_version": int,
    "env_steps": int,
    "updates": (int, type(None)),
    "evaluation": (dict, type(None)),
    "seed": int,
    "git_sha": str,
    "surreal_version": str,
}
HEADER_KEYS = frozenset({"format", "format_version", *HEADER_TYPES})
BOX_DTYPES = ("float32", "float64", "uint8")  # a Box space's dtypes the header holds (uint8: images)
MAX_BOX_ELEMENTS = 1 << 24  # a 4096 x 4096 image: its one-value bounds must not stand for an allocation of any size
EVALUATION_KEYS = frozenset({"return_mean", "return_std", "episodes", "success_rate", "seed", "env_steps"})

# safetensors dtype names <-> NumPy (the ones a parameter blob holds).
DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


class ArtifactError(ValueError):
    """A policy file that cannot be used: damaged, hostile, of another format version, or not one at all. The
    message is one line naming the file and what is wrong."""


# -- tensors <-> safetensors bytes --------------------------------------------------------------------------


def encode(header: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> bytes:
    """The safetensors bytes of `tensors` with `header` (JSON, strict: no NaN or infinity) in its metadata."""
    entries: dict[str, Any] = {"__metadata__": {METADATA_KEY: json.dumps(header, allow_nan=False, sort_keys=True)}}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        array = np.asarray(tensors[name], order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"tensor {name!r} has dtype {array.dtype}, which the format does not hold")
        data = array.astype(dtype, copy=False).tobytes()
        entries[name] = {
            "dtype": DTYPE_NAMES[dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    text = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)  # the tensors start 8-byte aligned
    if len(text) > MAX_HEADER_BYTES:
        raise ValueError(f"the header would be {len(text)} bytes, over the {MAX_HEADER_BYTES}-byte limit")
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def decode(data: bytes, name: str = "policy file") -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(header, tensors) from safetensors bytes, every length, offset, dtype and shape checked first."""
    if len(data) < 8:
        raise ArtifactError(f"{name}: {len(data)} bytes, too short to be a policy file")
    (size,) = struct.unpack("<Q", data[:8])
    if size > MAX_HEADER_BYTES:
        raise ArtifactError(f"{name}: its header claims {size} bytes, over the {MAX_HEADER_BYTES}-byte limit")
    if 8 + size > len(data):
        raise ArtifactError(f"{name}: its header claims {size} bytes but the file has {len(data) - 8} (cut short?)")
    try:
        entries = loads(memoryview(data)[8 : 8 + size], SAFETENSORS_JSON, "its safetensors header")
    except JsonBoundsError as exc:
        raise ArtifactError(f"{name}: {exc}") from None
    if not isinstance(entries, dict):
        raise ArtifactError(f"{name}: its safetensors header is not a JSON object")
    metadata = entries.pop("__metadata__", None)
    if not isinstance(metadata, dict) or not isinstance(metadata.get(METADATA_KEY), str):
        raise ArtifactError(f"{name}: a safetensors file without a surreal policy header ({METADATA_KEY!r} metadata)")
    try:
        header = loads(metadata[METADATA_KEY], POLICY_JSON, "its policy header")
    except JsonBoundsError as exc:
        raise ArtifactError(f"{name}: {exc}") from None
    if not isinstance(header, dict):
        raise ArtifactError(f"{name}: its policy header is not a JSON object")
    buffer = memoryview(data)[8 + size :]
    tensors: dict[str, np.ndarray] = {}
    spans = []
    for tensor, entry in entries.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise ArtifactError(f"{name}: tensor {tensor!r} is not described by dtype, shape and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPES:
            raise ArtifactError(f"{name}: tensor {tensor!r} has dtype {dtype!r}, not one of {', '.join(DTYPES)}")
        if not _ints(shape) or not _ints(offsets) or len(offsets) != 2 or offsets[0] > offsets[1]:
            raise ArtifactError(f"{name}: tensor {tensor!r} has a malformed shape or data_offsets")
        nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if offsets[1] - offsets[0] != nbytes:
            raise ArtifactError(
                f"{name}: tensor {tensor!r} of shape {shape} needs {nbytes} bytes, its offsets hold "
                f"{offsets[1] - offsets[0]}"
            )
        spans.append((offsets[0], offsets[1], tensor, dtype, shape))
    end = 0
    for begin, stop, tensor, *_ in sorted(spans):
        if begin != end:
            raise ArtifactError(
                f"{name}: tensor {tensor!r} starts at byte {begin}, not {end}: overlapping or gapped data"
            )
        end = stop
    if end != len(buffer):
        raise ArtifactError(
            f"{name}: the tensors hold {end} bytes but the file has {len(buffer)} after the header "
            f"({'cut short' if end > len(buffer) else 'trailing bytes'})"
        )
    for begin, stop, tensor, dtype, shape in spans:
        tensors[tensor] = np.frombuffer(buffer[begin:stop], DTYPES[dtype]).reshape(shape).copy()
    return header, tensors


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)


def non_finite(tensors: Mapping[str, np.ndarray]) -> str | None:
    """The first tensor (by name) holding NaN or an infinity, None when every float is finite: weights or normalizer
    statistics that would make every action NaN, and a score of one."""
    for name in sorted(tensors):
        array = tensors[name]
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            return name
    return None


def check_finite(tensors: Mapping[str, np.ndarray], name: str) -> None:
    """ArtifactError naming the first tensor that holds NaN or an infinity (`non_finite`)."""
    bad = non_finite(tensors)
    if bad is not None:
        raise ArtifactError(f"{name}: tensor {bad!r} holds NaN or infinity; a policy acts only with finite numbers")


def write_policy_file(
    path: str | os.PathLike[str], header: Mapping[str, Any], tensors: Mapping[str, np.ndarray]
) -> Path:
    """Write the artifact at once (a reader sees the previous file or this one, never half), fsynced as the
    learner's checkpoints are; the folder is made if missing. Tensors holding NaN or an infinity are refused
    (ArtifactError, nothing written): a reader would refuse the file, so the previous one stays."""
    final = Path(path)
    check_finite(tensors, f"{final}: not written")
    final.parent.mkdir(parents=True, exist_ok=True)
    data = encode(header, tensors)
    with atomic_writer(final, durable=True) as f:
        f.write(data)
    return final


def read_policy_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(header, tensors) of a policy file, the header's keys and version checked (`check_header`) and every float
    tensor finite (`check_finite`). The file's size is bounded by its header and tensors: the 8-byte length is read
    and checked before the rest."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size > MAX_FILE_BYTES:
                raise ArtifactError(f"{path}: over {MAX_FILE_BYTES >> 20} MiB, larger than any policy this writes")
            head = f.read(8)
            if len(head) == 8 and struct.unpack("<Q", head)[0] > MAX_HEADER_BYTES:
                return decode(head, str(path))  # says why, without reading the claimed header
            data = head + f.read()
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    header, tensors = decode(data, str(path))
    check_header(header, str(path))
    check_finite(tensors, str(path))
    return header, tensors


# -- the header ---------------------------------------------------------------------------------------------


def check_header(header: Mapping[str, Any], name: str = "policy file") -> None:
    """The header's keys exactly (none missing, none unknown), its format and version, and its fields' types."""
    if header.get("format") != FORMAT:
        raise ArtifactError(f"{name}: not a surreal policy (format {header.get('format')!r}, expected {FORMAT!r})")
    version = header.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise ArtifactError(f"{name}: policy format version {version!r}; this surreal reads version {FORMAT_VERSION}")
    missing, unknown = HEADER_KEYS - set(header), set(header) - HEADER_KEYS
    if missing or unknown:
        parts = ([f"missing {', '.join(sorted(missing))}"] if missing else []) + (
            [f"unknown {', '.join(sorted(unknown))}"] if unknown else []
        )
        raise ArtifactError(f"{name}: header keys: {'; '.join(parts)}")
    for key, expected in HEADER_TYPES.items():
        if (
            not isinstance(header[key], expected)
            or isinstance(header[key], bool)
            and expected in (int, (int, type(None)))
        ):
            raise ArtifactError(f"{name}: header field {key!r} has the wrong type ({type(header[key]).__name__})")
    env = header["env"]
    if set(env) != {"id", "kwargs"} or not isinstance(env["id"], str) or not isinstance(env["kwargs"], dict):
        raise ArtifactError(f"{name}: header field 'env' must be {{'id': str, 'kwargs': object}}")
    evaluation = header["evaluation"]
    if evaluation is not None and set(evaluation) != EVALUATION_KEYS:
        raise ArtifactError(f"{name}: header field 'evaluation' must have exactly {', '.join(sorted(EVALUATION_KEYS))}")


def _bounds(values: np.ndarray) -> list[float | str]:
    return [float(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf") for v in np.asarray(values, float).ravel()]


def _compact(values: list[float | str]) -> list[float | str]:
    """One value for bounds every element shares (an image's 0 and 255): 28,224 numbers for an Atari stack's."""
    return values[:1] if len(values) > 1 and all(v == values[0] for v in values) else values


def encode_space(space: Any) -> dict[str, Any]:
    """A Gymnasium Box or Discrete space as JSON (infinite bounds as "inf"/"-inf"; a uint8 Box's shared bounds as one
    value each)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        low, high = _bounds(space.low), _bounds(space.high)
        if space.dtype == np.uint8:
            low, high = _compact(low), _compact(high)
        return {"type": "box", "shape": list(space.shape), "dtype": str(space.dtype), "low": low, "high": high}
    if isinstance(space, spaces.Discrete):
        return {"type": "discrete", "n": int(space.n), "start": int(space.start)}
    raise ValueError(f"the policy artifact holds Box and Discrete spaces, not {type(space).__name__}")


def decode_space(data: Any, what: str) -> Any:
    """The Gymnasium space `encode_space` described; ArtifactError for anything else."""
    from gymnasium import spaces

    kind = data.get("type") if isinstance(data, dict) else None
    try:
        if kind == "box" and set(data) == {"type", "shape", "dtype", "low", "high"}:
            shape = tuple(data["shape"])
            dtype = np.dtype(data["dtype"]) if data["dtype"] in BOX_DTYPES else None
            if dtype is None or not _ints(data["shape"]) or math.prod(shape) > MAX_BOX_ELEMENTS:
                raise ValueError(f"a {', '.join(BOX_DTYPES)} Box of at most {MAX_BOX_ELEMENTS:,} elements")
            low, high = (np.array([float(v) for v in data[k]], np.float64) for k in ("low", "high"))
            size = math.prod(shape)
            if low.size not in (1, size) or high.size not in (1, size):
                raise ValueError(f"bounds of {low.size} and {high.size} values for shape {list(shape)}")
            if dtype == np.uint8 and not ((low >= 0).all() and (high <= 255).all() and (low <= high).all()):
                raise ValueError("uint8 bounds outside [0, 255]")
            low, high = np.broadcast_to(low, size), np.broadcast_to(high, size)
            return spaces.Box(low.reshape(shape).astype(dtype), high.reshape(shape).astype(dtype), shape, dtype)
        if kind == "discrete" and set(data) == {"type", "n", "start"}:
            if not (type(data["n"]) is int and data["n"] > 0 and type(data["start"]) is int):
                raise ValueError("n > 0 and start as ints")
            return spaces.Discrete(data["n"], start=data["start"])
    except (TypeError, ValueError) as exc:
        raise ArtifactError(f"{what}: {exc}") from None
    raise ArtifactError(f"{what}: not a box or discrete space as this format writes one")
