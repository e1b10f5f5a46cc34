"""DDPG's pieces: n-step returns at episode ends and chunk boundaries, exploration, the update, checkpoints."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal.algos import ddpg
from surreal.config import algo_config, load_config
from surreal.envs import make_vec_env
from surreal.runtime.rollout import RolloutCollector

GAMMA = 0.9


def window(rewards, terminated, truncated):
    """A [T, K=1] window whose next_obs[t] is t+1 (obs[t] is t), so the bootstrap step can be read off."""
    T = len(rewards)
    col = lambda x, dtype: np.asarray(x, dtype).reshape(T, 1)
    obs = np.arange(T, dtype=np.float32).reshape(T, 1, 1)
    return {
        "obs": obs,
        "next_obs": obs + 1,
        "actions": obs * 10,
        "rewards": col(rewards, np.float32),
        "terminated": col(terminated, bool),
        "truncated": col(truncated, bool),
    }


def test_one_step_transitions_are_the_raw_steps_with_discount_zero_only_at_termination():
    w = window([1, 2, 3, 4], [0, 1, 0, 0], [0, 0, 1, 0])
    out = ddpg.n_step_transitions(w, 1, GAMMA)
    np.testing.assert_array_equal(out["rewards"][:, 0], [1, 2, 3, 4])
    np.testing.assert_allclose(out["discounts"][:, 0], [GAMMA, 0.0, GAMMA, GAMMA])  # truncation bootstraps
    np.testing.assert_array_equal(out["next_obs"][:, 0, 0], [1, 2, 3, 4])


def test_n_step_returns_stop_at_episode_ends_and_bootstrap_only_after_truncation():
    # steps: 0 1 | 2 3 4 (truncated at 4) | 5 6 ...
    rewards = [1, 1, 1, 1, 1, 1, 1, 1]
    terminated = [0, 1, 0, 0, 0, 0, 0, 0]
    truncated = [0, 0, 0, 0, 1, 0, 0, 0]
    out = ddpg.n_step_transitions(window(rewards, terminated, truncated), 3, GAMMA)
    R, D, boot = out["rewards"][:, 0], out["discounts"][:, 0], out["next_obs"][:, 0, 0]
    assert len(R) == 6
    # t=0: r0 + g r1, terminated at 1: no bootstrap
    assert R[0] == pytest.approx(1 + GAMMA) and D[0] == 0.0
    # t=1: terminates at once
    assert R[1] == pytest.approx(1) and D[1] == 0.0
    # t=2: three steps 2,3,4 (4 truncated: bootstrap from its final observation with g^3)
    assert R[2] == pytest.approx(1 + GAMMA + GAMMA**2) and D[2] == pytest.approx(GAMMA**3) and boot[2] == 5
    # t=3: steps 3,4 then the episode ended by truncation: g^2 from next_obs[4]
    assert R[3] == pytest.approx(1 + GAMMA) and D[3] == pytest.approx(GAMMA**2) and boot[3] == 5
    # t=5: a full window 5,6,7
    assert D[5] == pytest.approx(GAMMA**3) and boot[5] == 8
    np.testing.assert_array_equal(out["obs"][:, 0, 0], np.arange(6))
    np.testing.assert_array_equal(out["actions"][:, 0, 0], np.arange(6) * 10)


class ScriptedPolicy:
    def act(self, obs):
        actions = np.full((len(obs), 1), 0.5, np.float32)
        return actions, {"actions": actions}

    def act_deterministic(self, obs):
        return np.zeros((len(obs), 1), np.float32)

    def episode_done(self, done):
        del done


def test_n_step_collector_carries_steps_across_chunk_boundaries():
    """Chunks of 5 steps give the same transitions as one long window: none is cut short or lost."""
    kwargs = {"max_episode_steps": 7}  # episode ends inside chunks and at their edges
    inner = RolloutCollector(make_vec_env("Pendulum-v1", 2, 3, kwargs), ScriptedPolicy(), 5, 0)
    a = ddpg.NStepCollector(inner, 3, GAMMA)
    chunks = [a.collect(0) for _ in range(4)]
    b = RolloutCollector(make_vec_env("Pendulum-v1", 2, 3, kwargs), ScriptedPolicy(), 20, 0).collect(0)
    whole = ddpg.n_step_transitions(b.arrays, 3, GAMMA)
    for key in whole:
        joined = np.concatenate([c.arrays[key] for c in chunks])
        np.testing.assert_allclose(joined, whole[key], rtol=1e-6, err_msg=key)
    assert [c.env_steps for c in chunks] == [10, 10, 10, 10]  # env steps, not the n-step count
    assert chunks[0].size == 6 and chunks[1].size == 10


def test_per_actor_noise_spreads_geometrically_around_the_base_scale():
    cfg = algo_config(load_config(["algo=ddpg", "algo.exploration_noise=0.1", "algo.noise_spread=4"]))
    scales = [ddpg.actor_noise_scale(cfg, i, 3) for i in range(3)]
    assert scales == pytest.approx([0.025, 0.1, 0.4])
    assert ddpg.actor_noise_scale(cfg, 0, 1) == 0.1


@pytest.fixture
def pendulum():
    env = gym.make("Pendulum-v1")
    yield env.observation_space, env.action_space
    env.close()


@pytest.mark.parametrize(
    ("noise_type", "steps", "std_range"), [("gaussian", 1, (0.17, 0.23)), ("ou", 1500, (0.2, 0.55))]
)
def test_policy_explores_uniformly_until_the_first_update_then_around_mu(pendulum, noise_type, steps, std_range):
    cfg = algo_config(load_config(["algo=ddpg", f"algo.noise_type={noise_type}", "algo.hidden_sizes=[16]"]))
    policy = ddpg.make_policy(*pendulum, cfg, actor_index=0, num_actors=1)
    learner = ddpg.make_learner(*pendulum, cfg, torch.device("cpu"))
    policy.load_params(learner.params())
    obs = np.zeros((500, 3), np.float32)
    warm, _ = policy.act(obs)
    assert warm.min() < -1.5 and warm.max() > 1.5  # uniform over [-2, 2]
    learner.updates = 1  # what a learner that has updated once publishes
    policy.load_params(learner.params())
    for _ in range(steps):  # OU noise starts at 0 and needs ~1/(theta dt) steps to reach its spread
        acted, record = policy.act(obs)
    mu = policy.act_deterministic(obs)
    noise = acted - mu
    assert np.all(np.abs(acted) <= 2.0) and np.array_equal(record["actions"], acted)
    # Gaussian: 0.1 x the half-range 2; OU: its stationary sigma / sqrt(2 theta) = 0.18, x 2 (clipping trims it)
    assert std_range[0] < noise.std() < std_range[1]
    if noise_type == "ou":
        policy.episode_done(np.ones(500, bool))
        assert np.all(policy.ou_state == 0)


def batch(n: int, rewards: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "obs": rng.standard_normal((n, 3)).astype(np.float32),
        "actions": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
        "rewards": np.full(n, rewards, np.float32),
        "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
        "discounts": np.zeros(n, np.float32),
        "slots": np.arange(n),
        "ids": np.arange(n, dtype=np.uint64),
        "weights": np.ones(n, np.float32),
    }


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["algo.twin_critics=true", "algo.target_policy_noise=0.2"],
        ["algo.target_update_period=10", "algo.max_grad_norm=1.0"],
    ],
)
def test_critic_fits_the_target_and_priorities_are_its_td_errors(pendulum, overrides):
    cfg = algo_config(load_config(["algo=ddpg", "algo.hidden_sizes=[32,32]", "algo.critic_lr=1e-2", *overrides]))
    learner = ddpg.make_learner(*pendulum, cfg, torch.device("cpu"))
    data = batch(128, rewards=3.0)  # terminal transitions: Q must become 3
    first_stats, first_priorities = learner.update(data)
    for _ in range(300):
        stats, priorities = learner.update(data)
    assert priorities.shape == (128,) and np.all(priorities >= 0)
    assert priorities.mean() < 0.1 * first_priorities.mean()
    assert stats["q_mean"] == pytest.approx(3.0, abs=0.1)
    assert not np.isnan(stats["actor_loss"]) and learner.updates == 301


def test_checkpoint_round_trip_continues_identically(pendulum):
    cfg = algo_config(load_config(["algo=ddpg", "algo.hidden_sizes=[16]", "algo.target_policy_noise=0.2"]))
    a = ddpg.make_learner(*pendulum, cfg, torch.device("cpu"))
    data = batch(64, rewards=1.0)
    for _ in range(3):
        a.update(data)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = ddpg.make_learner(*pendulum, cfg, torch.device("cpu"))
    b.load_state_dict(torch.load(buffer, weights_only=True))
    stats_a, prio_a = a.update(data)
    stats_b, prio_b = b.update(data)
    assert stats_a == stats_b and np.array_equal(prio_a, prio_b)
    for key, value in a.params()["actor"].items():
        np.testing.assert_array_equal(value, b.params()["actor"][key])


def test_a_non_finite_critic_loss_skips_the_step_and_keeps_the_networks(pendulum):
    cfg = algo_config(load_config(["algo=ddpg", "algo.hidden_sizes=[16]"]))
    learner = ddpg.make_learner(*pendulum, cfg, torch.device("cpu"))
    learner.update(batch(32, rewards=1.0))
    before = {k: v.clone() for k, v in learner.critics.state_dict().items()}
    stats, priorities = learner.update(batch(32, rewards=float("inf")))
    assert stats["nonfinite_skipped"] == 1.0 and priorities.size == 0 and learner.updates == 1
    for name, value in learner.critics.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0, msg=name)
    stats, _ = learner.update(batch(32, rewards=1.0))
    assert stats["nonfinite_skipped"] == 0.0 and learner.updates == 2
