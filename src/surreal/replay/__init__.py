"""Torch-free replay: storages (FIFO of chunks, ring of transitions) and samplers (in order, uniform, prioritized),
composed by the shard the server uses (replay/shard.py)."""

from surreal.replay.buffers import ChunkFifo, Storage, TransitionStorage, flatten_time_major
from surreal.replay.samplers import InOrder, PrioritizedSampler, Sampler, UniformSampler
from surreal.replay.sumtree import SumTree

__all__ = [
    "ChunkFifo",
    "InOrder",
    "PrioritizedSampler",
    "Sampler",
    "Storage",
    "SumTree",
    "TransitionStorage",
    "UniformSampler",
    "flatten_time_major",
]
