"""DDPG's pieces: n-step returns at episode ends and chunk boundaries, exploration, the update, checkpoints."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal.algos.ddpg import algorithm as ddpg
from surreal.algos.ddpg.learner import STEP_STATS, DDPGLearner
from surreal.algos.ddpg.policy import actor_noise_scale
from surreal.algos.offpolicy import NStepCollector, n_step_transitions
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
    out = n_step_transitions(w, 1, GAMMA)
    np.testing.assert_array_equal(out["rewards"][:, 0], [1, 2, 3, 4])
    np.testing.assert_allclose(out["discounts"][:, 0], [GAMMA, 0.0, GAMMA, GAMMA])  # truncation bootstraps
    np.testing.assert_array_equal(out["next_obs"][:, 0, 0], [1, 2, 3, 4])


def test_n_step_returns_stop_at_episode_ends_and_bootstrap_only_after_truncation():
    # steps: 0 1 | 2 3 4 (truncated at 4) | 5 6 ...
    rewards = [1, 1, 1, 1, 1, 1, 1, 1]
    terminated = [0, 1, 0, 0, 0, 0, 0, 0]
    truncated = [0, 0, 0, 0, 1, 0, 0, 0]
    out = n_step_transitions(window(rewards, terminated, truncated), 3, GAMMA)
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
    a = NStepCollector(inner, 3, GAMMA)
    chunks = [a.collect(0) for _ in range(4)]
    b = RolloutCollector(make_vec_env("Pendulum-v1", 2, 3, kwargs), ScriptedPolicy(), 20, 0).collect(0)
    whole = n_step_transitions(b.arrays, 3, GAMMA)
    for key in whole:
        joined = np.concatenate([c.arrays[key] for c in chunks])
        np.testing.assert_allclose(joined, whole[key], rtol=1e-6, err_msg=key)
    assert [c.env_steps for c in chunks] == [10, 10, 10, 10]  # env steps, not the n-step count
    assert chunks[0].size == 6 and chunks[1].size == 10


def test_per_actor_noise_spreads_geometrically_around_the_base_scale():
    cfg = algo_config(load_config(["algo=ddpg", "algo.exploration_noise=0.1", "algo.noise_spread=4"]))
    scales = [actor_noise_scale(cfg, i, 3) for i in range(3)]
    assert scales == pytest.approx([0.025, 0.1, 0.4])
    assert actor_noise_scale(cfg, 0, 1) == 0.1


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


def table(steps: list[dict[str, float]]) -> np.ndarray:
    """Per-step statistics as rows, in STEP_STATS order, for comparisons where NaN (no actor step yet) equals NaN."""
    return np.array([[step[k] for k in STEP_STATS] for step in steps])


def everything(learner: DDPGLearner) -> list[torch.Tensor]:
    """What an update may change: networks, targets, and the optimizers' moments and step counts."""
    nets = (learner.actor, learner.critics, learner.actor_target, learner.critics_target)
    moments = [
        v
        for optimizer in (learner.actor_optimizer, learner.critic_optimizer)
        for state in optimizer.state.values()
        for v in state.values()
    ]
    return [*(p for net in nets for p in net.parameters()), *moments]


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
    _, first_priorities = learner.update(data)
    for _ in range(300):
        [stats], priorities = learner.update(data)
    assert priorities.shape == (128,) and np.all(priorities >= 0)
    assert priorities.mean() < 0.1 * first_priorities.mean()
    assert stats["q_mean"] == pytest.approx(3.0, abs=0.1)
    assert not np.isnan(stats["actor_loss"]) and learner.updates == 301


def test_a_sample_of_k_minibatches_steps_as_k_single_updates(pendulum):
    """One call over four minibatches (one device read) gives what four calls give, step for step."""
    cfg = algo_config(load_config(["algo=ddpg", "algo.hidden_sizes=[32,32]", "algo.twin_critics=true"]))
    whole, single = (ddpg.make_learner(*pendulum, cfg, torch.device("cpu")) for _ in range(2))
    sample = {k: np.concatenate([v, v[::-1]]) for k, v in batch(64, rewards=1.0).items()}  # 4 minibatches of 32
    stats, priorities = whole.update(sample, 4)
    one_by_one = [single.update({k: v[i * 32 : (i + 1) * 32] for k, v in sample.items()}) for i in range(4)]
    assert whole.updates == single.updates == 4
    np.testing.assert_array_equal(table(stats), table([step for [step], _ in one_by_one]))  # NaN equals NaN
    np.testing.assert_array_equal(priorities, np.concatenate([p for _, p in one_by_one]))
    with pytest.raises(ValueError, match="does not split into 3 equal minibatches"):
        whole.update(sample, 3)


