"""robosuite camera observations (`env.kwargs.camera=agentview`): an upright uint8 image, channels first, beside or
instead of the state vector, rendered offscreen; a renderer that cannot start is one line before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from surreal import renderer
from surreal.config import ConfigError
from surreal.envs import check_env_id, make_vec_env

pytest.importorskip("robosuite", reason="the robosuite extra")

LIFT = "robosuite:Lift"
CAMERA = {"camera": "agentview", "horizon": 8}


def test_a_camera_rollout_gives_upright_uint8_images_channels_first_through_the_vector_env():
    envs = make_vec_env(LIFT, 1, seed=0, env_kwargs=CAMERA)
    assert envs.single_observation_space.shape == (3, 84, 84)
    assert envs.single_observation_space.dtype == np.uint8
    obs, _ = envs.reset(seed=[0])
    rng = np.random.default_rng(0)
    for step in range(8):
        obs, _, terminated, truncated, infos = envs.step(rng.uniform(-1, 1, (1, 7)))
        assert obs.shape == (1, 3, 84, 84) and obs.dtype == np.uint8
        assert not terminated[0] and truncated[0] == (step == 7), "the horizon is a time limit"
    final = infos["final_obs"][0]
    assert final.shape == (3, 84, 84) and final.std() > 10, "a rendered scene, not a blank frame"
    # Upright: MuJoCo's own renderer (rows top to bottom) of the same camera in the same state agrees with the image
    # far better than with the image upside down.
    import mujoco

    sim = envs.envs[0].unwrapped._env.sim  # type: ignore[attr-defined]
    envs.envs[0].unwrapped._env.sim.forward()  # type: ignore[attr-defined]
    with mujoco.Renderer(sim.model._model, 84, 84) as mj:
        mj.update_scene(sim.data._data, camera="agentview")
        reference = mj.render().transpose(2, 0, 1).astype(np.float64)
    image = envs.envs[0].unwrapped._observe(envs.envs[0].unwrapped._env._get_observations(force_update=True))  # type: ignore[attr-defined]
    upright = np.abs(image - reference).mean()
    flipped = np.abs(image[:, ::-1] - reference).mean()
    assert upright < flipped / 2, (upright, flipped)
    envs.close()


def test_the_camera_beside_the_state_is_a_dict():
    from surreal.envs_robosuite import RobosuiteEnv

    env = RobosuiteEnv(LIFT, camera_with_state=True, camera_size=32, **CAMERA)
    obs, _ = env.reset(seed=1)
    assert set(obs) == {"pixels", "state"} and obs["pixels"].shape == (3, 32, 32) and obs["state"].shape == (60,)
    assert env.observation_space.contains(obs)
    env.close()


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"camera": ""}, "env.kwargs.camera='' must name a camera"),
        ({"camera": "agentview", "camera_size": 4}, "env.kwargs.camera_size=4 must be an integer >= 8"),
        ({"camera": "agentview", "camera_names": "frontview"}, "env.kwargs.camera_names is set by env.kwargs.camera"),
        ({"camera": "agentview", "camera_with_state": "yes"}, "env.kwargs.camera_with_state='yes' must be true or"),
    ],
)
def test_bad_camera_settings_are_one_line(kwargs, says):
    with pytest.raises(ConfigError, match=says):
        check_env_id(LIFT, kwargs)


def test_a_renderer_that_cannot_start_is_named_in_one_line_before_anything_starts(tmp_path):
    """`surreal run` with no backend that starts: one problem line of the config check naming it, exit 2, no run
    folder (the check probes the renderer in a child process, before robosuite is imported)."""
    out = subprocess.run(
        [sys.executable, "-m", "surreal", "run", f"env={LIFT}", "env.kwargs.camera=agentview", "algo=sac"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "MUJOCO_GL": "no-such-backend", "SURREAL_RUNS_ROOT": str(tmp_path / "runs")},
        check=False,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = [line for line in out.stderr.splitlines() if "renderer" in line]
    assert line.startswith("  - env.kwargs.camera=agentview: no offscreen renderer starts (no-such-backend: "), line
    assert line.endswith("install Debian's libosmesa6 (make render-deps) or a GPU driver with EGL")
    assert not (tmp_path / "runs").exists()


def test_the_renderer_is_chosen_once_per_process(monkeypatch):
    calls = []
    real = renderer.subprocess.run
    monkeypatch.setattr(renderer, "_chosen", None)
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(renderer.subprocess, "run", lambda *a, **k: calls.append(a) or real(*a, **k))
    first = renderer.choose_renderer("test")
    assert first in renderer.RENDERERS and os.environ["MUJOCO_GL"] == os.environ["PYOPENGL_PLATFORM"] == first
    assert renderer.choose_renderer("test") == first and len(calls) == (1 if first == "egl" else 2)
