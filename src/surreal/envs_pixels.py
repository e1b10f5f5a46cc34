"""A Gymnasium MuJoCo task seen through its camera (`env.kwargs.pixels=true`), the way DrQ learns control from pixels.

`env=InvertedPendulum-v5 env.kwargs.pixels=true` keeps the task's dynamics, reward and time limit and replaces its
state vector with what its default camera sees: each agent step is `action_repeat` simulator steps of the same action
(rewards summed, as DrQ and the DeepMind Control pixel benchmarks do), then an offscreen render of `pixel_size` x
`pixel_size` RGB, channels first, and the observation is the last `frame_stack` renders: `Box(0, 255, (3 x stack,
size, size), uint8)`, the planes of the oldest render first. A reset's stack is its first render repeated (as
Atari's, `envs_atari.py`). The defaults are DrQ's (Kostrikov et al. 2020, https://arxiv.org/abs/2004.13649): 84 x 84,
3 frames; the action repeat is 2 (DrQ uses 8 for cartpole, 2 for finger, 4 for most; InvertedPendulum's 0.04 s
control step is already cartpole's 0.01 s x 4).

These kwargs are the adapter's (`ADAPTER_KWARGS`) and never reach `gym.make`; every other kwarg does. The renderer is
chosen before the env is built (renderer.py: EGL, else OSMesa), so a machine with neither says so in one line at start.
The episode limit in agent steps is the task's over the action repeat, rounded up.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from surreal.errors import ConfigError

PIXELS = "pixels"
ADAPTER_KWARGS = {PIXELS, "pixel_size", "frame_stack", "action_repeat"}
DEFAULTS = {"pixel_size": 84, "frame_stack": 3, "action_repeat": 2}
CHANNELS = 3  # RGB


def wants_pixels(env_kwargs: dict[str, Any] | None) -> bool:
    """Whether the config asks for the task's camera instead of its state (`env.kwargs.pixels=true`)."""
    return bool((env_kwargs or {}).get(PIXELS, False))


def settings(env_kwargs: dict[str, Any] | None) -> tuple[dict[str, int], dict[str, Any]]:
    """(the adapter's settings, the kwargs for `gym.make`); ConfigError, one line, for a setting of the wrong kind."""
    kwargs = dict(env_kwargs or {})
    if not isinstance(kwargs.pop(PIXELS, False), bool):
        raise ConfigError(f"env.kwargs.pixels={env_kwargs[PIXELS]!r} must be true or false")  # type: ignore[index]
    ours = {key: kwargs.pop(key, default) for key, default in DEFAULTS.items()}
    for key, value in ours.items():
        least = 8 if key == "pixel_size" else 1
        if type(value) is not int or value < least:
            raise ConfigError(f"env.kwargs.{key}={value!r} must be an integer >= {least}")
    for taken in ("render_mode", "width", "height"):
        if taken in kwargs:
            raise ConfigError(f"env.kwargs.{taken} is set by env.kwargs.pixels: leave it out")
    return ours, kwargs


def check(env_id: str, env_kwargs: dict[str, Any] | None) -> None:
    """ConfigError, one line, unless `env_id` is a MuJoCo task Gymnasium renders and the settings are sound; picks
    the renderer (one line naming each backend's failure when none starts)."""
    from surreal.renderer import choose_renderer

    settings(env_kwargs)
    if env_id not in gym.envs.registry:
        raise ConfigError(f"env.kwargs.pixels=true: {env_id!r} is not a registered Gymnasium environment")
    entry = str(gym.spec(env_id).entry_point)
    if "gymnasium.envs.mujoco" not in entry:
        raise ConfigError(f"env.kwargs.pixels=true renders Gymnasium's MuJoCo tasks; {env_id!r} is not one")
    choose_renderer("env.kwargs.pixels=true")


def max_episode_steps(env_id: str, env_kwargs: dict[str, Any] | None) -> int | None:
    """The task's time limit in agent steps: its simulator steps over the action repeat, rounded up."""
    ours, _ = settings(env_kwargs)
    limit = gym.spec(env_id).max_episode_steps
    return None if limit is None else math.ceil(limit / ours["action_repeat"])


class PixelEnv(gym.Env[np.ndarray, np.ndarray]):
    """The task with its camera's last `frame_stack` renders as the observation (module docstring)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 25}

    def __init__(self, env_id: str, render_mode: str | None = None, **env_kwargs: Any) -> None:
        from surreal.renderer import choose_renderer

        ours, kwargs = settings(env_kwargs)
        choose_renderer("env.kwargs.pixels=true")
        size = ours["pixel_size"]
        self.stack, self.repeat = ours["frame_stack"], ours["action_repeat"]
        # The inner env's own time limit would cut an action repeat short; this one counts agent steps instead.
        self._env = gym.make(env_id, render_mode="rgb_array", width=size, height=size, **kwargs)
        self.limit = max_episode_steps(env_id, env_kwargs)
        self._env = self._env.unwrapped if self.limit is not None else self._env
        self.render_mode = render_mode
        self.action_space = self._env.action_space
        shape = (CHANNELS * self.stack, size, size)
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.frames: deque[np.ndarray] = deque(maxlen=self.stack)
        self.steps = 0

    @property
    def task(self) -> gym.Env:
        """The MuJoCo task itself, unwrapped: its simulator state, which `frame` renders."""
        return self._env.unwrapped

    def frame(self) -> np.ndarray:
        """The camera's image now, channels first."""
        image = self._env.render()
        assert image is not None
        return np.ascontiguousarray(np.asarray(image, np.uint8).transpose(2, 0, 1))

    def _observe(self) -> np.ndarray:
        return np.concatenate(list(self.frames))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        _, info = self._env.reset(seed=seed, options=options)
        frame = self.frame()
        self.frames.extend([frame] * self.stack)
        self.steps = 0
        return self._observe(), info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        total, terminated, truncated = 0.0, False, False
        info: dict[str, Any] = {}
        for _ in range(self.repeat):
            _, reward, terminated, truncated, info = self._env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        self.steps += 1
        self.frames.append(self.frame())
        truncated = bool(truncated) or (self.limit is not None and self.steps >= self.limit and not terminated)
        return self._observe(), total, bool(terminated), truncated, info

    def render(self) -> np.ndarray | None:
        """The camera's latest image, height x width x RGB (what `surreal eval --video` records)."""
        return None if self.render_mode != "rgb_array" else np.ascontiguousarray(self.frames[-1].transpose(1, 2, 0))

    def close(self) -> None:
        self._env.close()
