"""PPO math and plumbing: GAE against a slow reference, params learner -> actor, checkpoints, staleness."""

from __future__ import annotations

import dataclasses
import io
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal.algos import get_algorithm
from surreal.algos.ppo.config import PPOConfig
from surreal.algos.ppo.learner import PPOLearner
from surreal.algos.ppo.nets import CategoricalActorCritic
from surreal.algos.ppo.policy import PPOPolicy
from surreal.algos.ppo.returns import gae
from surreal.envs import make_vec_env
from surreal.proto.wire import Chunk
from surreal.runtime.rollout import RolloutCollector

torch.set_num_threads(1)

ENV_ID = "InvertedPendulum-v5"


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


def test_registry_knows_ppo_names_the_known_on_error_and_imports_torch_lazily():
    assert get_algorithm("ppo").make_learner is not None
    with pytest.raises(ValueError, match="ppo"):
        get_algorithm("a3c")
    code = "import sys, surreal.algos; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture
def setup():
    envs = make_vec_env(ENV_ID, 2, seed=3)
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
    params = learner.params()
    assert all(v.dtype == np.float32 for v in params["policy"].values())
    policy.load_params(params)
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    expected = learner.model.actor_mean(torch.from_numpy(learner.obs_rms.normalize(obs, cfg.obs_clip))).detach()
    np.testing.assert_allclose(policy.act_deterministic(obs), np.clip(expected.numpy(), -3, 3), rtol=1e-6)
    # Two fresh actors with the same index and parameters sample exactly the same actions (reproducible).
    twins = [PPOPolicy(envs.single_observation_space, envs.single_action_space, cfg, actor_index=0) for _ in "ab"]
    for twin in twins:
        twin.load_params(params)
    for _ in range(3):
        (a_env, a_rec), (b_env, b_rec) = (twin.act(obs) for twin in twins)
        np.testing.assert_array_equal(a_env, b_env)
        np.testing.assert_array_equal(a_rec["actions"], b_rec["actions"])
        np.testing.assert_array_equal(a_rec["logprobs"], b_rec["logprobs"])


def test_actors_sample_differently_and_actions_are_recorded_before_clipping(setup):
    envs, cfg, learner, _ = setup
    spaces = envs.single_observation_space, envs.single_action_space
    policies = [PPOPolicy(*spaces, cfg, actor_index=i) for i in (0, 1)]
    blob = learner.params()
    blob["policy"]["actor_logstd"] = np.full((1, 1), 2.0, np.float32)  # std e^2: most samples fall outside [-3, 3]
    for policy in policies:
        policy.load_params(blob)
    obs = np.zeros((256, 4), np.float32)
    (env_a, rec_a), (env_b, rec_b) = (p.act(obs) for p in policies)
    assert not np.array_equal(rec_a["actions"], rec_b["actions"])
    assert rec_a["actions"].dtype == np.float32 and rec_a["logprobs"].shape == (256,)
    assert np.abs(rec_a["actions"]).max() > 3.0
    np.testing.assert_array_equal(env_a, np.clip(rec_a["actions"], -3.0, 3.0))
    # The logprob is of the pre-clip action under the distribution actually sampled from.
    dist = torch.distributions.Normal(learner.model.actor_mean(torch.from_numpy(obs)).detach(), np.exp(2.0))
    expected = dist.log_prob(torch.from_numpy(rec_a["actions"])).sum(-1).numpy()
    np.testing.assert_allclose(rec_a["logprobs"], expected, rtol=1e-5)


def test_first_epoch_ratio_is_one_when_the_actor_ran_the_learners_parameters(setup):
    envs, _cfg, learner, policy = setup
    collector = RolloutCollector(envs, policy, chunk_steps=64, actor_index=0)
    policy.load_params(learner.params())
    learner.update([collector.collect(0)], progress=0.0)  # non-trivial weights and obs statistics
    policy.load_params(learner.params())
    chunk = collector.collect(1)
    ((batch, _),) = learner.prepare([chunk])
    dist = learner.model.distribution(batch["obs"])
    ratio = (dist.log_prob(batch["actions"]).sum(-1) - batch["logprobs"]).exp()
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-5, rtol=0)


@pytest.fixture
def discrete():
    envs = make_vec_env("CartPole-v1", 2, seed=3)
    cfg = PPOConfig(seed=3, batch_size=128, minibatch_size=32, update_epochs=2)
    spaces = envs.single_observation_space, envs.single_action_space
    yield envs, cfg, PPOLearner(*spaces, cfg, torch.device("cpu")), PPOPolicy(*spaces, cfg, actor_index=0)
    envs.close()


