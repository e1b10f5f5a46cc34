"""OpenAI-ES pieces: the gradient estimate, fitness shaping, the shared noise table, the pair collector,
staleness and checkpoints."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal.algos.es import algorithm as es
from surreal.algos.es.learner import Adam, centered_ranks, es_gradient
from surreal.algos.es.nets import NoiseTable
from surreal.config import algo_config, load_config
from surreal.envs import make_vec_env
from surreal.proto.wire import Chunk


def test_gradient_estimate_on_a_quadratic_matches_the_analytic_gradient():
    """F(x) = -|x - c|^2 has gradient -2 (x - c); the antithetic estimator with raw fitness recovers it."""
    rng = np.random.default_rng(0)
    dim, pairs, sigma = 10, 40_000, 0.05
    c, theta = rng.standard_normal(dim), rng.standard_normal(dim)
    fitness = lambda x: -np.sum((x - c) ** 2, axis=-1)
    eps = rng.standard_normal((pairs, dim)).astype(np.float32)
    estimate = es_gradient(fitness(theta + sigma * eps), fitness(theta - sigma * eps), eps, sigma)
    analytic = -2 * (theta - c)
    assert np.linalg.norm(estimate - analytic) / np.linalg.norm(analytic) < 0.05
    assert np.dot(estimate, analytic) / (np.linalg.norm(estimate) * np.linalg.norm(analytic)) > 0.998


def test_centered_ranks_are_evenly_spaced_in_minus_half_to_half():
    ranks = centered_ranks(np.array([[10.0, -3.0], [7.0, 1e6]]))
    np.testing.assert_allclose(ranks, [[1 / 6, -0.5], [-1 / 6, 0.5]], rtol=1e-6)


def test_noise_table_is_the_same_in_every_process_and_offsets_fit():
    a, b = NoiseTable(100_000, seed=7), NoiseTable(100_000, seed=7)
    np.testing.assert_array_equal(a.noise, b.noise)
    assert not np.array_equal(a.noise, NoiseTable(100_000, seed=8).noise)
    rng = np.random.default_rng(1)
    offsets = [a.sample_offset(rng, 99_990) for _ in range(200)]
    assert min(offsets) >= 0 and max(offsets) <= 10 and len(a.get(max(offsets), 99_990)) == 99_990
    with pytest.raises(ValueError, match="smaller than the policy"):
        a.sample_offset(rng, 100_001)


def test_adam_descends():
    opt, x = Adam(2, lr=0.1), np.array([3.0, -2.0], np.float32)
    for _ in range(300):
        x = opt.step(x, 2 * x)
    assert np.abs(x).max() < 0.1


@pytest.fixture
def cfg():
    return algo_config(
        load_config(["algo=es", "algo.noise_table_size=200000", "algo.hidden_sizes=[8]", "algo.pairs_per_chunk=3"])
    )


def test_collector_evaluates_each_pair_twice_and_reports_consistent_statistics(cfg):
    envs = make_vec_env("InvertedPendulum-v5", 4, 11)
    policy = es.make_policy(envs.single_observation_space, envs.single_action_space, cfg, 0)
    learner = es.make_learner(envs.single_observation_space, envs.single_action_space, cfg, torch.device("cpu"))
    policy.load_params(learner.params())
    collector = es.make_collector(envs, policy, cfg, actor_index=1, chunk_steps=256)
    chunk = collector.collect(version=4)
    a = chunk.arrays
    assert chunk.size == 3 and chunk.version == 4 and chunk.actor == 1
    assert a["returns"].shape == (1, 3, 2) and a["noise_offsets"].shape == (1, 3)
    assert chunk.env_steps == a["lengths"].sum() == a["obs_count"].sum()
    # InvertedPendulum-v5 pays 1 per step and 0 for the step that terminates: return = length - 1.
    np.testing.assert_array_equal(a["returns"], a["lengths"] - 1)
    assert sorted(chunk.episode_returns) == sorted(a["returns"].ravel().tolist())
    mean = a["obs_sum"][0].sum(0) / a["obs_count"].sum()
    assert np.all(np.abs(mean) < 10)
    envs.close()


def fake_generation(learner, pairs: int, better_direction: np.ndarray) -> list[Chunk]:
    """Pairs whose returns reward moving theta along `better_direction`."""
    rng = np.random.default_rng(0)
    offsets = np.array([learner.table.sample_offset(rng, learner.net.dim) for _ in range(pairs)])
    noise = np.stack([learner.table.get(int(o), learner.net.dim) for o in offsets])
    score = noise @ better_direction
    returns = np.stack([score, -score], axis=1).astype(np.float32)
    obs_dim = len(learner.obs_rms.mean)
    arrays = {
        "noise_offsets": offsets[None],
        "returns": returns[None],
        "lengths": np.ones((1, pairs, 2), np.int32),
        "obs_sum": np.full((1, pairs, obs_dim), 2.0),
        "obs_sumsq": np.full((1, pairs, obs_dim), 8.0),
        "obs_count": np.full((1, pairs), 2.0),
    }
    return [Chunk(arrays, version=0, actor=0, steps=2 * pairs)]


def test_update_moves_theta_along_the_rewarded_direction_and_merges_observation_statistics(cfg):
    env = gym.make("InvertedPendulum-v5")
    learner = es.make_learner(env.observation_space, env.action_space, cfg, torch.device("cpu"))
    direction = np.random.default_rng(3).standard_normal(learner.net.dim).astype(np.float32)
    before = learner.theta.copy()
    stats = learner.update(fake_generation(learner, 200, direction), progress=0.0)
    step = learner.theta - before
    assert np.dot(step, direction) / (np.linalg.norm(step) * np.linalg.norm(direction)) > 0.5
    assert stats["pairs"] == 200 and stats["update_ratio"] > 0
    np.testing.assert_allclose(learner.obs_rms.mean, 1.0, rtol=1e-3)  # each observation sum 2 over count 2
    np.testing.assert_allclose(learner.obs_rms.var, 3.0, rtol=1e-3)  # E[x^2] = 4, minus mean^2
    env.close()


def test_checkpoint_round_trip_continues_identically(cfg):
    env = gym.make("InvertedPendulum-v5")
    a = es.make_learner(env.observation_space, env.action_space, cfg, torch.device("cpu"))
    direction = np.ones(a.net.dim, np.float32)
    a.update(fake_generation(a, 50, direction), 0.0)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = es.make_learner(env.observation_space, env.action_space, cfg, torch.device("cpu"))
    b.load_state_dict(torch.load(buffer, weights_only=True))
    a.update(fake_generation(a, 50, direction), 0.0)
    b.update(fake_generation(b, 50, direction), 0.0)
    np.testing.assert_array_equal(a.theta, b.theta)
    policy = es.make_policy(env.observation_space, env.action_space, cfg, 0)
    policy.load_params(b.params())
    assert policy.act_deterministic(np.zeros((2, 4))).shape == (2, 1)
    env.close()


def test_discrete_actions_are_the_argmax_of_the_outputs_shifted_by_the_spaces_start(cfg):
    """CartPole (Discrete(2)): one output per action, the argmax acts; a Discrete(n, start) env gets index + start.
    The pair collector runs on it unchanged (CartPole pays 1 per step: return = length)."""
    envs = make_vec_env("CartPole-v1", 2, 5)
    obs_space = envs.single_observation_space
    policy = es.make_policy(obs_space, gym.spaces.Discrete(3, start=-1), cfg, 0)
    assert policy.net.shapes[-1][0] == 3
    theta = np.random.default_rng(1).standard_normal(policy.net.dim).astype(np.float32)
    obs = np.random.default_rng(2).standard_normal((16, 4)).astype(np.float32)
    actions = policy.act_with(np.broadcast_to(theta, (16, policy.net.dim)), obs)
    outputs = policy.net.forward(np.broadcast_to(theta, (16, policy.net.dim)), policy.normalize(obs))
    np.testing.assert_array_equal(actions, outputs.argmax(-1) - 1)
    assert set(actions.tolist()) <= {-1, 0, 1}

    policy = es.make_policy(obs_space, envs.single_action_space, cfg, 0)
    learner = es.make_learner(obs_space, envs.single_action_space, cfg, torch.device("cpu"))
    policy.load_params(learner.params())
    chunk = es.make_collector(envs, policy, cfg, actor_index=0, chunk_steps=1).collect(version=0)
    np.testing.assert_array_equal(chunk.arrays["returns"], chunk.arrays["lengths"])
    learner.update([chunk], progress=0.0)
    envs.close()
