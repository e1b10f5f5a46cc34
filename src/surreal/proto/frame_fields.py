"""The fields a chunk of image observations carries instead of `obs` and `next_obs` (runtime/frame_chunks.py packs
them): their names and declared shapes, for the wire, the replays (a FIFO's layout, replay/frame_storage.py) and the
learners, none of which packs anything."""

from __future__ import annotations

from surreal.frames import INDEX_DTYPE, UINT8
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
