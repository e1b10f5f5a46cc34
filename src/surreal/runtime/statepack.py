"""NumPy state in a checkpoint that loads with `torch.load(weights_only=True)`.

Checkpoints load without executing pickled code (runtime/checkpoint.py), so NumPy arrays cannot go in as
they are. `pack` turns every array inside nested dicts and lists into its dtype, shape and raw bytes (a
uint8 tensor), which comes back bit for bit, whatever the dtype (uint64 ids, bools, float64 statistics);
NumPy scalars become Python numbers. `unpack` undoes it. Tuples come back as lists.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_TAG = "__ndarray__"
_KINDS = "biufc"  # bool, integers, floats, complex: an object array's bytes would be pointers


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
