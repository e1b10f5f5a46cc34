"""robosuite tasks (`env.id=robosuite:<Task>`, e.g. `robosuite:Lift`) behind the Gymnasium API the actors use.

One adapter, `RobosuiteEnv`, so actors, serial mode, evaluation and the benchmarks step a robosuite task exactly
as they step a Gymnasium id (`surreal.envs` dispatches on the `robosuite:` prefix). robosuite is imported only
when such an id is used: it is an optional extra (`pip install '.[robosuite]'` in a checkout) and slow to import.

What the adapter promises:

- **Observation**: the low-dimensional modality vectors robosuite builds (`<modality>-state` keys:
  `object-state`, `robot0_proprio-state`, `robot1_proprio-state`, ...) concatenated in sorted key order, as
  float32 in a `Box(-inf, inf)`. For Lift with one Panda: `object-state` (10: cube position and quaternion,
  gripper-to-cube vector) then `robot0_proprio-state` (50: joint positions, their cos/sin, velocities,
  end-effector position and quaternion, gripper joints); 60 in all.
- **Camera observation** (`env.kwargs.camera: agentview`, an adapter kwarg): the named camera's image instead,
  rendered offscreen at `camera_size` x `camera_size` (84), RGB, uint8, channels first and upright:
  `Box(0, 255, (3, 84, 84), uint8)`, the layout a convolutional encoder takes (as an Atari stack, `envs_atari.py`).
  With `camera_with_state: true` the observation is `Dict(pixels=that image, state=the vector above)`: the state
  beside the image. Rendering needs an offscreen OpenGL backend (EGL or OSMesa, surreal/renderer.py); one that
  cannot start is one ConfigError at the env check, before robosuite is imported or any role starts.
- **Action**: a `Box` with the controller's bounds (`env.action_spec`), float32.
- **Episode end**: robosuite tasks have no terminal states; an episode ends at `horizon` steps, which is a time
  limit, so it is reported as `truncated` (never `terminated`) and the learner bootstraps through it.
- **Success**: `info["is_success"]` on every step (the task's `_check_success()`), the Gymnasium-Robotics
  convention the rollouts count (docs/architecture.md, "Episode success").
- **Seeding**: `reset(seed=s)` reseeds robosuite's generator in place (the placement sampler and the robots'
  initial-joint noise draw from it), so the same seed gives the same initial state and, MuJoCo being
  deterministic on one machine, the same episode for the same actions. Unseeded resets continue that stream.
  Not covered: bit-equality across machines or MuJoCo builds.

- **Frames**: with `render_mode="rgb_array"` (what `surreal eval --video` asks for) robosuite's offscreen renderer
  is on and `render()` returns the `frontview` camera's image, 480 x 480 RGB (Gymnasium's MuJoCo size), upright;
  MuJoCo draws it through the backend MUJOCO_GL names (EGL or OSMesa: commands/video.py chooses). The observation
  stays the low-dimensional vector.

Defaults (`DEFAULT_KWARGS`, overridden by `env.kwargs`) are robosuite's benchmark settings: Panda, no renderer
and no cameras (unless `camera` is given), dense (shaped) reward, 20 Hz control, a 500-step horizon, plus
`hard_reset=False` (robosuite otherwise rebuilds the whole MuJoCo model at every reset: 0.2 s, against 2 ms).
`env.kwargs` may also name `controller`: a composite-controller name or JSON file given to robosuite's
`load_composite_controller_config` (instead of a `controller_configs` dict).
"""

from __future__ import annotations

import difflib
import inspect
import logging
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np

from surreal.errors import ConfigError, install_extra
from surreal.renderer import choose_renderer

PREFIX = "robosuite:"
DEFAULT_KWARGS: dict[str, Any] = {
    "robots": "Panda",
    "has_renderer": False,
    "has_offscreen_renderer": False,
    "use_camera_obs": False,
    "reward_shaping": True,
    "control_freq": 20,
    "horizon": 500,
    "hard_reset": False,
}
# Not settable through env.kwargs (nor is ignore_done=true, which would never end an episode).
RESERVED_KWARGS = {"seed": "the experiment's seed seeds each env", "env_name": "it is the task in env.id"}
ADAPTER_KWARGS = {"controller", "camera", "camera_size", "camera_with_state"}  # read here, not passed to robosuite
CAMERA_KWARGS = ("use_camera_obs", "camera_names", "camera_heights", "camera_widths", "camera_depths")  # set by camera
DEFAULT_CAMERA_SIZE = 84
LOW_DIM_SUFFIX = "-state"
RENDER_CAMERA = "frontview"  # the camera `render()` draws: the task seen from the front, robot and object in view
RENDER_SIZE = 480  # frames are RENDER_SIZE x RENDER_SIZE
_LOGGER = "robosuite_logs"  # robosuite's own logger


