"""`surreal export RUN|POLICY --format onnx|torchscript [--out FILE]`: the deterministic policy as a standalone file.

The file maps a float32 batch of observations `obs` [batch, *obs_shape] (the batch dimension dynamic; uint8 for a
policy on images, which the file divides by 255 itself) to the deterministic actions `actions` [batch, *action_shape]
(float32), with the observation normalizer and the action squashing or clipping folded in: the module
`Policy.module()` returns (algos/inference.py), so it computes what `Policy.act` computes (to float32 rounding of the
input: tests/test_policy_export.py holds it within 1e-5).

    ONNX          torch.onnx's exporter (torch.export based, opset 18); run it with ONNX Runtime or any ONNX
                  runtime. The input and output names and shapes are also in the model's metadata_props.
    TorchScript   torch.jit.trace of the module; `torch.jit.load(path)` in Python or LibTorch in C++.

A recurrent policy's file (PPO with `algo.recurrent`) takes and returns its state as well: inputs `obs` and `state`
[batch, *state_shape], outputs `actions` and `next_state`; feed each step's `next_state` to the next step and zeros
at an episode's start (an env's row, when its episode ends).

Beside the file, `<file>.json` records the names, shapes and dtypes of the inputs and outputs, the algorithm, the
env and the policy it came from. Needs the `export` extra for ONNX (onnx, onnxscript; onnxruntime to run it).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from surreal.errors import install_extra
from surreal.fileio import atomic_write_text, atomic_writer
from surreal.policy.load import Policy

FORMATS = {"onnx": ".onnx", "torchscript": ".pt"}
INPUT_NAME, OUTPUT_NAME = "obs", "actions"
STATE_INPUT_NAME, STATE_OUTPUT_NAME = "state", "next_state"  # a recurrent policy's


class ExportError(RuntimeError):
    """The export could not be written (a missing extra, an exporter failure); one line."""


def _float32_module(policy: Policy) -> Any:
    import torch

    class Float32Actions(torch.nn.Module):
        """float32 (images: uint8) observations in, float32 actions out, whatever dtype the action space has."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.inner(obs).float()

    class Float32RecurrentActions(Float32Actions):
        """The same for a recurrent policy: (obs, state) in, (actions, next state) out."""

        def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
            actions, next_state = self.inner(obs, state)
            return actions.float(), next_state

    wrapper = Float32Actions if policy.state_shape is None else Float32RecurrentActions
    return wrapper(policy.module()).eval()


def signature(policy: Policy) -> dict[str, Any]:
    """The exported file's input and output (and a recurrent policy's state in and out): names, shapes ("batch" for
    the dynamic dimension), dtypes."""
    obs_dtype = "uint8" if policy.obs_dtype == np.uint8 else "float32"
    out = {
        "input": {"name": INPUT_NAME, "shape": ["batch", *policy.observation_space.shape], "dtype": obs_dtype},
        "output": {"name": OUTPUT_NAME, "shape": ["batch", *policy.action_space.shape], "dtype": "float32"},
    }
    if policy.state_shape is not None:
        shape = ["batch", *policy.state_shape]
        out["state_input"] = {"name": STATE_INPUT_NAME, "shape": shape, "dtype": "float32", "initial": "zeros"}
        out["state_output"] = {"name": STATE_OUTPUT_NAME, "shape": shape, "dtype": "float32"}
    return out


def _examples(policy: Policy) -> tuple[Any, ...]:
    """What the exporters trace the module with: a batch of 2 observations (and states)."""
    import torch

    dtype = torch.uint8 if policy.obs_dtype == np.uint8 else torch.float32
    obs = torch.zeros((2, *policy.observation_space.shape), dtype=dtype)
    return (obs,) if policy.state_shape is None else (obs, torch.zeros((2, *policy.state_shape)))


def sidecar(policy: Policy, fmt: str) -> dict[str, Any]:
    header = policy.metadata
    return {
        "format": fmt,
        **signature(policy),
        "deterministic": True,
        "normalizer_folded_in": header["normalizer"] is not None,
        "algorithm": header["algorithm"],
        "env": header["env"],
        "parameter_version": header["parameter_version"],
        "env_steps": header["env_steps"],
        "evaluation": header["evaluation"],
        "source": policy.source,
    }


def default_out(policy: Policy, fmt: str) -> Path:
    """Beside the policy file: `policy.onnx` or `policy.pt`."""
    return Path(policy.source).with_name("policy" + FORMATS[fmt])


def export(policy: Policy, fmt: str, out: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    """Write the policy as `fmt` to `out` (default: beside its artifact) and its sidecar JSON; (path, sidecar)."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    path = Path(out) if out is not None else default_out(policy, fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    info = sidecar(policy, fmt)
    if fmt == "onnx":
        _export_onnx(policy, path, info)
    else:
        _export_torchscript(policy, path)
    atomic_write_text(path.with_name(path.name + ".json"), json.dumps(info, indent=2) + "\n")
    return path, info


def _export_onnx(policy: Policy, path: Path, info: dict[str, Any]) -> None:
    import torch

    try:
        import onnx
        import onnxscript  # noqa: F401  # torch.onnx's exporter needs it: say so here rather than mid-export
    except ImportError as exc:
        raise ExportError(f"ONNX export needs the export extra: {install_extra('export')} ({exc})") from None
    examples = _examples(policy)
    recurrent = len(examples) == 2
    batch = torch.export.Dim("batch")
    inputs = [INPUT_NAME, STATE_INPUT_NAME] if recurrent else [INPUT_NAME]
    outputs = [OUTPUT_NAME, STATE_OUTPUT_NAME] if recurrent else [OUTPUT_NAME]
    exporter_log = logging.getLogger("torch.onnx")  # notes on torchvision ops this policy never uses
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                _float32_module(policy),
                examples,
                input_names=inputs,
                output_names=outputs,
                dynamic_shapes={"obs": {0: batch}, **({"state": {0: batch}} if recurrent else {})},
                dynamo=True,
                verbose=False,
            )
    except Exception as exc:  # the exporter raises many types; one line says which failed
        raise ExportError(f"torch.onnx could not export this {policy.algorithm} policy: {exc}") from None
    finally:
        exporter_log.setLevel(level)
    assert program is not None  # dynamo=True without a path returns the program
    model = program.model_proto
    for key, value in (("surreal", json.dumps(info)), ("input_name", INPUT_NAME), ("output_name", OUTPUT_NAME)):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    with atomic_writer(path) as f:
        onnx.save_model(model, f)


def _export_torchscript(policy: Policy, path: Path) -> None:
    import torch

    examples = _examples(policy)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # torch.jit.trace's deprecation notice: TorchScript is what was asked for
        traced = torch.jit.trace(_float32_module(policy), examples, check_trace=False)
    with atomic_writer(path) as f:
        torch.jit.save(traced, f)