def test_discrete_actions_get_a_categorical_head_shared_through_the_same_params_blob(discrete):
    """CartPole: the actor MLP gives logits (no log-std); actors sample indices, record them as int64 with their
    log-probabilities, and act deterministically with the argmax of the learner's logits."""
    envs, cfg, learner, policy = discrete
    assert isinstance(learner.model, CategoricalActorCritic)
    params = learner.params()
    assert {k.split(".")[0] for k in params["policy"]} == {"critic", "actor_logits"}
    assert params["policy"]["actor_logits.4.weight"].shape == (2, 64) and "actor_logstd" not in params["policy"]
    collector = RolloutCollector(envs, policy, chunk_steps=64, actor_index=0)
    policy.load_params(params)
    learner.update([collector.collect(0)], progress=0.0)  # non-trivial weights and obs statistics
    policy.load_params(learner.params())
    chunk = collector.collect(1)
    actions, logprobs = chunk.arrays["actions"], chunk.arrays["logprobs"]
    assert actions.dtype == np.int64 and actions.shape == (64, 2) and set(np.unique(actions)) <= {0, 1}
    ((batch, _),) = learner.prepare([chunk])
    dist = learner.model.distribution(batch["obs"])
    expected = dist.log_prob(torch.from_numpy(actions.reshape(-1))).detach().numpy()
    np.testing.assert_allclose(logprobs.reshape(-1), expected, rtol=1e-5, atol=1e-6)  # ratio 1 in the first epoch
    obs = np.random.default_rng(0).standard_normal((32, 4)).astype(np.float32)
    logits = learner.model.actor_logits(torch.from_numpy(learner.obs_rms.normalize(obs, cfg.obs_clip)))
    np.testing.assert_array_equal(policy.act_deterministic(obs), logits.argmax(-1).numpy())
    stats = learner.update([chunk, collector.collect(2)], progress=0.5)
    assert stats["nonfinite_skipped"] == 0 and 0 < stats["entropy"] <= np.log(2) + 1e-6


def test_discrete_actors_sample_reproducibly_and_a_start_shifts_what_the_env_gets(discrete):
    envs, cfg, learner, _ = discrete
    space = gym.spaces.Discrete(3, start=5)
    twins = [PPOPolicy(envs.single_observation_space, space, cfg, actor_index=1) for _ in "ab"]
    blob = PPOLearner(envs.single_observation_space, space, cfg, torch.device("cpu")).params()
    for twin in twins:
        twin.load_params(blob)
    obs = np.zeros((512, 4), np.float32)
    (env_a, rec_a), (env_b, rec_b) = (twin.act(obs) for twin in twins)
    np.testing.assert_array_equal(rec_a["actions"], rec_b["actions"])
    np.testing.assert_array_equal(env_a, rec_a["actions"] + 5)
    assert set(np.unique(env_a)) == {5, 6, 7}, "near-uniform logits at init: every action drawn"
    assert set(np.unique(twins[0].act_deterministic(obs))) <= {5, 6, 7}


def test_reward_scaling_does_not_depend_on_how_an_actors_stream_is_cut(setup):
    """One actor's stream in one chunk or in two gives the same return statistics; another actor's
    chunk in between does not disturb the first actor's discounted-return carry."""
    envs, cfg, _learner, _policy = setup
    rng = np.random.default_rng(0)
    rewards = rng.standard_normal((10, 2)).astype(np.float32)
    done = rng.random((10, 2)) < 0.2

    def chunk(actor, sl):
        return Chunk({"rewards": rewards[sl], "terminated": done[sl], "truncated": np.zeros_like(done[sl])}, 0, actor)

    whole, pieces = (
        PPOLearner(envs.single_observation_space, envs.single_action_space, cfg, torch.device("cpu")) for _ in range(2)
    )
    whole._scale_rewards(chunk(0, slice(0, 10)))
    pieces._scale_rewards(chunk(0, slice(0, 4)))
    pieces._scale_rewards(chunk(7, slice(0, 10)))  # another actor
    pieces._scale_rewards(chunk(0, slice(4, 10)))
    np.testing.assert_allclose(pieces.return_carry[0], whole.return_carry[0], rtol=1e-12)
    other = PPOLearner(envs.single_observation_space, envs.single_action_space, cfg, torch.device("cpu"))
    other._scale_rewards(chunk(7, slice(0, 10)))
    np.testing.assert_allclose(pieces.return_carry[7], other.return_carry[7], rtol=1e-12)


