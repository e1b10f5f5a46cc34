"""Pixel observations in a chunk as each frame once (surreal/frames.py), under the names the wire and the learner use.

An image observation is a uint8 array whose first axis is its planes: an Atari stack's 4 frames of 84x84, a camera
image's 3 colour planes. A chunk of them does not carry `obs` and `next_obs` ([T, K, S, H, W] each, every frame
eight times over for a 4-stack); `pack` replaces both with

    per_chunk/frames   uint8 [N, H, W]   each distinct plane once (`PER_CHUNK`: N is the chunk's own)
    obs_index          int32 [T, K, S]   obs[t, k] is frames[obs_index[t, k]]
    next_index         int32 [T, K, S]   next_obs[t, k] is frames[next_index[t, k]]

and `unpack` (or `stacks`, on the learner's device) gives the stacks back bit for bit. For an Atari stack that is
about one frame an env step; a camera image shares nothing with the previous one but is still carried once where
`obs` and `next_obs` held it twice. The fields (`frame_fields`) are what an algorithm's `chunk_fields` declares,
so the wire, the FIFO (`replay.layout`) and the learner refuse a chunk whose frames have another shape or dtype, or
whose indices point past its frames, like any other malformed chunk.
"""

from __future__ import annotations

from typing import Any

from surreal.frames import INDEX_DTYPE, UINT8, FrameChunk, split
from surreal.proto.wire import PER_CHUNK, Field, Fields

FRAMES = "frames"  # under PER_CHUNK
FRAMES_FIELD = f"{PER_CHUNK}/{FRAMES}"
OBS_INDEX, NEXT_INDEX = "obs_index", "next_index"


def frame_fields(obs_shape: tuple[int, ...]) -> Fields:
    """The fields that stand for `obs` and `next_obs` of image observations of `obs_shape` ((S, H, W) planes)."""
    planes, frame = obs_shape[0], tuple(obs_shape[1:])
    index = Field(INDEX_DTYPE, (planes,), 0, None, FRAMES_FIELD)
    return {FRAMES_FIELD: Field(UINT8, frame), OBS_INDEX: index, NEXT_INDEX: index}


def is_packed(arrays: dict[str, Any]) -> bool:
    """Whether a chunk's arrays carry frames and indices rather than `obs` and `next_obs`."""
    return OBS_INDEX in arrays


def pack(arrays: dict[str, Any]) -> dict[str, Any]:
    """`arrays` with `obs` and `next_obs` (uint8 [T, K, S, ...]) replaced by each frame once and the indices."""
    chunk = split(arrays["obs"], arrays["next_obs"])
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
    out["obs"], out["next_obs"] = chunk.obs(), chunk.next_obs()
    return out
