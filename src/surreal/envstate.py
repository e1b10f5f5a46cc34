"""An actor's environments mid-episode, saved and put back, so a resumed serial run steps on exactly as one
never stopped (run/serial.py).

Per environment of a `make_vec_env` vector env (Gymnasium ids only: SAME_STEP autoreset keeps no pending
reset in the vector env, so its sub-envs are the whole state):

- the physics: a MuJoCo env's full integration state (`mj_getState(mjSTATE_INTEGRATION)`: time, qpos, qvel,
  actuator activations, controls, applied forces and the constraint solver's warm start), not only the qpos
  and qvel of Gymnasium's `set_state`, which its own docstring says is not the whole state of every model; or
  a classic-control env's `state` array (Pendulum's also `last_u`);
- the env's own random generator (reset noise: the next episode's start);
- every wrapper's step count (`TimeLimit`'s `_elapsed_steps`: when the episode is truncated).

An env whose physics is neither (robosuite, Box2D) raises `EnvStateUnsupported` rather than resuming
inexactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import gymnasium as gym
import numpy as np


class EnvStateUnsupported(TypeError):
    """The env keeps physics this module cannot save."""


class Physics(TypedDict, total=False):
    """A MuJoCo env's integration state, or a classic-control env's `state` (and Pendulum's `last_u`)."""

    mujoco: np.ndarray
    state: np.ndarray
    last_u: np.ndarray


class EnvState(TypedDict):
    """One environment's state: its physics, its generator's (`bit_generator.state`), each wrapper's step count."""

    physics: Physics
    rng: Mapping[str, Any]
    elapsed_steps: list[int | None]


def _physics(env: gym.Env) -> Physics:
    model, data = getattr(env, "model", None), getattr(env, "data", None)
    if model is not None and data is not None and type(model).__module__.startswith("mujoco"):
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(model, spec), np.float64)
        mujoco.mj_getState(model, data, state, spec)
        return {"mujoco": state}
    if isinstance(getattr(env, "state", None), np.ndarray | tuple | list):
        physics: Physics = {"state": np.array(env.state)}  # type: ignore[attr-defined]
        if getattr(env, "last_u", None) is not None:
            physics["last_u"] = np.array(env.last_u)  # type: ignore[attr-defined]
        return physics
    raise EnvStateUnsupported(f"{env.spec.id if env.spec else type(env).__name__}: its physics cannot be saved")


def _load_physics(env: gym.Env, physics: Physics) -> None:
    if "mujoco" in physics:
        import mujoco

        model, data = env.model, env.data  # type: ignore[attr-defined]
        # No mj_forward after it: the next mj_step computes everything from this state, as it would have.
        mujoco.mj_setState(model, data, np.asarray(physics["mujoco"], np.float64), mujoco.mjtState.mjSTATE_INTEGRATION)
        return
    env.state = np.array(physics["state"])  # type: ignore[attr-defined]
    if "last_u" in physics:
        env.last_u = np.array(physics["last_u"])  # type: ignore[attr-defined]


def _wrappers(env: gym.Env) -> list[gym.Env]:
    chain = [env]
    while isinstance(chain[-1], gym.Wrapper):
        chain.append(chain[-1].env)
    return chain


def env_state(env: gym.Env) -> EnvState:
    """One environment's state (the wrapper chain `gym.make` builds, down to the env itself)."""
    chain = _wrappers(env)
    inner = chain[-1]
    return {
        "physics": _physics(inner),
        "rng": inner.np_random.bit_generator.state,
        "elapsed_steps": [getattr(w, "_elapsed_steps", None) for w in chain],
    }


def load_env_state(env: gym.Env, state: EnvState) -> None:
    chain = _wrappers(env)
    inner = chain[-1]
    _load_physics(inner, state["physics"])
    inner.np_random.bit_generator.state = state["rng"]
    for wrapper, steps in zip(chain, state["elapsed_steps"], strict=True):
        if steps is not None:
            wrapper._elapsed_steps = steps  # type: ignore[attr-defined]


def vec_env_state(envs: gym.vector.VectorEnv) -> list[EnvState]:
    """Every sub-env's state, in order (a `SyncVectorEnv` with SAME_STEP autoreset, as `make_vec_env` builds)."""
    if not isinstance(envs, gym.vector.SyncVectorEnv) or envs.autoreset_mode != gym.vector.AutoresetMode.SAME_STEP:
        raise EnvStateUnsupported("only a SyncVectorEnv with SAME_STEP autoreset holds all its state in its envs")
    return [env_state(env) for env in envs.envs]


def load_vec_env_state(envs: gym.vector.VectorEnv, states: list[EnvState]) -> None:
    sub_envs = envs.envs  # type: ignore[attr-defined]
    if len(states) != len(sub_envs):
        raise ValueError(f"state of {len(states)} envs for a vector env of {len(sub_envs)}")
    for env, state in zip(sub_envs, states, strict=True):
        load_env_state(env, state)
