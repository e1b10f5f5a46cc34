"""Pixel observations in a chunk as each frame once (surreal/frames.py), under the names the wire and the learner use.

An image observation is a uint8 array whose first axis is its planes: an Atari stack's 4 frames of 84x84, a camera
image's 3 colour planes. A chunk of them does not carry `obs` and `next_obs` ([T, K, S, H, W] each, every frame
eight times over for a 4-stack); `pack` replaces both with

    per_chunk/frames   uint8 [N, H, W]   each distinct plane once (`PER_CHUNK`: N is the chunk's own)
    obs_index          int32 [T, K, S]   obs[t, k] is frames[obs_index[t, k]]
    next_index         int32 [T, K, S]   next_obs[t, k] is frames[next_index[t, k]]

and `unpack` (or `stacks`, on the learner's device) gives the stacks back bit for bit. A stack of RGB renders
(`envs_pixels.py`) is S frames of 3 planes each (`frames` [N, 3, H, W], `frame_planes`). The fields' names and shapes
are proto/frame_fields.py's, which the replay reads too; this module packs and unpacks. For an Atari stack that is
about one frame an env step; a camera image shares nothing with the previous one but is still carried once where
`obs` and `next_obs` held it twice. The fields (`frame_fields`) are what an algorithm's `chunk_fields` declares,
so the wire, the FIFO (`replay.layout`) and the learner refuse a chunk whose frames have another shape or dtype, or
whose indices point past its frames, like any other malformed chunk.
"""

from __future__ import annotations

from typing import Any

from surreal.frames import FrameChunk, as_planes, split
from surreal.proto.frame_fields import (
    FRAMES,
    FRAMES_FIELD,
    NEXT_INDEX,
    OBS_INDEX,
    frame_fields,
    frame_planes,
    served_fields,
)
from surreal.proto.wire import PER_CHUNK

__all__ = [
    "FRAMES",
    "FRAMES_FIELD",
    "NEXT_INDEX",
    "OBS_INDEX",
    "as_planes",
    "frame_chunk",
    "frame_fields",
    "frame_planes",
    "is_packed",
    "pack",
    "served_fields",
    "unpack",
]


def is_packed(arrays: dict[str, Any]) -> bool:
    """Whether a chunk's arrays carry frames and indices rather than `obs` and `next_obs`."""
    return OBS_INDEX in arrays


def pack(arrays: dict[str, Any], planes: int = 1) -> dict[str, Any]:
    """`arrays` with `obs` and `next_obs` (uint8 [T, K, S x planes, H, W]) replaced by each frame (of `planes`
    planes, `frame_planes`) once and the indices."""
    obs, next_obs = arrays["obs"], arrays["next_obs"]
    planes = frame_planes(obs.shape[2:], planes)
    if planes > 1:  # [T, K, S, planes, H, W]: a frame is its planes together
        obs = obs.reshape(*obs.shape[:2], -1, planes, *obs.shape[3:])
        next_obs = next_obs.reshape(obs.shape)
    chunk = split(obs, next_obs)
    out = {k: v for k, v in arrays.items() if k not in ("obs", "next_obs")}
    per_chunk = dict(out.get(PER_CHUNK, {}))
    per_chunk[FRAMES] = chunk.frames
    out[PER_CHUNK] = per_chunk
    out[OBS_INDEX], out[NEXT_INDEX] = chunk.obs_index, chunk.next_index
    return out


def frame_chunk(arrays: dict[str, Any]) -> FrameChunk:
    """The packed chunk's frames and indices (checked by whoever received it: `check_fields`)."""
    return FrameChunk(arrays[PER_CHUNK][FRAMES], arrays[OBS_INDEX], arrays[NEXT_INDEX])


def unpack(arrays: dict[str, Any]) -> dict[str, Any]:
    """`pack` undone: `obs` and `next_obs` rebuilt from the frames, bit for bit (NumPy; the learner gathers on its
    device instead: algos/ppo/learner.py)."""
    chunk = frame_chunk(arrays)
    out = {k: v for k, v in arrays.items() if k not in (OBS_INDEX, NEXT_INDEX)}
    per_chunk = {k: v for k, v in out.pop(PER_CHUNK).items() if k != FRAMES}
    if per_chunk:
        out[PER_CHUNK] = per_chunk
    frame_ndim = chunk.frames.ndim - 1
    out["obs"], out["next_obs"] = as_planes(chunk.obs(), frame_ndim), as_planes(chunk.next_obs(), frame_ndim)
    return out
