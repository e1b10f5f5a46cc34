"""`surreal eval --video DIR`: MP4s of the evaluated episodes, for every env family the project trains.

    classic control (Pendulum-v1, CartPole-v1, ...)   pygame draws the frames            the `video` extra installs it
    MuJoCo (HalfCheetah-v5, ...), robosuite tasks      MuJoCo renders offscreen: EGL, else OSMesa (system libraries)
    every family                                       moviepy (its imageio-ffmpeg) writes the MP4s: the `video` extra

What a recording needs is checked before anything is evaluated or written, each missing piece named in one line
(`VideoError`; `surreal eval` exits 2 with it). The renderer must be chosen before MuJoCo is imported: its backend is
fixed at import.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from surreal.errors import install_extra

INSTALL = install_extra("video")


class VideoError(Exception):
    """What a recording lacks, in one line."""


def check_recorder() -> None:
    """moviepy, which Gymnasium's RecordVideo writes MP4s with."""
    try:
        importlib.import_module("moviepy")
    except ImportError:
        raise VideoError(f"--video: writing MP4s needs moviepy: {INSTALL}") from None


def needs_mujoco_gl(env_id: str) -> bool:
    """Whether `env_id` renders through MuJoCo (a robosuite task, a Gymnasium MuJoCo task, a velocity-masked one),
    read from its registration without importing it. An id not known here counts as one: its renderer is checked."""
    from surreal import envs_robosuite

    if envs_robosuite.is_robosuite_id(env_id):
        return True
    import gymnasium as gym

    from surreal.envs import env_module  # and the velocity-masked MuJoCo ids, registered on import

    if env_module(env_id) is not None:  # a `module:Name` id: its registration is in a module not imported here
        return True
    try:
        entry = gym.spec(env_id).entry_point
    except Exception:  # noqa: BLE001 - a `module:Name` id or a typo: `surreal eval` says which when it makes the env
        return True
    module = entry if isinstance(entry, str) else getattr(entry, "__module__", "")
    return "mujoco" in module or "envs_masked" in module


def choose_renderer() -> str:
    """Set MUJOCO_GL to an offscreen backend that starts on this machine (surreal/renderer.py, which robosuite's
    cameras share); VideoError naming what each said when none starts."""
    from surreal.renderer import RendererUnavailable
    from surreal.renderer import choose_renderer as choose

    try:
        return choose("--video")
    except RendererUnavailable as exc:
        raise VideoError(str(exc)) from None


def check_frames(env_id: str, env_kwargs: dict[str, Any], seed: int) -> tuple[int, ...]:
    """One frame of `env_id` made as the recording makes it (`render_mode="rgb_array"`) and reset with `seed`: its
    shape, or VideoError saying why there is none (pygame not installed: the `video` extra; the env's own error)."""
    from gymnasium.error import DependencyNotInstalled

    from surreal.envs import make_env

    # pygame draws into an off-screen surface: its import greets on stdout, and SDL looking for a display says
    # "XDG_RUNTIME_DIR is invalid" on stderr of a headless box, unless told there is none to look for.
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    env = None
    try:
        env = make_env(env_id, seed, {**env_kwargs, "render_mode": "rgb_array"})
        frame = env.render()
    except DependencyNotInstalled as exc:
        missing = "pygame" if "pygame" in str(exc) else str(exc).splitlines()[0]
        raise VideoError(f"--video: {env_id} draws its frames with {missing}, not installed: {INSTALL}") from None
    except Exception as exc:  # noqa: BLE001 - whatever the env's renderer raises: one line
        detail = " ".join(str(exc).split())[:300]
        raise VideoError(f"--video: {env_id} renders no frames here ({type(exc).__name__}: {detail})") from None
    finally:
        if env is not None:
            env.close()
    shape = getattr(frame, "shape", None)
    if shape is None or len(shape) != 3 or shape[2] != 3:
        raise VideoError(f"--video: {env_id} gives no RGB frame to record (render() returned {type(frame).__name__})")
    return tuple(shape)


def video_wrapper(folder: Path) -> Any:
    """`evaluate`'s env wrapper that records env i's counted episodes as `env<i>-episode-<k>.mp4` (k from 1) in
    `folder`. RecordVideo numbers episodes by resets: `make_vec_env` resets each env once as it builds it and
    `evaluate` again with the evaluation's seeds, so the evaluation's episodes are 1 to its quota (episode 0 is
    the single frame between the two resets, not recorded); the episode after the quota, which the vector env
    starts by itself and the evaluation does not count, is not recorded either."""
    from gymnasium.wrappers import RecordVideo

    software = os.environ.get("MUJOCO_GL") == "osmesa"

    def wrap(env: Any, index: int, episodes: int) -> Any:
        model = getattr(env.unwrapped, "model", None)
        if software and model is not None and hasattr(model, "vis"):
            # CPU rasterizing: MuJoCo's 4096-pixel shadow map and 4x multisampling cost a HalfCheetah frame about
            # 450 ms on the shared 2-core box, a 1024 map and no multisampling about 70 ms. Frames only: the
            # physics never reads these.
            model.vis.quality.shadowsize, model.vis.quality.offsamples = 1024, 0
        return RecordVideo(
            env,
            str(folder),
            episode_trigger=lambda episode: 1 <= episode <= episodes,
            name_prefix=f"env{index}",
            disable_logger=True,
        )

    return wrap


def video_files(folder: Path, episodes: int) -> list[Path]:
    """The files `video_wrapper` writes for an evaluation of `episodes`, in episode order."""
    from surreal.runtime.rollout import eval_quotas

    quotas = eval_quotas(episodes)
    return [
        folder / f"env{i}-episode-{k}.mp4" for k in range(1, max(quotas) + 1) for i, q in enumerate(quotas) if k <= q
    ]