def test_update_reports_its_statistics_and_anneals(setup):
    envs, cfg, learner, policy = setup
    policy.load_params(learner.params())
    collector = RolloutCollector(envs, policy, chunk_steps=32, actor_index=0)
    chunks = [collector.collect(0), collector.collect(0)]
    stats = learner.update(chunks, progress=0.25)
    assert set(stats) == {
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clipfrac",
        "explained_variance",
        "lr",
        "batch_transitions",
        "nonfinite_skipped",
    }
    assert all(isinstance(v, float) for v in stats.values())
    assert stats["lr"] == pytest.approx(cfg.lr * 0.75) and stats["batch_transitions"] == 128


def test_checkpoint_round_trip_through_weights_only_load_reproduces_the_next_update(setup):
    envs, cfg, learner, policy = setup
    policy.load_params(learner.params())
    collector = RolloutCollector(envs, policy, chunk_steps=64, actor_index=0)
    first, second = collector.collect(0), collector.collect(0)
    learner.update([first], progress=0.1)
    buffer = io.BytesIO()
    torch.save(learner.state_dict(), buffer)
    buffer.seek(0)
    other_seed = dataclasses.replace(cfg, seed=99)  # everything must come from the checkpoint
    restored = PPOLearner(envs.single_observation_space, envs.single_action_space, other_seed, torch.device("cpu"))
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    stats_a = learner.update([second], progress=0.2)
    stats_b = restored.update([second], progress=0.2)
    assert stats_a == stats_b
    for (name, a), (_, b) in zip(learner.model.state_dict().items(), restored.model.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    for key in ("mean", "var", "count"):
        np.testing.assert_array_equal(learner.params()["obs_norm"][key], restored.params()["obs_norm"][key])


# -- the fast update against plain references ----------------------------------------------------------


def numpy_prepare(learner, chunks):
    """The batch as the learner used to prepare it: chunk by chunk, in NumPy, with the per-step return
    carry; laid out as the learner lays it ([T, K_total] time-major, chunks of one T side by side)."""
    cfg = learner.cfg
    groups = {}
    for chunk in chunks:
        groups.setdefault(len(chunk.arrays["rewards"]), []).append(chunk)
    out = {k: [] for k in ("obs", "advantages", "returns", "values")}
    for group in groups.values():
        parts = {k: [] for k in out}
        for chunk in group:
            a = chunk.arrays
            obs = learner.obs_rms.normalize(a["obs"], cfg.obs_clip)
            next_obs = learner.obs_rms.normalize(a["next_obs"], cfg.obs_clip)
            with torch.no_grad():
                values = learner.model.value(torch.from_numpy(obs)).numpy()
                next_values = learner.model.value(torch.from_numpy(next_obs)).numpy()
            done = a["terminated"] | a["truncated"]
            rewards = a["rewards"].astype(np.float64)
            carry = learner.return_carry.get(chunk.actor)
            carry = np.zeros(rewards.shape[1:]) if carry is None else np.asarray(carry)
            discounted = np.empty_like(rewards)
            for t in range(len(rewards)):
                carry = carry * cfg.gamma + rewards[t]
                discounted[t] = carry
                carry = np.where(done[t], 0.0, carry)
            learner.return_carry[chunk.actor] = torch.from_numpy(carry)
            learner.ret_rms.update(discounted.reshape(-1))
            scaled = np.clip(rewards / np.sqrt(learner.ret_rms.var + 1e-8), -cfg.reward_clip, cfg.reward_clip)
            advantages = reference_gae(
                scaled, values, next_values, a["terminated"], a["truncated"], cfg.gamma, cfg.gae_lambda
            )
            for key, value in (("obs", obs), ("advantages", advantages), ("returns", advantages + values)):
                parts[key].append(value)
            parts["values"].append(values)
        for key, value in parts.items():
            joined = np.concatenate(value, axis=1)
            out[key].append(joined.reshape(-1, *joined.shape[2:]))
    return {k: np.concatenate(v) for k, v in out.items()}


def chunks_from_two_actors(spaces, cfg, steps, count, env_id=ENV_ID):
    """`count` chunks of [steps, 2] from actors 0 and 1 taking turns (InvertedPendulum ends episodes often)."""
    collectors = []
    for actor in (0, 1):
        envs = make_vec_env(env_id, 2, seed=10 * actor)
        collectors.append(RolloutCollector(envs, PPOPolicy(*spaces, cfg, actor_index=actor), steps, actor))
    chunks = [collectors[i % 2].collect(0) for i in range(count)]
    for collector in collectors:
        collector.envs.close()
    return chunks


def test_prepare_matches_the_per_chunk_numpy_computation(setup):
    """Whole-batch preparation equals the chunk-by-chunk NumPy one to 1e-5, over two batches (the return
    carry crosses batches and, within a batch, an actor's consecutive chunks), with chunks of two lengths."""
    envs, cfg, _learner, _policy = setup
    spaces = envs.single_observation_space, envs.single_action_space
    fast, slow = (PPOLearner(*spaces, cfg, torch.device("cpu")) for _ in "ab")
    batches = [chunks_from_two_actors(spaces, cfg, 32, 4), chunks_from_two_actors(spaces, cfg, 32, 4)]
    batches[1] += chunks_from_two_actors(spaces, dataclasses.replace(cfg, seed=5), 16, 2)  # another T
    assert any(c.arrays["terminated"].any() for batch in batches for c in batch)
    for chunks in batches:
        ((prepared, _),) = fast.prepare(chunks)
        expected = numpy_prepare(slow, chunks)
        for key, value in expected.items():
            np.testing.assert_allclose(prepared[key].numpy(), value, rtol=0, atol=1e-5, err_msg=key)
        for actor, carry in slow.return_carry.items():
            np.testing.assert_allclose(fast.return_carry[actor].numpy(), carry.numpy(), rtol=1e-12)
        np.testing.assert_allclose(fast.ret_rms.var, slow.ret_rms.var, rtol=1e-12)
        for chunk in chunks:  # the next batch normalizes with moved statistics
            for learner in (fast, slow):
                learner.obs_rms.update(chunk.arrays["obs"].reshape(-1, 4))


@pytest.mark.parametrize(
    "switches", [{}, {"clip_vloss": True, "norm_adv": True, "vf_coef": 0.5}], ids=["defaults", "cleanrl"]
)
def test_update_matches_a_plain_cleanrl_loop_with_the_same_minibatches(setup, switches):
    """One update from identical state: the learner's step equals CleanRL's per-minibatch loop (default
    Adam, torch.distributions) run on the same prepared batch in the same minibatch order, to 1e-5, with the
    packaged defaults and with CleanRL's advantage normalization and value clipping."""
    envs, cfg, _learner, _policy = setup
    cfg = dataclasses.replace(cfg, **switches)
    spaces = envs.single_observation_space, envs.single_action_space
    chunks = chunks_from_two_actors(spaces, cfg, 32, 4)  # 256 transitions: 8 minibatches of 32, 2 epochs
    learner, reference = (PPOLearner(*spaces, cfg, torch.device("cpu")) for _ in "ab")
    stats = learner.update(chunks, progress=0.25)

    ((b, _),) = reference.prepare(chunks)
    agent = reference.model
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.lr * 0.75, eps=1e-5)
    orders = [torch.randperm(len(b["obs"]), generator=reference.generator) for _ in range(cfg.update_epochs)]
    for order in orders:
        for start in range(0, len(order), cfg.minibatch_size):
            mb = order[start : start + cfg.minibatch_size]
            mean = agent.actor_mean(b["obs"][mb])
            probs = torch.distributions.Normal(mean, agent.actor_logstd.expand_as(mean).exp())
            logratio = probs.log_prob(b["actions"][mb]).sum(1) - b["logprobs"][mb]
            ratio = logratio.exp()
            newvalue = agent.value(b["obs"][mb])
            mb_advantages = b["advantages"][mb]
            if cfg.norm_adv:
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
            pg_loss = torch.max(-mb_advantages * ratio, -mb_advantages * torch.clamp(ratio, 0.8, 1.2)).mean()
            v_loss = 0.5 * (newvalue - b["returns"][mb]) ** 2
            if cfg.clip_vloss:
                v_clipped = b["values"][mb] + torch.clamp(newvalue - b["values"][mb], -0.2, 0.2)
                v_loss = torch.max(v_loss, 0.5 * (v_clipped - b["returns"][mb]) ** 2)
            v_loss = v_loss.mean()
            loss = pg_loss - cfg.ent_coef * probs.entropy().sum(1).mean() + cfg.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
            optimizer.step()

    for (name, a), (_, b_) in zip(learner.model.state_dict().items(), agent.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b_, rtol=0, atol=1e-5, msg=name)
    assert stats["policy_loss"] == pytest.approx(pg_loss.item(), abs=1e-5)
    assert stats["value_loss"] == pytest.approx(v_loss.item(), abs=1e-5)


