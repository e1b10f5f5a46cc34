"""Which Gymnasium spaces an algorithm takes, checked against an env's spaces in one place.

Each algorithm's config declares the kinds it takes (`AlgoConfig.observation_spaces` / `.action_spaces`, names from
`SPACE_KINDS`, so the config layer needs no gymnasium). The launcher checks them against the env it builds once before
any role starts (run/preflight.py); an algorithm checks them again where it builds its networks, so a role given
an env it cannot take (a chart whose values skipped the launcher) says the same one line instead of a traceback.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from surreal.config.schema import ALGORITHMS, SPACE_KINDS, AlgoConfig
from surreal.errors import ConfigError

PIXELS_DOC = "docs/environments.md, Pixel observations"  # what works with pixels today, and what is coming


def space_kind(space: spaces.Space[Any]) -> str | None:
    """ "box" for a 1-D Box, "discrete" for a Discrete, "image" for a channels-first uint8 image (`is_channels_first`),
    None for anything else (channels-last images, Dict, MultiDiscrete...)."""
    if isinstance(space, spaces.Box) and len(space.shape) == 1:
        return "box"
    if isinstance(space, spaces.Discrete):
        return "discrete"
    if is_channels_first(space):
        return "image"
    return None


def is_channels_first(space: spaces.Space[Any]) -> bool:
    """A uint8 image (C, H, W) with fewer planes than rows or columns: an Atari stack (4, 84, 84), a camera's (3, 84,
    84). What a convolutional encoder takes; a channels-last image such as CarRacing's (96, 96, 3) is not one."""
    shape = tuple(space.shape or ())
    if not is_image(space) or len(shape) != 3:
        return False
    planes, height, width = shape
    return bool(planes < height and planes < width)


def is_image(space: spaces.Space[Any]) -> bool:
    """A uint8 Box of two or more dimensions: frames (an Atari stack, a camera's channels-first image)."""
    return isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) >= 2


def has_images(space: spaces.Space[Any]) -> bool:
    """An image, or a Dict holding one."""
    if isinstance(space, spaces.Dict):
        return any(has_images(sub) for sub in space.spaces.values())
    return is_image(space)


def describe(space: spaces.Space[Any]) -> str:
    """A space in a few characters: `Box(17,)`, `Discrete(2)`, `Box(96, 96, 3)`, `Box(4, 84, 84) uint8 images`,
    `Dict(pixels: Box(3, 84, 84) uint8 images, state: Box(60,))`; bounds left out."""
    if isinstance(space, spaces.Box):
        return f"Box{space.shape} uint8 images" if is_image(space) else f"Box{space.shape}"
    if isinstance(space, spaces.Discrete):
        return f"Discrete({space.n})" if space.start == 0 else f"Discrete({space.n}, start={space.start})"
    if isinstance(space, spaces.Dict):
        return f"Dict({', '.join(f'{key}: {describe(sub)}' for key, sub in space.spaces.items())})"
    return type(space).__name__


def _kinds(kinds: frozenset[str]) -> str:
    return " or ".join(SPACE_KINDS[k] for k in sorted(kinds))


def check_spaces(
    algo: AlgoConfig | type[AlgoConfig],
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    env_id: str = "the env",
) -> None:
    """Raise ConfigError, in one line naming the algorithms that would take it, unless `algo` takes both spaces."""
    name = algo.name
    for what, space, takes in (
        ("observations", observation_space, algo.observation_spaces),
        ("actions", action_space, algo.action_spaces),
    ):
        kind = space_kind(space)
        if kind in takes:
            continue
        attr = "observation_spaces" if what == "observations" else "action_spaces"
        others = sorted(n for n, cls in ALGORITHMS.items() if kind is not None and kind in getattr(cls, attr))
        hint = f"; {' and '.join(others)} take{'s' if len(others) == 1 else ''} them" if others else ""
        if not others and has_images(space):
            hint = f"; images are taken as one channels-first uint8 Box (C, H, W), not this ({PIXELS_DOC})"
        raise ConfigError(f"algo={name} takes {_kinds(takes)} {what}; {env_id}'s {what} are {describe(space)}{hint}")


def space_dims(
    algo: AlgoConfig, observation_space: spaces.Space[Any], action_space: spaces.Space[Any]
) -> tuple[int, int]:
    """(observation size, output size) after `check_spaces`: a 1-D Box's size (an image's planes), or one output per
    Discrete action."""
    check_spaces(algo, observation_space, action_space)
    outputs = int(action_space.n) if isinstance(action_space, spaces.Discrete) else int(action_space.shape[0])  # type: ignore[index]
    return int(observation_space.shape[0]), outputs  # type: ignore[index]  # a 1-D Box or an image
