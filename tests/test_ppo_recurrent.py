"""Recurrent PPO (`algo.recurrent=lstm|gru`): the state travels with the chunks and resets at episode boundaries on
both sides; the learner's sequence update equals a plain loop written from the cell's equations; the masked-velocity
tasks hide exactly the velocities; the config refuses what cannot work."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal.algos.ppo.config import PPOConfig
from surreal.algos.ppo.learner import PPOLearner
from surreal.algos.ppo.policy import PPOPolicy, chunk_fields, make_collector
from surreal.algos.ppo.recurrent import rnn_state_shape
from surreal.config import ConfigError, load_config
from surreal.envs import make_env, make_vec_env
from surreal.proto.codec import flatten
from surreal.proto.wire import PER_ENV, ReplyLayout, check_fields

torch.set_num_threads(1)

ENV_ID = "InvertedPendulumNoVel-v5"  # episodes of a barely trained policy end every ~10-40 steps: resets in chunks
T = 32


def config(cell: str, **changes) -> PPOConfig:
    small = dict(hidden_sizes=[16, 16], rnn_hidden_size=16, batch_size=256, minibatch_size=64, update_epochs=2)
    return dataclasses.replace(PPOConfig(seed=3, recurrent=cell, **small), **changes)


def spaces_of(env_id: str = ENV_ID):
    env = make_env(env_id, 0)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def collectors(cfg: PPOConfig, params: dict | None = None, actors: int = 2, envs: int = 2):
    """One recurrent collector per actor (through `make_collector`, as an actor builds it), policies on `params`."""
    out = []
    for actor in range(actors):
        vec = make_vec_env(ENV_ID, envs, seed=10 * actor)
        policy = PPOPolicy(vec.single_observation_space, vec.single_action_space, cfg, actor_index=actor)
        if params is not None:
            policy.load_params(params)
        out.append(make_collector(vec, policy, cfg, actor, T))
    return out


def chunks_of(cfg: PPOConfig, count: int, params: dict | None = None):
    """`count` chunks of [T, 2] from two actors taking turns."""
    cs = collectors(cfg, params)
    chunks = [cs[i % 2].collect(0) for i in range(count)]
    for c in cs:
        c.envs.close()
    return chunks


def trained_learner(cfg: PPOConfig) -> PPOLearner:
    """A learner one update in: weights and observation statistics away from their initial values."""
    learner = PPOLearner(*spaces_of(), cfg, torch.device("cpu"))
    learner.update(chunks_of(cfg, 4, learner.params()), progress=0.0)
    return learner


# -- the cell's equations, written out ---------------------------------------------------------------------


def cell_step(cell: torch.nn.Module, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """One step of an LSTM (state [2, H]: h, c) or a GRU (state [1, H]) as the PyTorch docs write the equations."""
    if isinstance(cell, torch.nn.LSTMCell):
        h, c = state
        i, f, g, o = (x @ cell.weight_ih.T + cell.bias_ih + h @ cell.weight_hh.T + cell.bias_hh).chunk(4)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return torch.stack([h, c])
    (h,) = state
    xr, xz, xn = (x @ cell.weight_ih.T + cell.bias_ih).chunk(3)
    hr, hz, hn = (h @ cell.weight_hh.T + cell.bias_hh).chunk(3)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return ((1 - z) * n + z * h)[None]


def reference_features(cell, obs, state, starts):
    """One sequence, step by step: obs [T, D], state [L, H], starts [T] -> (h after each step [T, H], states)."""
    features, states = [], []
    for t in range(len(obs)):
        if starts[t]:
            state = torch.zeros_like(state)
        state = cell_step(cell, obs[t], state)
        features.append(state[0])
        states.append(state)
    return torch.stack(features), torch.stack(states)


def reference_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """One env's column, step by step, as the GAE paper writes it with episode boundaries."""
    out, running = np.zeros(len(rewards)), 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_values[t] * (0.0 if terminated[t] else 1.0) - values[t]
        running = delta + gamma * lam * (0.0 if terminated[t] or truncated[t] else running)
        out[t] = running
    return out


