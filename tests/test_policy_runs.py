"""Per algorithm: a few updates in serial mode, then the run's policy artifact, loaded in a fresh process with
nothing else from the run, acts as the learner's policy does on 1,000 observations of the real env, bit for bit;
its ONNX and TorchScript exports agree with it within 1e-5; `surreal eval` replays the run's final evaluation."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from bench.policy_act import observations

from surreal.algos import get_algorithm
from surreal.cli import main
from surreal.config import algo_config, load_config
from surreal.envs import make_env
from surreal.launch.serial import run_serial
from surreal.policy.artifact import FILE_NAME, POLICY_DIR, read_policy_file
from surreal.policy.load import load_policy
from surreal.runtime.checkpoint import CheckpointStore

OFF_POLICY = ["env=Pendulum-v1", "actor.chunk_steps=64", "algo.learning_starts=256", "algo.replay_ratio=0.25"]
OFF_POLICY += ["algo.batch_size=32", "steps=384"]
RUNS = {
    "ppo": ["algo=ppo", "env=HalfCheetah-v5", "actor.chunk_steps=64", "algo.batch_size=128"]
    + ["algo.minibatch_size=64", "algo.update_epochs=2", "steps=384"],
    "ddpg": ["algo=ddpg", "algo.hidden_sizes=[32,32]", *OFF_POLICY],
    "sac": ["algo=sac", "algo.hidden_sizes=[32,32]", "algo.critic_hidden_sizes=[32,32]", *OFF_POLICY],
    # CrossQ as its preset has it (batch renormalization in the actor too), critics made small for speed; a short
    # warm-up so the renormalization's corrections are on in these few updates.
    "crossq": ["preset=crossq", "algo.critic_hidden_sizes=[64,64]", "algo.renorm_warmup=4", *OFF_POLICY],
    "es": ["algo=es", "env=InvertedPendulum-v5", "algo.batch_size=4", "algo.pairs_per_chunk=4"]
    + ["algo.hidden_sizes=[16]", "algo.noise_table_size=100000", "steps=2000"],
}
COMMON = ["device=cpu", "actors=1", "seed=11", "learner.eval_episodes=2"]

ACT_IN_A_FRESH_PROCESS = """
import sys, numpy as np, surreal
policy = surreal.load_policy(sys.argv[1])
np.save(sys.argv[3], policy.act(np.load(sys.argv[2])))
"""


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


@pytest.fixture(scope="module", params=sorted(RUNS))
def trained(request, tmp_path_factory):
    name = request.param
    cfg = load_config([*COMMON, *RUNS[name]])
    run_dir = tmp_path_factory.mktemp(name)
    result = run_serial(cfg, run_dir)
    assert result is not None and result["updates"] >= 2, result
    return name, cfg, run_dir, result


def test_the_artifact_in_a_fresh_process_acts_as_the_learner_bit_for_bit(trained, tmp_path):
    name, cfg, run_dir, result = trained
    alone = tmp_path / "alone" / FILE_NAME
    alone.parent.mkdir()
    shutil.copy(run_dir / POLICY_DIR / FILE_NAME, alone)  # nothing else of the run goes along
    obs = observations(cfg.env.id, 1000)
    np.save(tmp_path / "obs.npy", obs)
    subprocess.run(
        [sys.executable, "-c", ACT_IN_A_FRESH_PROCESS, str(alone), str(tmp_path / "obs.npy"), str(tmp_path / "a.npy")],
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    loaded = np.load(tmp_path / "a.npy")
    expected = learners_policy(cfg, run_dir).act_deterministic(obs)
    assert loaded.shape == expected.shape == (1000, *make_env(cfg.env.id, 0).action_space.shape)
    assert loaded.dtype == expected.dtype
    assert np.array_equal(loaded, expected), f"{name}: max difference {np.abs(loaded - expected).max()}"
    assert len(np.unique(expected[:, 0])) > 100, "the actions vary with the observations"

    header = read_policy_file(alone)[0]
    assert header["updates"] == result["updates"] and header["env_steps"] == result["env_steps"]
    assert header["evaluation"]["return_mean"] == result["eval_return_mean"]


def test_exports_agree_with_the_policy_within_1e_5(trained, tmp_path, capsys):
    name, cfg, run_dir, _ = trained
    policy = load_policy(run_dir)
    obs = observations(cfg.env.id, 1000, seed=1).astype(np.float32)
    expected = policy.act(obs)

    assert main(["export", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "p.onnx")]) == 0
    assert main(["export", str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "p.pt")]) == 0
    out = capsys.readouterr().out
    assert f"input  obs: float32['batch', {obs.shape[1]}]" in out

    session = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    (inp,), (outp,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.shape[1:], outp.name) == ("obs", [obs.shape[1]], "actions")
    onnx_actions = session.run(None, {"obs": obs})[0]
    assert np.abs(onnx_actions - expected).max() <= 1e-5, name
    assert session.run(None, {"obs": obs[:1]})[0].shape == (1, *expected.shape[1:]), "dynamic batch"
    meta = json.loads(session.get_modelmeta().custom_metadata_map["surreal"])
    assert meta["input"]["shape"] == ["batch", obs.shape[1]] and meta["algorithm"] == cfg.algo.name

    scripted = torch.jit.load(str(tmp_path / "p.pt"))
    with torch.no_grad():
        ts_actions = scripted(torch.from_numpy(obs)).numpy()
        assert scripted(torch.from_numpy(obs[:3])).shape == (3, *expected.shape[1:])
    assert np.abs(ts_actions - expected).max() <= 1e-5, name
    sidecar = json.loads((tmp_path / "p.pt.json").read_text())
    assert sidecar["output"] == {"name": "actions", "shape": ["batch", *expected.shape[1:]], "dtype": "float32"}
    assert sidecar["normalizer_folded_in"] == (cfg.algo.name in ("ppo", "es"))


def test_surreal_eval_replays_the_runs_final_evaluation(trained, tmp_path, capsys):
    name, cfg, run_dir, result = trained
    out = tmp_path / "eval.json"
    assert main(["eval", str(run_dir), "--episodes", "2", "--seed", str(cfg.seed), "--json", str(out)]) == 0
    replayed = json.loads(out.read_text())
    assert replayed["eval_returns"] == result["eval_returns"], name  # the same episodes, the same actions
    assert abs(replayed["eval_return_mean"] - result["eval_return_mean"]) <= 0.01 * abs(result["eval_return_mean"])
    assert "± " in capsys.readouterr().out
