"""RolloutCollector and evaluate: the chunk format of docs/architecture.md, exact episode boundaries.

A tiny counting environment makes every number predictable: the observation is 100 * kind + t, the
reward of step t is t, and an episode of kind 1 terminates after 3 steps while kind 0 is truncated by a
time limit of 4. So a terminated episode returns 6 and a truncated one 10, a final observation ends in
3 or 4, and a reset observation ends in 0.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal.algos.ppo.config import PPOConfig
from surreal.algos.ppo.policy import PPOPolicy
from surreal.envs import make_vec_env
from surreal.proto.wire import Chunk
from surreal.runtime.rollout import RolloutCollector, evaluate

torch.set_num_threads(1)

COUNTER_ID = "SurrealCounter-v0"


class Counter(gym.Env):
    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.kind = int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.kind == 1 and self.t == 3, False, {}

    def _obs(self) -> np.ndarray:
        return np.array([100.0 * self.kind + self.t], np.float32)


class SuccessCounter(Counter):
    """The counter reporting `is_success` on every step: true throughout the episodes that terminate (kind 1)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "is_success": self.kind == 1}


SUCCESS_ID = "SurrealSuccessCounter-v0"
if COUNTER_ID not in gym.registry:
    gym.register(COUNTER_ID, entry_point=Counter, max_episode_steps=4)
    gym.register(SUCCESS_ID, entry_point=SuccessCounter, max_episode_steps=4)


class RecordingPolicy:
    """Acts 2.0 (outside the action space) and records it pre-clip, plus a per-env extra."""

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        actions = np.full((len(obs), 1), 2.0, np.float32)
        extra = obs[:, 0].astype(np.float32) * -1.0
        return np.clip(actions, -1.0, 1.0), {"actions": actions, "logprobs": extra}

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        return np.zeros((len(obs), 1), np.float32)

    def episode_done(self, done: np.ndarray) -> None:
        del done


@pytest.fixture
def counter_envs():
    envs = make_vec_env(COUNTER_ID, 3, seed=0)
    yield envs
    envs.close()


def test_chunk_arrays_have_the_documented_shapes_and_dtypes(counter_envs):
    chunk = RolloutCollector(counter_envs, RecordingPolicy(), chunk_steps=7, actor_index=2).collect(version=5)
    a = chunk.arrays
    assert a["obs"].shape == a["next_obs"].shape == (7, 3, 1)
    assert a["obs"].dtype == a["next_obs"].dtype == np.float32
    assert a["actions"].shape == (7, 3, 1) and a["actions"].dtype == np.float32
    assert a["rewards"].shape == (7, 3) and a["rewards"].dtype == np.float32
    assert a["terminated"].dtype == a["truncated"].dtype == np.bool_
    assert a["terminated"].shape == a["truncated"].shape == (7, 3)
    np.testing.assert_array_equal(a["actions"], 2.0)  # what the policy sampled, not what the env got
    np.testing.assert_array_equal(a["logprobs"], -a["obs"][..., 0])  # extras line up with their step
    assert (chunk.version, chunk.actor, chunk.env_steps) == (5, 2, 21)


def test_next_obs_is_the_final_observation_and_obs_continues_across_chunks(counter_envs):
    collector = RolloutCollector(counter_envs, RecordingPolicy(), chunk_steps=5, actor_index=0)
    chunks = [collector.collect(version=0) for _ in range(4)]
    obs = np.concatenate([c.arrays["obs"][..., 0] for c in chunks])
    next_obs = np.concatenate([c.arrays["next_obs"][..., 0] for c in chunks])
    terminated = np.concatenate([c.arrays["terminated"] for c in chunks])
    truncated = np.concatenate([c.arrays["truncated"] for c in chunks])
    assert terminated.any() and truncated.any()
    assert not (terminated & truncated).any()
    np.testing.assert_array_equal(next_obs[terminated] % 100, 3.0)  # final, not the reset observation
    np.testing.assert_array_equal(next_obs[terminated] >= 100, True)
    np.testing.assert_array_equal(next_obs[truncated], 4.0)
    done = terminated | truncated
    np.testing.assert_array_equal(next_obs[~done], obs[~done] + 1)
    # The step after an episode end starts from a reset observation; otherwise from next_obs.
    np.testing.assert_array_equal(obs[1:][done[:-1]] % 100, 0.0)
    np.testing.assert_array_equal(obs[1:][~done[:-1]], next_obs[:-1][~done[:-1]])


def test_episode_returns_and_lengths_are_whole_episodes_even_across_chunks(counter_envs):
    collector = RolloutCollector(counter_envs, RecordingPolicy(), chunk_steps=5, actor_index=0)
    chunks = [collector.collect(version=0) for _ in range(4)]
    for chunk in chunks:
        ends = int(chunk.arrays["terminated"].sum() + chunk.arrays["truncated"].sum())
        assert len(chunk.episode_returns) == len(chunk.episode_lengths) == ends
        for ret, length in zip(chunk.episode_returns, chunk.episode_lengths, strict=True):
            assert length in (3, 4) and ret == length * (length + 1) / 2
    lengths = [n for c in chunks for n in c.episode_lengths]
    assert max(lengths) == 4 and min(lengths) == 3
    # Steps of unfinished episodes are not lost: they are carried into the next chunk's bookkeeping.
    assert sum(lengths) + collector.episode_length.sum() == 4 * 5 * 3


def test_ppo_policy_records_logprobs_per_step():
    envs = make_vec_env("InvertedPendulum-v5", 2, seed=0)
    cfg = PPOConfig()
    policy = PPOPolicy(envs.single_observation_space, envs.single_action_space, cfg, actor_index=0)
    chunk: Chunk = RolloutCollector(envs, policy, chunk_steps=16, actor_index=0).collect(version=0)
    envs.close()
    assert chunk.arrays["logprobs"].shape == (16, 2) and chunk.arrays["logprobs"].dtype == np.float32
    assert chunk.arrays["actions"].shape == (16, 2, 1) and chunk.arrays["obs"].shape == (16, 2, 4)


@pytest.mark.parametrize("episodes", [1, 5, 12])
def test_evaluate_returns_exactly_the_requested_full_episodes(episodes):
    evaluation = evaluate(COUNTER_ID, RecordingPolicy(), episodes=episodes, seed=7)
    assert len(evaluation.returns) == episodes
    assert set(evaluation.returns) <= {6.0, 10.0}
    assert evaluation.successes == [], "the counter reports no success"


def test_an_env_reporting_is_success_gets_one_success_per_finished_episode():
    envs = make_vec_env(SUCCESS_ID, num_envs=3, seed=5)
    chunk = RolloutCollector(envs, RecordingPolicy(), chunk_steps=20, actor_index=0).collect(version=0)
    envs.close()
    assert len(chunk.episode_returns) >= 10
    assert chunk.episode_successes == [r == 6.0 for r in chunk.episode_returns], "the terminating kind succeeds"
    evaluation = evaluate(SUCCESS_ID, RecordingPolicy(), episodes=7, seed=7)
    assert evaluation.successes == [r == 6.0 for r in evaluation.returns] and len(evaluation.successes) == 7


def test_an_env_without_is_success_reports_no_successes():
    envs = make_vec_env(COUNTER_ID, num_envs=2, seed=5)
    chunk = RolloutCollector(envs, RecordingPolicy(), chunk_steps=12, actor_index=0).collect(version=0)
    envs.close()
    assert chunk.episode_returns and chunk.episode_successes == []