class _Quiet(logging.Filter):
    """robosuite logs setup advice at import (private macros, optional robot models, IK for GR1) and an INFO line
    at every env it makes; an actor's log needs neither. Errors and, after the import, warnings still pass."""

    level = logging.ERROR

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level


def is_robosuite_id(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def task_name(env_id: str) -> str:
    return env_id[len(PREFIX) :]


def import_robosuite() -> ModuleType:
    """robosuite, imported quietly; ConfigError (with the install line) when the extra is missing."""
    logger = logging.getLogger(_LOGGER)
    quiet = next((f for f in logger.filters if isinstance(f, _Quiet)), None)
    if quiet is None:
        quiet = _Quiet()
        logger.addFilter(quiet)
    try:
        import robosuite
    except ImportError as exc:
        raise ConfigError(f"robosuite tasks need the extra: {install_extra('robosuite')} ({exc})") from None
    quiet.level = logging.WARNING
    return robosuite


def _env_class(env_id: str) -> type:
    """The task's environment class from robosuite's registry; ConfigError with the nearest names otherwise."""
    import_robosuite()
    from robosuite.environments.base import REGISTERED_ENVS

    name = task_name(env_id)
    if name in REGISTERED_ENVS:
        return REGISTERED_ENVS[name]
    near = difflib.get_close_matches(name, list(REGISTERED_ENVS), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(PREFIX + n) for n in near)}?" if near else ""
    raise ConfigError(f"env.id={env_id!r} is not a robosuite task{hint} (tasks: {', '.join(sorted(REGISTERED_ENVS))})")


