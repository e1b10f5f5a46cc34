"""Torch-free replay: storage, samplers (FIFO, uniform, prioritized) and the facade the server uses."""

from surreal.replay.buffers import (
    ChunkFifo,
    FifoItem,
    FifoReplay,
    PrioritizedSampler,
    Replay,
    TransitionReplay,
    TransitionStorage,
    UniformSampler,
    flatten_time_major,
    make_replay,
)
from surreal.replay.sumtree import SumTree

__all__ = [
    "ChunkFifo",
    "FifoItem",
    "FifoReplay",
    "PrioritizedSampler",
    "Replay",
    "SumTree",
    "TransitionReplay",
    "TransitionStorage",
    "UniformSampler",
    "flatten_time_major",
    "make_replay",
]
