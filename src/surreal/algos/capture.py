"""A training step replayed as one CUDA graph instead of hundreds of kernel launches (PPO's minibatch step,
DDPG's critic and actor step): the launch overhead, not the arithmetic, is what small-MLP updates spend
their time on, on a GPU above all."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch

from surreal.algos.replica import Replica

log = logging.getLogger(__name__)

Out = TypeVar("Out")


class CapturedStep(Generic[Out]):
    """`step(inputs)` replayed as a captured CUDA graph.

    The first WARMUP calls run eagerly on a side stream (capture needs lazy initialization, cuBLAS
    workspaces and compilation done); the next call captures the step reading static input buffers, then
    every call copies its inputs into them and replays. What the step returns (tensors) are the graph's
    output buffers: read or copy them before the next call. Inputs of another shape than the captured ones
    (a short batch) run eagerly, uncaptured: same numbers, no re-capture."""

    WARMUP = 3

    def __init__(self, step: Callable[[dict[str, torch.Tensor]], Out]) -> None:
        self.step = step
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: dict[str, torch.Tensor] = {}
        self.output: Out | None = None

    def __call__(self, inputs: dict[str, torch.Tensor]) -> Out:
        if self.graph is None:
            self.calls += 1
            if self.calls <= self.WARMUP:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    output = self.step(inputs)
                torch.cuda.current_stream().wait_stream(side)
                return output
            self.inputs = {k: v.clone() for k, v in inputs.items()}
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.output = self.step(self.inputs)
            self.graph = graph  # capture records without running: these inputs are replayed below
        if any(self.inputs[k].shape != v.shape for k, v in inputs.items()):
            return self.step(inputs)
        for k, v in inputs.items():
            self.inputs[k].copy_(v)
        self.graph.replay()
        return self.output  # type: ignore[return-value]  # set when the graph was captured


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any], ours: tuple[str, ...] = ()) -> None:
    """Restores `saved` into `optimizer` in place (a captured graph keeps reading its tensors). How this process
    steps (fused, capturable, foreach, and the settings named in `ours`) is not part of what resumes: a checkpoint
    from another device or an older version keeps this optimizer's choices."""
    kept = {k: optimizer.param_groups[0][k] for k in ("fused", "capturable", "foreach", *ours)}
    optimizer.load_state_dict({**saved, "param_groups": [{**saved["param_groups"][0], **kept}]})


class CompiledSteps:
    """What a learner with `compile` shares (PPO's minibatch step, DDPG's and SAC's critic and actor steps): when
    its steps are captured, and the eager fallback. A subclass sets `name`, `compile`, `device` and `replica`
    (`ALONE`: a learner without a group) and builds its steps in `reset_steps`."""

    name: str
    compile: bool
    device: torch.device
    replica: Replica

    def captures(self) -> bool:
        """Whether each step is replayed as a CUDA graph: compiled, on CUDA, no collective inside (replica.py)."""
        return self.compile and self.device.type == "cuda" and self.replica.size == 1

    def reset_steps(self) -> None:
        """(Re)builds the steps: eager, or compiled (and captured where `captures()`)."""
        raise NotImplementedError

    def run_step(self, step: Callable[[], Out]) -> Out:
        """`step()`; if compiling or capturing fails (no C++/Triton toolchain, an unsupported op, a capture
        error), it says so once and the learner goes on eagerly, which gives the same numbers."""
        try:
            return step()
        except Exception as error:
            if not self.compile:
                raise
            log.warning("%s: the compiled step failed, continuing eagerly: %r", self.name, error)
            self.compile = False
            self.reset_steps()
            return step()
