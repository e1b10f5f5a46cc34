"""Stepping K environments with a policy and cutting the experience into chunks.

Used by the actor role (which ships chunks to replay) and by the serial mode (which hands them straight
to the learner), so both produce exactly the same data. A chunk's arrays are freshly allocated: the
actor sends them zero-copy, and ZMQ may still be reading them while the next chunk is collected.

Episode success: an env that reports `info["is_success"]` (the Gymnasium-Robotics convention; the robosuite
adapter does) has it read on each episode's last step, and the chunk lists one success per finished episode
beside its return; an env that does not report it gets no success list at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from surreal.envs import make_vec_env
from surreal.proto.wire import PER_ENV, Chunk
from surreal.runtime.frame_chunks import pack
from surreal.spaces import is_image


class Policy(Protocol):
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]: ...

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray: ...

    def episode_done(self, done: np.ndarray) -> None:
        """Told which of the K environments just ended an episode (DDPG's OU noise resets there)."""

    def sampling_state(self) -> dict[str, Any]:
        """The policy's own random draws and noise process (its weights come from the ps): what a resumed
        actor continues from."""
        ...

    def load_sampling_state(self, state: dict[str, Any]) -> None: ...


def final_success(infos: dict[str, Any], i: int) -> bool | None:
    """Env i's `is_success` on the step that just ended its episode (SAME_STEP autoreset moves that step's info
    to `final_info`); None when the env does not report success."""
    final = infos.get("final_info", {})
    if "is_success" not in final or not final["_is_success"][i]:
        return None
    return bool(final["is_success"][i])


def all_or_none(successes: list[bool | None]) -> list[bool]:
    """Every episode's success, or none when any episode's env did not report one (the lists stay paired)."""
    return [] if any(s is None for s in successes) else [bool(s) for s in successes]


class RolloutCollector:
    """Keeps the K environments' current observations and running episode return/length between chunks,
    so an episode may span chunks and is reported, whole, in the chunk where it ends.

    `per_env(K)`: what each chunk also records once per env, before its first step, under `PER_ENV` (a recurrent
    policy's state, which the learner unrolls each env's column of the chunk from). Observations are recorded as
    float32, or as the uint8 they are for images; `frames`: an image chunk carries each frame once and the indices
    of each step's stacks instead of `obs` and `next_obs` (runtime/frame_chunks.py `pack`)."""

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        policy: Policy,
        chunk_steps: int,
        actor_index: int,
        per_env: Callable[[int], dict[str, np.ndarray]] | None = None,
        frames: bool = False,
    ) -> None:
        self.envs = envs
        self.policy = policy
        self.chunk_steps = chunk_steps
        self.actor_index = actor_index
        self.per_env = per_env
        self.obs_dtype = np.dtype(np.uint8 if is_image(envs.single_observation_space) else np.float32)
        if frames and self.obs_dtype != np.uint8:
            raise ValueError(f"frames=True packs uint8 images, not {envs.single_observation_space}")
        self.frames = frames
        self.num_envs = envs.num_envs
        self.chunk_size = chunk_steps * envs.num_envs
        self.obs, _ = envs.reset()
        self.episode_return = np.zeros(self.num_envs, np.float64)
        self.episode_length = np.zeros(self.num_envs, np.int64)

    def collect(self, version: int) -> Chunk:
        """Step every environment `chunk_steps` times with `policy.act`; `version` labels the parameters."""
        T, K = self.chunk_steps, self.num_envs
        obs_shape = self.envs.single_observation_space.shape
        assert obs_shape is not None, "Box observations have a shape"
        arrays: dict[str, Any] = {
            "obs": np.empty((T, K, *obs_shape), self.obs_dtype),
            "next_obs": np.empty((T, K, *obs_shape), self.obs_dtype),
            "rewards": np.empty((T, K), np.float32),
            "terminated": np.empty((T, K), bool),
            "truncated": np.empty((T, K), bool),
        }
        returns: list[float] = []
        lengths: list[int] = []
        successes: list[bool | None] = []
        if self.per_env is not None:
            arrays[PER_ENV] = self.per_env(K)
        for t in range(T):
            env_actions, record = self.policy.act(self.obs)
            if t == 0:
                for key, value in record.items():
                    arrays[key] = np.empty((T, *value.shape), value.dtype)
            for key, value in record.items():
                arrays[key][t] = value
            next_obs, rewards, terminated, truncated, infos = self.envs.step(env_actions)
            done = terminated | truncated
            arrays["obs"][t] = self.obs
            arrays["next_obs"][t] = next_obs
            arrays["rewards"][t] = rewards
            arrays["terminated"][t] = terminated
            arrays["truncated"][t] = truncated
            self.episode_return += rewards
            self.episode_length += 1
            for i in np.flatnonzero(done):
                # SAME_STEP autoreset: next_obs[i] is already the next episode's first observation.
                arrays["next_obs"][t, i] = infos["final_obs"][i]
                returns.append(float(self.episode_return[i]))
                lengths.append(int(self.episode_length[i]))
                successes.append(final_success(infos, i))
            self.episode_return[done] = 0.0
            self.episode_length[done] = 0
            if done.any():
                self.policy.episode_done(done)
            self.obs = next_obs
        if self.frames:
            arrays = pack(arrays)
        return Chunk(arrays, version, self.actor_index, returns, lengths, episode_successes=all_or_none(successes))

    def state(self) -> dict[str, Any]:
        """What the next chunk continues from besides the envs themselves (envstate.py): the current
        observations, the running episodes' returns and lengths, and the policy's random draws."""
        return {
            "obs": np.array(self.obs),
            "episode_return": self.episode_return.copy(),
            "episode_length": self.episode_length.copy(),
            "policy": self.policy.sampling_state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.obs = np.array(state["obs"])
        self.episode_return = np.array(state["episode_return"], np.float64)
        self.episode_length = np.array(state["episode_length"], np.int64)
        self.policy.load_sampling_state(state["policy"])


@dataclass
class Evaluation:
    """The deterministic policy's full episodes: returns, and successes when the env reports them (else empty)."""

    returns: list[float] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """What eval.json and the evaluator's rows report: return mean and std, episodes, and the success rate
        (None for envs that report no success)."""
        return {
            "eval_return_mean": float(np.mean(self.returns)),
            "eval_return_std": float(np.std(self.returns)),
            "eval_episodes": len(self.returns),
            "eval_success_rate": float(np.mean(self.successes)) if self.successes else None,
        }

    def report(self, **fields: Any) -> dict[str, Any]:
        """eval.json's content (the learner's and `surreal eval`'s): the summary without the success rate an env
        does not report, then `fields`, every episode's return and, where the env reports them, its successes."""
        result = {k: v for k, v in self.summary().items() if v is not None}
        result.update(fields, eval_returns=[float(r) for r in self.returns])
        if self.successes:
            result["eval_successes"] = self.successes
        return result


class DeterministicActor(Protocol):
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class StatefulActor(Protocol):
    """A policy whose actions depend on the episode so far (a recurrent one: algos/ppo/recurrent.py): `evaluate` resets
    it before the first step and, for the envs whose episode ended, after every step."""

    def reset(self, done: np.ndarray | None = None) -> None:
        """Forget the episode so far: of the envs flagged in `done`, or of all (None: a new batch of envs)."""


# (env, index, episodes) -> the env to step: `evaluate`'s env `index` runs `episodes` counted episodes.
EvalEnvWrapper = Callable[[gym.Env, int, int], gym.Env]


def eval_quotas(episodes: int) -> list[int]:
    """Episodes per env of an evaluation: up to 10 envs, each a fixed quota, the first ones one more."""
    n = min(episodes, 10)
    return [episodes // n + (1 if i < episodes % n else 0) for i in range(n)]


def evaluate(
    env_id: str,
    policy: DeterministicActor,
    episodes: int,
    seed: int,
    env_kwargs: dict[str, Any] | None = None,
    wrap: EvalEnvWrapper | None = None,
) -> Evaluation:
    """Full episodes of the deterministic policy. Each of up to 10 parallel envs runs a fixed quota of
    episodes, so short episodes are not over-represented; env i starts from `seed + i`. `wrap` wraps each env
    (told its index and quota: `surreal eval --video` records those episodes), which changes no episode. A
    `StatefulActor` starts every episode afresh. The envs are evaluation envs (`make_vec_env(training=False)`)."""
    quotas = np.array(eval_quotas(episodes))
    n = len(quotas)
    done_count = np.zeros(n, np.int64)
    running = np.zeros(n, np.float64)
    returns: list[float] = []
    successes: list[bool | None] = []
    envs = make_vec_env(
        env_id,
        n,
        seed,
        env_kwargs,
        None if wrap is None else lambda env, i: wrap(env, i, int(quotas[i])),
        training=False,  # game scores: an Atari game's rewards unclipped, its episodes whole games
    )
    obs, _ = envs.reset(seed=[seed + i for i in range(n)])  # type: ignore[arg-type]  # per-env seeds are documented
    stateful = policy if isinstance(policy, StatefulActor) else None
    if stateful is not None:
        stateful.reset()
    try:
        while (done_count < quotas).any():
            obs, rewards, terminated, truncated, infos = envs.step(policy.act_deterministic(obs))
            running += rewards
            if stateful is not None and (terminated | truncated).any():
                stateful.reset(terminated | truncated)
            for i in np.flatnonzero(terminated | truncated):
                if done_count[i] < quotas[i]:
                    returns.append(float(running[i]))
                    successes.append(final_success(infos, i))
                    done_count[i] += 1
                running[i] = 0.0
    finally:
        envs.close()
    return Evaluation(returns, all_or_none(successes))