# -- the state travels with the chunks and resets at episode ends ----------------------------------------


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_an_actor_zeroes_an_envs_state_after_its_episode_ends_and_chunks_carry_the_start_state(cell):
    cfg = config(cell)
    (collector,) = collectors(cfg, actors=1, envs=3)
    policy = collector.policy
    seen: list[np.ndarray] = []  # the state each act starts from
    act = policy.act

    def recording_act(obs):
        seen.append(policy.state_for(len(obs)).numpy().copy())
        return act(obs)

    policy.act = recording_act  # type: ignore[method-assign]
    chunks = [collector.collect(0) for _ in range(3)]
    done = np.concatenate([(c.arrays["terminated"] | c.arrays["truncated"]) for c in chunks])  # [3T, K]
    states = np.stack(seen)  # [3T, K, L, H]
    assert states.shape == (3 * T, 3, *rnn_state_shape(cfg))
    assert done[:-1].sum() >= 6, "episodes end inside and across chunks"
    zero = ~states.any(axis=(2, 3))
    assert zero[0].all(), "every env starts from zeros"
    np.testing.assert_array_equal(zero[1:], done[:-1])  # zero exactly after a done step, never otherwise
    for i, chunk in enumerate(chunks):
        np.testing.assert_array_equal(chunk.arrays[PER_ENV]["rnn_state"], states[i * T])
    check_fields(dict(flatten(chunks[1].arrays)), chunk_fields(*spaces_of(), cfg), 2, "test")


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_learner_unrolls_each_chunk_as_the_actor_acted_episode_boundaries_included(cell):
    """Under the actor's own parameters the learner's recomputed log-probabilities are the recorded ones (ratio 1)
    at every step, after mid-chunk episode ends and from the stored start states; ignoring the ends breaks that."""
    cfg = config(cell)
    learner = trained_learner(cfg)
    chunks = chunks_of(cfg, 4, learner.params())[2:]  # chunks that start mid-episode, from a non-zero state
    ((b, _),) = learner.prepare(chunks)
    assert b["starts"].any() and b["rnn_state"].abs().sum(dim=(1, 2)).gt(0).any()
    model = learner.model

    def logprobs(starts):
        with torch.no_grad():
            features = model.unroll(b["obs"], b["rnn_state"], starts)[0]
            return model.head.log_prob_entropy(features, b["actions"])[0]

    torch.testing.assert_close(logprobs(b["starts"]), b["logprobs"], atol=1e-5, rtol=0)
    assert (logprobs(torch.zeros_like(b["starts"])) - b["logprobs"]).abs().max() > 1e-3


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_prepared_sequences_match_a_step_by_step_computation(cell):
    """Values, next values (the final observation seen from the state its episode reached), GAE, the start states
    and the episode starts of each env column, against a per-column loop over the cell's equations."""
    cfg = config(cell, reward_scale=False)
    learner = trained_learner(cfg)
    chunks = chunks_of(cfg, 2, learner.params())
    ((b, _),) = learner.prepare(chunks)
    model, column = learner.model, 0
    for chunk in chunks:
        a = chunk.arrays
        for k in range(a["rewards"].shape[1]):
            obs = torch.from_numpy(learner.obs_rms.normalize(a["obs"][:, k], cfg.obs_clip))
            next_obs = torch.from_numpy(learner.obs_rms.normalize(a["next_obs"][:, k], cfg.obs_clip))
            done = a["terminated"][:, k] | a["truncated"][:, k]
            starts = np.concatenate([[False], done[:-1]])
            start = torch.from_numpy(a[PER_ENV]["rnn_state"][k])
            with torch.no_grad():
                features, states = reference_features(model.rnn.cell, obs, start, starts)
                values = model.head.value(features).numpy()
                after = [cell_step(model.rnn.cell, next_obs[t], states[t])[0] for t in range(T)]
                next_values = model.head.value(torch.stack(after)).numpy()
            advantages = reference_gae(
                a["rewards"][:, k], values, next_values, a["terminated"][:, k], a["truncated"][:, k], 0.99, 0.95
            )
            np.testing.assert_array_equal(b["starts"][column].numpy(), starts)
            np.testing.assert_array_equal(b["rnn_state"][column].numpy(), start.numpy())
            np.testing.assert_allclose(b["values"][column].numpy(), values, atol=1e-5, rtol=0)
            np.testing.assert_allclose(b["advantages"][column].numpy(), advantages, atol=1e-4, rtol=0)
            np.testing.assert_allclose(b["returns"][column].numpy(), advantages + values, atol=1e-4, rtol=0)
            column += 1
    assert column == len(b["obs"]) == 4


