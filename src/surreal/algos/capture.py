"""A training step replayed as one CUDA graph instead of hundreds of kernel launches (PPO's minibatch step,
DDPG's critic and actor step): the launch overhead, not the arithmetic, is what small-MLP updates spend
their time on, on a GPU above all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import torch

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
