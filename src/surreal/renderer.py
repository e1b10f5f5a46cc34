"""Offscreen OpenGL for MuJoCo: which backend starts on this machine, for `surreal eval --video` and robosuite cameras.

MuJoCo (and robosuite's own GL contexts) fix their backend at import, from `MUJOCO_GL`, and a backend that fails can
leave the import unusable or crash the process, so each candidate is tried in a child process, once per process: the
one `MUJOCO_GL` names, else EGL (a GPU driver's, or Mesa's), else OSMesa (Mesa's software rasterizer). The chosen one
is set in `MUJOCO_GL` and `PYOPENGL_PLATFORM`, which the roles a launcher starts inherit. When none starts, the
error names what each said, in one line, before any role starts (run/preflight.py builds the env once).
"""

from __future__ import annotations

import os
import subprocess
import sys

from surreal.errors import ConfigError

RENDERERS = ("egl", "osmesa")  # MuJoCo's offscreen OpenGL backends, tried in this order unless MUJOCO_GL says one
RENDER_PROBE = "import mujoco; c = mujoco.GLContext(16, 16); c.make_current(); c.free()"
RENDER_PROBE_TIMEOUT_S = 120.0
INSTALL_HINT = "install Debian's libosmesa6 (make render-deps) or a GPU driver with EGL"

_chosen: str | None = None


class RendererUnavailable(ConfigError):
    """No offscreen OpenGL backend starts here: one line naming each backend's failure and what to install."""


def choose_renderer(purpose: str) -> str:
    """Set MUJOCO_GL (and PyOpenGL's platform) to an offscreen backend that starts on this machine and return it;
    RendererUnavailable, `purpose` first ("--video", "env.kwargs.camera=agentview"), when none does."""
    global _chosen
    named = os.environ.get("MUJOCO_GL")
    if _chosen is not None and named == _chosen:
        return _chosen
    failures = []
    for backend in (named,) if named else RENDERERS:
        env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
        try:
            probe = subprocess.run(
                [sys.executable, "-c", RENDER_PROBE], env=env, capture_output=True, text=True,
                timeout=RENDER_PROBE_TIMEOUT_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            failures.append(f"{backend}: no answer in {RENDER_PROBE_TIMEOUT_S:.0f} s")
            continue
        if probe.returncode == 0:
            os.environ["MUJOCO_GL"] = os.environ["PYOPENGL_PLATFORM"] = _chosen = backend
            return backend
        lines = [line for line in probe.stderr.strip().splitlines() if line.strip()]
        failures.append(f"{backend}: {lines[-1] if lines else f'exit {probe.returncode}'}")
    raise RendererUnavailable(f"{purpose}: no offscreen renderer starts ({'; '.join(failures)}); {INSTALL_HINT}")
