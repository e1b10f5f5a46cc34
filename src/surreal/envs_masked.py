"""MuJoCo tasks with their velocities masked: partially observed versions of Gymnasium's, registered as env ids.

    surreal run env=InvertedPendulumNoVel-v5 algo.recurrent=lstm

`<Task>NoVel-v5` is `<Task>-v5` whose observation keeps only the joint positions: these tasks' observations are
the positions followed by the `model.nv` joint velocities (clipped in Hopper's and Walker2d's), and the
velocities are cut off. The physics, rewards, terminations and time limits are the task's own. A policy that
sees one observation cannot tell how fast anything moves; one with memory can infer it from consecutive
positions. That is the classic test of a recurrent policy (the "-P" tasks of Ni et al. 2022, "Recurrent
Model-Free RL Can Be a Strong Baseline for Many POMDPs"; SURREAL-PPO's LSTM), docs/ppo.md#recurrent-policies.

Registered when `surreal.envs` is imported (every role, `surreal eval` and the Python API import it before they
make an env), so the ids work wherever a Gymnasium id does, `env.kwargs` included (they go to the task).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import load_env_creator

# The masked id -> the task it masks. Only tasks whose observation is exactly positions then velocities.
MASKED_TASKS = {
    "InvertedPendulumNoVel-v5": "InvertedPendulum-v5",
    "HalfCheetahNoVel-v5": "HalfCheetah-v5",
    "HopperNoVel-v5": "Hopper-v5",
    "Walker2dNoVel-v5": "Walker2d-v5",
}


class MaskVelocities(gym.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """Keeps the first `obs_dim - model.nv` entries of a MuJoCo task's observation: its joint positions."""

    def __init__(self, env: gym.Env[np.ndarray, Any]) -> None:
        super().__init__(env)
        box = env.observation_space
        assert isinstance(box, spaces.Box) and len(box.shape) == 1, box
        self.keep = int(box.shape[0]) - int(env.unwrapped.model.nv)  # type: ignore[attr-defined]  # a MujocoEnv
        if self.keep <= 0:
            raise ValueError(f"an observation of {box.shape[0]} entries holds no positions before the velocities")
        self.observation_space = spaces.Box(box.low[: self.keep], box.high[: self.keep], dtype=box.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[: self.keep]


def make_masked(task_entry_point: str, **kwargs: Any) -> gym.Env[np.ndarray, Any]:
    """The registered entry point: the task's own env class (gym.make adds the time limit and checks around it)."""
    env = load_env_creator(task_entry_point)(**kwargs)
    assert isinstance(env, gym.Env), env
    return MaskVelocities(env)


def register() -> None:
    """Register every `MASKED_TASKS` id (idempotent), with its task's time limit and metadata."""
    for masked, task in MASKED_TASKS.items():
        if masked in gym.registry:
            continue
        spec = gym.spec(task)
        assert isinstance(spec.entry_point, str), spec
        gym.register(
            id=masked,
            entry_point=f"{__name__}:make_masked",
            max_episode_steps=spec.max_episode_steps,
            reward_threshold=spec.reward_threshold,
            kwargs={"task_entry_point": spec.entry_point, **spec.kwargs},
        )
