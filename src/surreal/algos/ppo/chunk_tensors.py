"""Chunks of one length T as device tensors laid side by side along K ([T, K_total, ...]): what the PPO learner's
batch preparation reads, image stacks rebuilt on the device from each chunk's frames and indices."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from surreal.proto.wire import PER_ENV, Chunk
from surreal.runtime.frame_chunks import frame_chunk, is_packed


def stack(chunks: Sequence[Chunk], key: str, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """One array of chunks of equal T, side by side along K ([T, K_total, ...]), on the device."""
    return torch.from_numpy(np.concatenate([c.arrays[key] for c in chunks], axis=1)).to(device, dtype)


def stack_per_env(chunks: Sequence[Chunk], key: str, device: torch.device) -> torch.Tensor:
    """One `PER_ENV` array of chunks, side by side along K ([K_total, ...]), on the device."""
    return torch.from_numpy(np.concatenate([c.arrays[PER_ENV][key] for c in chunks])).to(device)


def observations(chunks: Sequence[Chunk], device: torch.device) -> torch.Tensor:
    """s_t and s'_t of chunks of one length T, side by side along K, as one tensor [2, T, K_total, ...] on the
    device: float32 vectors, or uint8 images whose stacks each chunk's frames and indices rebuild there
    (runtime/frame_chunks.py; the indices are checked against the frames by the wire and the FIFO)."""
    if not is_packed(chunks[0].arrays):
        return torch.stack([stack(chunks, "obs", device), stack(chunks, "next_obs", device)])
    stacks = []
    for chunk in chunks:
        packed = frame_chunk(chunk.arrays)
        array = packed.frames if packed.frames.flags.writeable else packed.frames.copy()  # a received message's
        frames = torch.from_numpy(array).to(device)
        index = torch.from_numpy(np.stack([packed.obs_index, packed.next_index])).to(device)
        stacks.append(frames[index.long()])  # [2, T, K, S, H, W]
    return torch.cat(stacks, dim=2)