# -- the update against a plain loop ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cell, switches",
    [("lstm", {}), ("gru", {}), ("lstm", {"clip_vloss": True, "norm_adv": True, "vf_coef": 0.5})],
    ids=["lstm", "gru", "lstm-cleanrl"],
)
def test_the_sequence_update_matches_a_plain_loop_over_whole_sequences(cell, switches):
    """One update from identical state: the learner's step equals a loop that, per minibatch of whole sequences (drawn
    in the same order), runs each sequence step by step through the cell's equations from its start state, zeroes it
    at episode starts, and applies CleanRL's loss with default Adam; parameters agree to 1e-5."""
    cfg = config(cell, **switches)
    chunks = chunks_of(cfg, 4)  # 4 chunks of [32, 2]: 8 sequences, 2 to a minibatch of 64 steps, 4 per epoch
    learner, reference = (PPOLearner(*spaces_of(), cfg, torch.device("cpu")) for _ in "ab")
    stats = learner.update(chunks, progress=0.25)
    assert stats["batch_transitions"] == 256

    ((b, _),) = reference.prepare(chunks)
    assert b["starts"].any(), "episodes start inside the sequences"
    agent = reference.model
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.lr * 0.75, eps=1e-5)
    orders = [torch.randperm(len(b["obs"]), generator=reference.generator) for _ in range(cfg.update_epochs)]
    per_minibatch = cfg.minibatch_size // T
    for order in orders:
        for first in range(0, len(order), per_minibatch):
            mb = order[first : first + per_minibatch]
            features = torch.cat(
                [reference_features(agent.rnn.cell, b["obs"][n], b["rnn_state"][n], b["starts"][n])[0] for n in mb]
            )
            flat = {k: b[k][mb].flatten(0, 1) for k in ("actions", "logprobs", "advantages", "returns", "values")}
            mean = agent.head.actor_mean(features)
            probs = torch.distributions.Normal(mean, agent.head.actor_logstd.expand_as(mean).exp())
            ratio = (probs.log_prob(flat["actions"]).sum(1) - flat["logprobs"]).exp()
            newvalue = agent.head.critic(features).squeeze(-1)
            advantages = flat["advantages"]
            if cfg.norm_adv:
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            pg_loss = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 0.8, 1.2)).mean()
            v_loss = 0.5 * (newvalue - flat["returns"]) ** 2
            if cfg.clip_vloss:
                v_clipped = flat["values"] + torch.clamp(newvalue - flat["values"], -0.2, 0.2)
                v_loss = torch.max(v_loss, 0.5 * (v_clipped - flat["returns"]) ** 2)
            v_loss = v_loss.mean()
            loss = pg_loss - cfg.ent_coef * probs.entropy().sum(1).mean() + cfg.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
            optimizer.step()

    for (name, a), (_, b_) in zip(learner.model.state_dict().items(), agent.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b_, rtol=0, atol=1e-5, msg=name)
    assert any(
        not torch.equal(a, b_)
        for a, b_ in zip(
            learner.model.parameters(),
            PPOLearner(*spaces_of(), cfg, torch.device("cpu")).model.parameters(),
            strict=True,
        )
    ), "the update moved the weights"
    assert stats["policy_loss"] == pytest.approx(pg_loss.item(), abs=1e-5)
    assert stats["value_loss"] == pytest.approx(v_loss.item(), abs=1e-5)


@pytest.mark.gpu
def test_the_sequence_update_on_cuda_matches_the_cpu_one():
    """Batch preparation and the sequence update on the GPU: every tensor where it must be, the same numbers."""
    cfg = config("lstm")
    cpu, cuda = (PPOLearner(*spaces_of(), cfg, torch.device(d)) for d in ("cpu", "cuda"))
    for _ in range(2):
        chunks = chunks_of(cfg, 4, cpu.params())
        stats_cpu, stats_cuda = cpu.update(chunks, 0.1), cuda.update(chunks, 0.1)
    assert stats_cuda == pytest.approx(stats_cpu, abs=1e-4)
    for (name, a), (_, b) in zip(cpu.model.state_dict().items(), cuda.model.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b.cpu(), rtol=0, atol=1e-4, msg=name)