def test_twin_critics_run_as_one_call_and_equal_two_separate_networks(pendulum):
    cfg = algo_config(load_config(["algo=ddpg", "algo.hidden_sizes=[16,8]", "algo.twin_critics=true"]))
    learner = ddpg.make_learner(*pendulum, cfg, torch.device("cpu"))
    data = {k: torch.as_tensor(v) for k, v in batch(10, rewards=0.0).items() if k in ("obs", "actions")}
    both = learner.critics(torch.cat([data["obs"], data["actions"]], -1), False).squeeze(-1)
    assert both.shape == (2, 10) and not torch.allclose(both[0], both[1])  # two differently initialized critics
    for i in range(2):
        x = torch.cat([data["obs"], data["actions"]], -1)
        for layer, (w, b) in enumerate(zip(learner.critics.weights, learner.critics.biases, strict=True)):
            x = x @ w[i] + b[i]
            x = torch.relu(x) if layer < 2 else x
        torch.testing.assert_close(both[i], x.squeeze(-1))
    # The actor's loss reaches the critic's input, never its weights.
    learner.actor_loss(data["obs"]).backward()
    assert all(p.grad is None for p in learner.critics.parameters())
    assert all(p.grad is not None for p in learner.actor.parameters())


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
    stats_a, prio_a = a.update(data, 2)
    stats_b, prio_b = b.update(data, 2)
    assert stats_a == stats_b and np.array_equal(prio_a, prio_b)
    for key, value in a.params()["actor"].items():
        np.testing.assert_array_equal(value, b.params()["actor"][key])


def test_a_non_finite_step_is_skipped_in_the_optimizer_and_the_next_one_learns(pendulum):
    """A minibatch with an infinite reward changes no parameter and no optimizer moment; the sample's other
    minibatch still steps, and only the skipped one's priorities are NaN."""
    cfg = algo_config(load_config(["algo=ddpg", "algo.hidden_sizes=[16]", "algo.policy_delay=1"]))
    learner = ddpg.make_learner(*pendulum, cfg, torch.device("cpu"))
    learner.update(batch(32, rewards=1.0))  # optimizer state exists from here on
    saved = lambda: [t.clone() for t in everything(learner)]
    before = saved()
    [stats], priorities = learner.update(batch(32, rewards=float("inf")))
    assert stats["nonfinite_skipped"] == 1.0 and np.isnan(stats["critic_loss"]) and np.isnan(priorities).all()
    for now, then in zip(everything(learner), before, strict=True):
        torch.testing.assert_close(now, then, rtol=0, atol=0)
    poisoned = batch(32, rewards=float("inf"))
    mixed = {k: np.concatenate([poisoned[k], v]) for k, v in batch(32, rewards=1.0).items()}
    stats, priorities = learner.update(mixed, 2)
    assert [s["nonfinite_skipped"] for s in stats] == [1.0, 0.0]
    assert np.isnan(priorities[:32]).all() and np.isfinite(priorities[32:]).all()
    assert any(not torch.equal(now, then) for now, then in zip(everything(learner), before, strict=True))


@pytest.mark.slow
def test_compiled_update_matches_the_eager_one(pendulum):
    """torch.compile of the critic and actor losses (inductor; seconds on CPU) gives the eager numbers."""
    overrides = ["algo=ddpg", "algo.hidden_sizes=[32,32]", "algo.twin_critics=true", "algo.target_policy_noise=0.2"]
    cfg = algo_config(load_config(overrides))
    eager, compiled = (ddpg.make_learner(*pendulum, cfg, torch.device("cpu"), compile=c) for c in (False, True))
    sample = {k: np.concatenate([v, v[::-1]]) for k, v in batch(64, rewards=1.0).items()}
    for _ in range(3):
        stats_eager, prio_eager = eager.update(sample, 4)
        stats_compiled, prio_compiled = compiled.update(sample, 4)
    assert compiled.compile, "the compiled step fell back to eager"
    np.testing.assert_allclose(table(stats_compiled), table(stats_eager), rtol=0, atol=1e-5)
    np.testing.assert_allclose(prio_compiled, prio_eager, atol=1e-5)
    for a, b in zip(everything(eager), everything(compiled), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.gpu
def test_cuda_graph_update_matches_the_eager_one(pendulum):
    """On CUDA, compile=True replays the critic-only and the actor step each as a captured graph."""
    overrides = ["algo=ddpg", "algo.hidden_sizes=[32,32]", "algo.twin_critics=true", "algo.target_policy_noise=0.2"]
    cfg = algo_config(load_config(overrides))
    cuda = torch.device("cuda")
    eager, graphed = (ddpg.make_learner(*pendulum, cfg, cuda, compile=c) for c in (False, True))
    sample = {k: np.concatenate([v, v[::-1]]) for k, v in batch(64, rewards=1.0).items()}
    for _ in range(4):  # past the warm-up calls: both kinds of step captured and replayed
        stats_eager, prio_eager = eager.update(sample, 4)
        stats_graphed, prio_graphed = graphed.update(sample, 4)
    assert graphed.compile and all(step.graph is not None for step in graphed.step_fns.values())
    np.testing.assert_allclose(table(stats_graphed), table(stats_eager), rtol=0, atol=1e-4)
    np.testing.assert_allclose(prio_graphed, prio_eager, atol=1e-4)