def check(env_id: str, env_kwargs: dict[str, Any] | None) -> None:
    """Raise ConfigError unless `env_id` names a robosuite task and every `env.kwargs` key is one of its
    constructor's parameters (nearest names suggested), before any process starts. With a camera: its settings, and
    an offscreen renderer that starts here (chosen before robosuite's import fixes its backend)."""
    kwargs = env_kwargs or {}
    camera = kwargs.get("camera")
    if camera is not None:
        check_camera(kwargs)
        choose_renderer(f"env.kwargs.camera={camera}")
    accepted = set(inspect.signature(_env_class(env_id)).parameters)
    problems = []
    for key, value in kwargs.items():
        if key in RESERVED_KWARGS:
            problems.append(f"env.kwargs.{key} cannot be set: {RESERVED_KWARGS[key]}")
        elif key == "ignore_done" and value:
            problems.append("env.kwargs.ignore_done=true would never end an episode: set env.kwargs.horizon instead")
        elif key not in accepted | ADAPTER_KWARGS:
            near = difflib.get_close_matches(key, sorted(accepted | ADAPTER_KWARGS), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            problems.append(f"env.kwargs.{key} is not a parameter of {env_id}{hint}")
    if "controller" in kwargs and "controller_configs" in kwargs:
        problems.append("env.kwargs: give controller or controller_configs, not both")
    if problems:
        raise ConfigError("; ".join(problems))


def check_camera(kwargs: dict[str, Any]) -> None:
    """ConfigError, one line, unless the camera settings are a camera name, a size and a bool, and robosuite's own
    camera parameters (which `camera` sets) are left alone."""
    if not isinstance(kwargs["camera"], str) or not kwargs["camera"]:
        raise ConfigError(f"env.kwargs.camera={kwargs['camera']!r} must name a camera (agentview, frontview, ...)")
    size = kwargs.get("camera_size", DEFAULT_CAMERA_SIZE)
    if isinstance(size, bool) or not isinstance(size, int) or size < 8:
        raise ConfigError(f"env.kwargs.camera_size={size!r} must be an integer >= 8")
    if not isinstance(kwargs.get("camera_with_state", False), bool):
        raise ConfigError(f"env.kwargs.camera_with_state={kwargs['camera_with_state']!r} must be true or false")
    taken = [key for key in CAMERA_KWARGS if key in kwargs]
    if taken:
        raise ConfigError(f"env.kwargs.{taken[0]} is set by env.kwargs.camera: leave it out")


def horizon(env_kwargs: dict[str, Any] | None) -> int:
    """Steps in one episode: every episode of a robosuite task is exactly this long."""
    return int({**DEFAULT_KWARGS, **(env_kwargs or {})}["horizon"])


class RobosuiteEnv(gym.Env[Any, np.ndarray]):
    """One robosuite task as a Gymnasium env (module docstring: observation, action, episode end, success)."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}

    def __init__(self, env_id: str, render_mode: str | None = None, **env_kwargs: Any) -> None:
        check(env_id, env_kwargs)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: a robosuite task renders rgb_array frames only")
        suite = import_robosuite()
        kwargs = {**DEFAULT_KWARGS, **env_kwargs}
        self.render_mode = render_mode
        if render_mode == "rgb_array":
            kwargs["has_offscreen_renderer"] = True
        # RecordVideo writes frames at this rate: one per control step.
        self.metadata = {**self.metadata, "render_fps": int(kwargs["control_freq"])}
        self.camera: str | None = kwargs.pop("camera", None)
        size = int(kwargs.pop("camera_size", DEFAULT_CAMERA_SIZE))
        with_state = bool(kwargs.pop("camera_with_state", False))
        if self.camera is not None:
            kwargs.update(
                has_offscreen_renderer=True, use_camera_obs=True, camera_names=self.camera, camera_heights=size,
                camera_widths=size, camera_depths=False,
            )  # fmt: skip
        controller = kwargs.pop("controller", None)
        if controller is not None:
            kwargs["controller_configs"] = suite.load_composite_controller_config(
                controller=controller, robot=kwargs["robots"] if isinstance(kwargs["robots"], str) else None
            )
        self.env_id = env_id
        self._env = suite.make(task_name(env_id), **kwargs)
        first = self._env.reset()
        self.obs_keys = sorted(k for k in first if k.endswith(LOW_DIM_SUFFIX))
        state = gym.spaces.Box(-np.inf, np.inf, self._flat(first).shape, np.float32)
        pixels = gym.spaces.Box(0, 255, (3, size, size), np.uint8)
        self.observation_space: gym.Space[Any]
        if self.camera is None:
            self.observation_space = state
        elif with_state:
            self.observation_space = gym.spaces.Dict({"pixels": pixels, "state": state})
        else:
            self.observation_space = pixels
        low, high = self._env.action_spec
        self.action_space = gym.spaces.Box(np.asarray(low, np.float32), np.asarray(high, np.float32))

    def _flat(self, obs: dict[str, Any]) -> np.ndarray:
        return np.concatenate([np.asarray(obs[k], np.float32).ravel() for k in self.obs_keys])

    def _observe(self, obs: dict[str, Any]) -> Any:
        """The observation the space says: the state vector, the camera's image, or both."""
        if self.camera is None:
            return self._flat(obs)
        # robosuite renders in OpenGL's convention (the first row is the bottom): flipped upright, channels first.
        image = np.ascontiguousarray(obs[f"{self.camera}_image"][::-1].transpose(2, 0, 1))
        if isinstance(self.observation_space, gym.spaces.Dict):
            return {"pixels": image, "state": self._flat(obs)}
        return image

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:  # in place: robosuite's placement sampler holds this very generator
            self._env.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state
        return self._observe(self._env.reset()), {}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, done, info = self._env.step(np.asarray(action, np.float64))
        success = bool(self._env._check_success())
        return self._observe(obs), float(reward), False, bool(done), {**info, "is_success": success}

    def render(self) -> np.ndarray | None:
        """The `frontview` camera's frame (module docstring), or None without `render_mode="rgb_array"`."""
        if self.render_mode != "rgb_array":
            return None
        frame = self._env.sim.render(width=RENDER_SIZE, height=RENDER_SIZE, camera_name=RENDER_CAMERA)
        return np.ascontiguousarray(frame[::-1])  # OpenGL's rows run bottom to top

    def close(self) -> None:
        self._env.close()
