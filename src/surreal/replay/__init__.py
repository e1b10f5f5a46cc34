"""Torch-free replay: storage, samplers (FIFO, uniform, prioritized) and the facade the server uses."""

from surreal.replay.buffers import (
    ChunkFifo,
    PrioritizedSampler,
    TransitionStorage,
    UniformSampler,
    flatten_time_major,
    make_replay,
)
from surreal.replay.sumtree import SumTree

__all__ = [
    "ChunkFifo",
    "PrioritizedSampler",
    "SumTree",
    "TransitionStorage",
    "UniformSampler",
    "flatten_time_major",
    "make_replay",
]