def test_chunks_of_two_lengths_make_minibatches_of_one_length_each():
    """Sequences of different T never share a minibatch: each length gets its own, of minibatch_size // T each."""
    cfg = config("lstm")
    learner = PPOLearner(*spaces_of(), cfg, torch.device("cpu"))
    long, short = chunks_of(cfg, 2), chunks_of(dataclasses.replace(cfg, seed=5), 2)
    short = [
        dataclasses.replace(
            c, arrays={**{k: v[:16] for k, v in c.arrays.items() if k != PER_ENV}, PER_ENV: c.arrays[PER_ENV]}
        )
        for c in short
    ]
    shapes = []
    step = learner._step
    learner._step = lambda minibatch: shapes.append(tuple(minibatch["obs"].shape[:2])) or step(minibatch)  # type: ignore[method-assign]
    stats = learner.update(long + short, progress=0.0)
    assert stats["batch_transitions"] == 2 * 2 * 32 + 2 * 2 * 16
    assert sorted(set(shapes)) == [(2, 32), (4, 16)] and len(shapes) == cfg.update_epochs * (2 + 1)


# -- what the chunks must hold, and the config ------------------------------------------------------------------


def test_a_recurrent_learner_refuses_chunks_without_their_start_state_and_an_mlp_one_refuses_them_with_it():
    spaces = spaces_of()
    recurrent = ReplyLayout(chunk_fields(*spaces, config("lstm")))
    mlp = ReplyLayout(chunk_fields(*spaces, config("lstm", recurrent=None)))
    with_state = dict(flatten(chunks_of(config("lstm"), 2)[0].arrays))
    without = {k: v for k, v in with_state.items() if not k.startswith(PER_ENV)}
    check_fields(with_state, recurrent.fields, 2, "r")
    check_fields(without, mlp.fields, 2, "m")
    for leaves, layout in ((without, recurrent), (with_state, mlp)):
        with pytest.raises(Exception, match="fields missing|unexpected"):
            check_fields(leaves, layout.fields, 2, "bad_chunk_fields")
    gru = {**with_state, f"{PER_ENV}/rnn_state": with_state[f"{PER_ENV}/rnn_state"][:, :1]}
    with pytest.raises(Exception, match="rnn_state"):
        check_fields(gru, recurrent.fields, 2, "bad_chunk_fields")  # an LSTM learner takes no GRU's state


def test_the_config_refuses_an_unknown_cell_and_minibatches_shorter_than_a_chunk():
    base = ["env=InvertedPendulumNoVel-v5", "actor.chunk_steps=128"]
    load_config([*base, "algo.recurrent=lstm", "algo.minibatch_size=256"])
    with pytest.raises(ConfigError, match="algo.recurrent must be one of lstm, gru"):
        load_config([*base, "algo.recurrent=rnn"])
    with pytest.raises(ConfigError, match=r"algo.minibatch_size \(64\) must be >= actor.chunk_steps \(128\)"):
        load_config([*base, "algo.recurrent=gru", "algo.minibatch_size=64"])
    with pytest.raises(ConfigError, match="algo.rnn_hidden_size must be > 0"):
        load_config([*base, "algo.recurrent=lstm", "algo.minibatch_size=256", "algo.rnn_hidden_size=0"])


# -- the masked tasks --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "masked, task, positions",
    [
        ("InvertedPendulumNoVel-v5", "InvertedPendulum-v5", 2),
        ("HalfCheetahNoVel-v5", "HalfCheetah-v5", 8),
        ("HopperNoVel-v5", "Hopper-v5", 5),
        ("Walker2dNoVel-v5", "Walker2d-v5", 8),
    ],
)
def test_a_masked_task_is_its_task_with_only_the_positions_observed(masked, task, positions):
    a, b = gym.make(masked), gym.make(task)
    assert a.observation_space.shape == (positions,) and a.spec.max_episode_steps == b.spec.max_episode_steps
    obs_a, obs_b = a.reset(seed=4)[0], b.reset(seed=4)[0]
    np.testing.assert_array_equal(obs_a, obs_b[:positions])
    qvel = b.unwrapped.data.qvel
    assert len(obs_b) - positions == len(qvel), "what is cut off is the velocities"
    rng = np.random.default_rng(0)
    for _ in range(20):
        action = rng.uniform(-1, 1, a.action_space.shape).astype(np.float32)
        (obs_a, r_a, term_a, trunc_a, _), (obs_b, r_b, term_b, trunc_b, _) = a.step(action), b.step(action)
        np.testing.assert_array_equal(obs_a, obs_b[:positions])
        assert (r_a, term_a, trunc_a) == (r_b, term_b, trunc_b)
        if term_a:
            break
