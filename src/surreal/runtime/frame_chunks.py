"""Pixel observations in a chunk as each frame once (surreal/frames.py), under the names the wire and the learner use.

An image observation is a uint8 array whose first axis is its planes: an Atari stack's 4 frames of 84x84, a camera
image's 3 colour planes. A chunk of them does not carry `obs` and `next_obs` ([T, K, S, H, W] each, every frame
eight times over for a 4-stack); `pack` replaces both with

    per_chunk/frames   uint8 [N, H, W]   each distinct plane once (`PER_CHUNK`: N is the chunk's own)
    obs_index          int32 [T, K, S]   obs[t, k] is frames[obs_index[t, k]]
    next_index         int32 [T, K, S]   next_obs[t, k] is frames[next_index[t, k]]

(a stack of RGB renders, `envs_pixels.py`, is S frames of 3 planes: `frames` is then [N, 3, H, W], `frame_planes`),

and `unpack` (or `stacks`, on the learner's device) gives the stacks back bit for bit. For an Atari stack that is
about one frame an env step; a camera image shares nothing with the previous one but is still carried once where
`obs` and `next_obs` held it twice. The fields (`frame_fields`) are what an algorithm's `chunk_fields` declares,
so the wire, the FIFO (`replay.layout`) and the learner refuse a chunk whose frames have another shape or dtype, or
whose indices point past its frames, like any other malformed chunk.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from surreal.frames import INDEX_DTYPE, UINT8, FrameChunk, split
from surreal.proto.wire import PER_CHUNK, Field, Fields

FRAMES = "frames"  # under PER_CHUNK
FRAMES_FIELD = f"{PER_CHUNK}/{FRAMES}"
OBS_INDEX, NEXT_INDEX = "obs_index", "next_index"


def frame_planes(obs_shape: tuple[int, ...], planes: int) -> int:
    """The planes of one frame: `planes` (3 for a stack of RGB renders) where it divides the observation's, else 1."""
    return planes if planes >= 1 and obs_shape[0] % planes == 0 else 1


def frame_fields(obs_shape: tuple[int, ...], planes: int = 1) -> Fields:
    """The fields that stand for `obs` and `next_obs` of image observations of `obs_shape` ((S x planes, H, W)):
    frames of one plane (an Atari stack's) or of `planes` (a stack of RGB renders: `frame_planes`)."""
    planes = frame_planes(obs_shape, planes)
    stack = obs_shape[0] // planes
    frame = tuple(obs_shape[1:]) if planes == 1 else (planes, *obs_shape[1:])
    index = Field(INDEX_DTYPE, (stack,), 0, None, FRAMES_FIELD)
    return {FRAMES_FIELD: Field(UINT8, frame), OBS_INDEX: index, NEXT_INDEX: index}


def served_fields(fields: Fields) -> Fields:
    """What a transition replay serves for chunks of `fields`: frames and indices give back `obs` and `next_obs`
    (uint8 stacks, replay/frame_storage.py rebuilds them); other fields as they are."""
    if FRAMES_FIELD not in fields:
        return fields
    frame, stack = fields[FRAMES_FIELD].shape, fields[OBS_INDEX].shape[0]
    planes = frame[0] * stack if len(frame) == 3 else stack
    image = Field(UINT8, (planes, *frame[-2:]))
    out = {k: f for k, f in fields.items() if k not in (FRAMES_FIELD, OBS_INDEX, NEXT_INDEX)}
    return {"obs": image, **out, "next_obs": image}


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


def as_planes(stacks: np.ndarray, frame_ndim: int) -> np.ndarray:
    """Stacks of frames of `frame_ndim` dimensions as the env's planes: [..., S, planes, H, W] -> [..., S x planes, H,
    W]; stacks of one-plane frames ([..., S, H, W]) as they are."""
    return stacks.reshape(*stacks.shape[:-4], -1, *stacks.shape[-2:]) if frame_ndim == 3 else stacks