def test_minibatches_have_one_shape_and_the_remainder_sits_the_epoch_out(setup):
    envs, cfg, _learner, policy = setup
    learner = PPOLearner(envs.single_observation_space, envs.single_action_space, cfg, torch.device("cpu"))
    collector = RolloutCollector(envs, policy, chunk_steps=50, actor_index=0)
    shapes = []
    step = learner.step_fn
    learner.step_fn = lambda minibatch: shapes.append(minibatch["obs"].shape) or step(minibatch)
    stats = learner.update([collector.collect(0)], progress=0.0)  # 100 transitions, minibatches of 32
    assert shapes == [(32, 4)] * (3 * cfg.update_epochs) and stats["batch_transitions"] == 100


def test_a_failing_compile_falls_back_to_eager_with_one_log_line(setup, monkeypatch, caplog):
    envs, cfg, _learner, policy = setup

    def broken_compile(fn, **kwargs):
        def fail(*args, **kwargs):
            raise RuntimeError("no compiler here")

        return fail

    monkeypatch.setattr(torch, "compile", broken_compile)
    spaces = envs.single_observation_space, envs.single_action_space
    learner = PPOLearner(*spaces, cfg, torch.device("cpu"), compile=True)
    eager = PPOLearner(*spaces, cfg, torch.device("cpu"))
    collector = RolloutCollector(envs, policy, chunk_steps=64, actor_index=0)
    chunks = [collector.collect(0), collector.collect(0)]
    with caplog.at_level("WARNING", logger="surreal.algos.capture"):
        assert learner.update(chunks, 0.0) == eager.update(chunks, 0.0)
        learner.update(chunks, 0.0)
    assert len(caplog.records) == 1 and "no compiler here" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("env_id", [ENV_ID, "CartPole-v1"])  # the Gaussian head and the categorical one
