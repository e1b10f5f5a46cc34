"""PPO math and plumbing: GAE against a slow reference, params learner -> actor, checkpoints, staleness."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal.algos.normalizer import RunningMeanStd
from surreal.algos.ppo import PPOLearner, PPOPolicy, filter_stale, gae
from surreal.config.schema import PPOConfig
from surreal.envs import make_vec_env
from surreal.runtime.rollout import Chunk, RolloutCollector

torch.set_num_threads(1)


def reference_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Step by step, one env at a time, as written in the GAE paper with episode boundaries."""
    T, K = rewards.shape
    out = np.zeros((T, K))
    for k in range(K):
        running = 0.0
        for t in reversed(range(T)):
            delta = rewards[t, k] + gamma * next_values[t, k] * (0.0 if terminated[t, k] else 1.0) - values[t, k]
            if terminated[t, k] or truncated[t, k]:
                running = 0.0
            running = delta + gamma * lam * running
            out[t, k] = running
    return out


def test_gae_matches_reference_with_terminations_and_truncations():
    rng = np.random.default_rng(0)
    T, K = 50, 3
    args = (
        rng.standard_normal((T, K)),
        rng.standard_normal((T, K)),
        rng.standard_normal((T, K)),
        rng.random((T, K)) < 0.1,
        rng.random((T, K)) < 0.1,
    )
    np.testing.assert_allclose(gae(*args, 0.99, 0.95), reference_gae(*args, 0.99, 0.95), rtol=1e-10)


def test_truncation_bootstraps_and_termination_does_not():
    zeros = np.zeros((1, 1))
    kwargs = dict(rewards=zeros, values=zeros, next_values=np.ones((1, 1)), gamma=0.5, gae_lambda=1.0)
    truncated = gae(terminated=np.zeros((1, 1), bool), truncated=np.ones((1, 1), bool), **kwargs)
    terminated = gae(terminated=np.ones((1, 1), bool), truncated=np.zeros((1, 1), bool), **kwargs)
    assert truncated[0, 0] == pytest.approx(0.5) and terminated[0, 0] == 0.0


def test_running_mean_std_merge_equals_whole_batch():
    data = np.random.default_rng(1).standard_normal((1000, 4)) * 3 + 1
    pieces, whole = RunningMeanStd((4,)), RunningMeanStd((4,))
    for part in np.array_split(data, 7):
        pieces.update(part)
    whole.update(data)
    np.testing.assert_allclose(pieces.mean, whole.mean)
    np.testing.assert_allclose(pieces.var, whole.var)


@pytest.fixture
def setup():
    envs = make_vec_env("InvertedPendulum-v5", 2, seed=3)
    cfg = PPOConfig(seed=3, batch_size=128, minibatch_size=32, update_epochs=2)
    learner = PPOLearner(envs.single_observation_space, envs.single_action_space, cfg, torch.device("cpu"))
    policy = PPOPolicy(envs.single_observation_space, envs.single_action_space, cfg, actor_index=0)
    yield envs, cfg, learner, policy
    envs.close()


def test_params_round_trip_gives_the_learners_policy(setup):
    envs, cfg, learner, policy = setup
    collector = RolloutCollector(envs, policy, chunk_steps=64, actor_index=0)
    policy.load_params(learner.params())
    learner.update([collector.collect(0)], progress=0.5)  # moves weights and normalizer statistics
    policy.load_params(learner.params())
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    expected = learner.model.actor_mean(torch.from_numpy(learner.obs_rms.normalize(obs, cfg.obs_clip))).detach()
    np.testing.assert_allclose(policy.act_deterministic(obs), np.clip(expected.numpy(), -3, 3), rtol=1e-6)


def test_first_epoch_ratio_is_one_when_the_actor_ran_the_learners_parameters(setup):
    envs, _cfg, learner, policy = setup
    policy.load_params(learner.params())
    chunk = RolloutCollector(envs, policy, chunk_steps=64, actor_index=0).collect(0)
    batch = learner.prepare([chunk])
    dist = learner.model.distribution(batch["obs"])
    ratio = (dist.log_prob(batch["actions"]).sum(-1) - batch["logprobs"]).exp()
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-5, rtol=0)


def test_checkpoint_round_trip_through_weights_only_load_reproduces_the_next_update(setup):
    envs, cfg, learner, policy = setup
    policy.load_params(learner.params())
    collector = RolloutCollector(envs, policy, chunk_steps=64, actor_index=0)
    first, second = collector.collect(0), collector.collect(0)
    learner.update([first], progress=0.1)
    buffer = io.BytesIO()
    torch.save(learner.state_dict(), buffer)
    buffer.seek(0)
    restored = PPOLearner(envs.single_observation_space, envs.single_action_space, cfg, torch.device("cpu"))
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    stats_a = learner.update([second], progress=0.2)
    stats_b = restored.update([second], progress=0.2)
    assert stats_a == stats_b
    for (name, a), (_, b) in zip(learner.model.state_dict().items(), restored.model.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_filter_stale_drops_and_counts():
    chunks = [Chunk({"rewards": np.zeros((1, 1))}, version=v, actor=0) for v in (10, 7, 6, 3)]
    kept, dropped = filter_stale(chunks, current_version=10, max_staleness=4)
    assert [c.version for c in kept] == [10, 7, 6] and dropped == 1


def test_rollout_next_obs_is_the_final_observation_on_episode_end():
    class Countdown(gym.Env):
        """Terminates after 3 steps from an odd start, truncates (time limit 4) from an even one."""

        observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            self.odd = bool(self.np_random.integers(2))
            return np.array([100.0 * self.odd], np.float32), {}

        def step(self, action):
            self.t += 1
            return np.array([100.0 * self.odd + self.t], np.float32), 1.0, self.odd and self.t == 3, False, {}

    gym.register("SurrealCountdown-v0", entry_point=lambda: gym.wrappers.TimeLimit(Countdown(), 4))
    envs = make_vec_env("SurrealCountdown-v0", 3, seed=0)

    class ZeroPolicy:
        def act(self, obs):
            return np.zeros((len(obs), 1), np.float32), {"actions": np.zeros((len(obs), 1), np.float32)}

    chunk = RolloutCollector(envs, ZeroPolicy(), chunk_steps=12, actor_index=0).collect(version=5)
    a = chunk.arrays
    for t in range(12):
        for k in range(3):
            if a["terminated"][t, k] or a["truncated"][t, k]:
                # The final observation, not the next episode's first one.
                assert a["next_obs"][t, k, 0] % 100 in (3.0, 4.0)
                assert bool(a["terminated"][t, k]) == (a["next_obs"][t, k, 0] >= 100)
            else:
                assert a["next_obs"][t, k, 0] == a["obs"][t, k, 0] + 1
    ends = a["terminated"].sum() + a["truncated"].sum()
    assert len(chunk.episode_returns) == ends and set(chunk.episode_lengths) <= {3, 4}
    assert all(r == n for r, n in zip(chunk.episode_returns, chunk.episode_lengths, strict=True))
    assert chunk.version == 5 and chunk.env_steps == 36
    envs.close()
