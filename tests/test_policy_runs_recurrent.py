"""What a recurrent policy adds to the contract every algorithm keeps (tests/test_contract.py runs that contract for
recurrent PPO with an LSTM: the artifact in a fresh process acts as the learner over whole episodes, the exports
agree, `surreal eval` replays the run): here for a GRU, whose state is one layer where an LSTM's is two, the loaded
policy keeps one state per env and refuses another batch until reset, the state changes the actions, and the
exports fed back their state agree with it within 1e-5."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from surreal.algos import get_algorithm
from surreal.cli import main
from surreal.config import algo_config, load_config
from surreal.envs import make_env
from surreal.policy.load import load_policy
from surreal.run.serial import run_serial
from surreal.runtime.checkpoint import CheckpointStore
from test_contract import roll as contract_roll

ENV_ID = "InvertedPendulumNoVel-v5"
RUN = ["algo=ppo", f"env={ENV_ID}", "device=cpu", "actors=1", "seed=11", "topology.envs_per_actor=2"]
RUN += ["actor.chunk_steps=32", "algo.batch_size=128", "algo.minibatch_size=64", "algo.update_epochs=2", "steps=384"]
RUN += ["algo.hidden_sizes=[16,16]", "algo.rnn_hidden_size=16", "learner.eval_episodes=12"]  # envs 0, 1: 2 episodes


def roll(act, reset, env_id, seed=0):
    """The contract's loop over whole episodes in 3 envs (tests/test_contract.py), 300 steps: a GRU's episodes here
    are short."""
    return contract_roll(act, reset, env_id, steps=300, seed=seed)


def learners_policy(cfg, run_dir: Path):
    """The policy the learner's final evaluation ran: its last checkpoint's learner, `params()` into `make_policy`."""
    env = make_env(cfg.env.id, 0)
    spaces = env.observation_space, env.action_space
    env.close()
    algo = get_algorithm(cfg.algo.name)
    learner = algo.make_learner(*spaces, algo_config(cfg), torch.device("cpu"))
    newest = CheckpointStore(run_dir / "checkpoints", 1).paths()[-1]
    learner.load_state_dict(torch.load(newest, map_location="cpu", weights_only=True)["learner"])
    policy = algo.make_policy(*spaces, algo_config(cfg), 0, 1)
    policy.load_params(learner.params())
    return policy


@pytest.fixture(scope="module", params=["gru"])
def trained(request, tmp_path_factory):
    cfg = load_config([*RUN, f"algo.recurrent={request.param}"])
    run_dir = tmp_path_factory.mktemp(request.param)
    result = run_serial(cfg, run_dir)
    assert result is not None and result["updates"] >= 2, result
    return request.param, cfg, run_dir, result


def test_the_state_changes_the_actions(trained):
    """Acting on each observation from a zero state gives other actions than carrying the state along."""
    _, cfg, run_dir, _ = trained
    policy = learners_policy(cfg, run_dir)
    expected, ends = roll(policy.act_deterministic, policy.reset, ENV_ID)
    assert ends >= 6, "episodes end, and the states of their envs are reset, many times"
    fresh = learners_policy(cfg, run_dir)
    stateless, _ = roll(lambda obs: (fresh.reset(), fresh.act_deterministic(obs))[1], lambda done: None, ENV_ID)
    assert not np.array_equal(stateless, expected)


def test_a_loaded_recurrent_policy_keeps_one_state_per_env_and_refuses_another_batch_until_reset(trained):
    _, _, run_dir, _ = trained
    policy = load_policy(run_dir)
    obs = np.zeros((3, 2))
    first = policy.act(obs)
    assert not np.array_equal(policy.act(obs), first), "the second step starts from the first step's state"
    with pytest.raises(ValueError, match="holds the state of 3 envs, not 2"):
        policy.act(obs[:2])
    policy.reset(np.array([True, False, False]))
    again = policy.act(obs)
    np.testing.assert_array_equal(again[0], first[0])  # env 0 starts afresh
    policy.reset()
    np.testing.assert_allclose(policy.act(obs[0]), first[0], rtol=0, atol=1e-6)  # one observation: a batch of one


@pytest.mark.system
def test_exports_fed_back_their_state_agree_with_the_policy_within_1e_5(trained, tmp_path, capsys):
    cell, _, run_dir, _ = trained
    policy = load_policy(run_dir)
    expected, _ = roll(policy.act, policy.reset, ENV_ID, seed=1)
    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "p.onnx")]) == 0
    assert main(["export", str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "p.pt")]) == 0
    state_shape = [2 if cell == "lstm" else 1, 16]
    assert f"input  state: float32['batch', {state_shape[0]}, 16]" in capsys.readouterr().out
    sidecar = json.loads((tmp_path / "p.onnx.json").read_text())
    assert sidecar["state_input"] == {
        "name": "state",
        "shape": ["batch", *state_shape],
        "dtype": "float32",
        "initial": "zeros",
    }
    assert sidecar["state_output"]["name"] == "next_state"

    session = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", "state"]
    assert [o.name for o in session.get_outputs()] == ["actions", "next_state"]
    scripted = torch.jit.load(str(tmp_path / "p.pt"))

    def onnx_step(obs, state):
        return session.run(None, {"obs": obs, "state": state})

    def script_step(obs, state):
        with torch.no_grad():
            actions, state = scripted(torch.from_numpy(obs), torch.from_numpy(state))
        return actions.numpy(), state.numpy()

    for step in (onnx_step, script_step):
        held = {"state": np.zeros((3, *state_shape), np.float32)}

        def act(obs, step=step, held=held):
            actions, held["state"] = step(obs.astype(np.float32), held["state"])
            return actions

        def reset(done, held=held):
            if done is not None:
                held["state"][done] = 0.0

        actions, _ = roll(act, reset, ENV_ID, seed=1)
        assert np.abs(actions - expected).max() <= 1e-5, step.__name__
    one = onnx_step(np.zeros((1, 2), np.float32), np.zeros((1, *state_shape), np.float32))
    assert one[0].shape == (1, 1) and one[1].shape == (1, *state_shape), "dynamic batch"