def test_compiled_update_matches_the_eager_one(setup, env_id):
    """torch.compile of the loss (inductor; tens of seconds on CPU) gives the eager numbers to 1e-5."""
    _envs, cfg, _learner, _policy = setup
    envs = make_vec_env(env_id, 1, seed=0)
    spaces = envs.single_observation_space, envs.single_action_space
    envs.close()
    eager, compiled = (PPOLearner(*spaces, cfg, torch.device("cpu"), compile=c) for c in (False, True))
    for _ in range(2):
        chunks = chunks_from_two_actors(spaces, cfg, 32, 4, env_id)
        stats_eager, stats_compiled = eager.update(chunks, 0.1), compiled.update(chunks, 0.1)
    assert compiled.compile, "the compiled step fell back to eager"
    assert stats_compiled == pytest.approx(stats_eager, abs=1e-5)
    for (name, a), (_, b) in zip(eager.model.state_dict().items(), compiled.model.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("env_id", [ENV_ID, "CartPole-v1"])
def test_cuda_graph_update_matches_the_eager_one(setup, env_id):
    """On CUDA, compile=True replays each minibatch step as a captured graph; same numbers as eager."""
    _envs, cfg, _learner, _policy = setup
    envs = make_vec_env(env_id, 1, seed=0)
    spaces = envs.single_observation_space, envs.single_action_space
    envs.close()
    cuda = torch.device("cuda")
    eager, graphed = (PPOLearner(*spaces, cfg, cuda, compile=c) for c in (False, True))
    for progress in (0.1, 0.6):  # the annealed learning rate reaches the captured graph
        chunks = chunks_from_two_actors(spaces, cfg, 32, 4, env_id)
        stats_eager, stats_graphed = eager.update(chunks, progress), graphed.update(chunks, progress)
    assert graphed.compile and graphed.step_fn.graph is not None
    assert stats_graphed == pytest.approx(stats_eager, abs=1e-4)
    for (name, a), (_, b) in zip(eager.model.state_dict().items(), graphed.model.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-4, msg=name)


def test_a_non_finite_update_is_undone_and_the_next_one_learns(setup):
    envs, cfg, learner, policy = setup
    policy.load_params(learner.params())
    collector = RolloutCollector(envs, policy, chunk_steps=64, actor_index=0)
    good = [collector.collect(0), collector.collect(0)]
    learner.update(good, progress=0.0)  # optimizer state exists from here on
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    moments = [t.clone() for t in learner._updated_in_place()]
    poisoned = [
        dataclasses.replace(c, arrays={**c.arrays, "rewards": np.full_like(c.arrays["rewards"], np.inf)}) for c in good
    ]
    stats = learner.update(poisoned, progress=0.1)
    assert stats["nonfinite_skipped"] == 1.0
    for name, value in learner.model.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0, msg=name)
    for now, then in zip(learner._updated_in_place(), moments, strict=True):
        torch.testing.assert_close(now, then, rtol=0, atol=0)
    stats = learner.update(good, progress=0.2)
    assert stats["nonfinite_skipped"] == 0.0
    assert any(not torch.equal(v, before[k]) for k, v in learner.model.state_dict().items())
