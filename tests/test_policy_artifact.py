"""The policy artifact's file format (surreal/policy/artifact.py): what it holds, that other safetensors readers
read it, and that a damaged or hostile file is one line and exit status 2 with nothing executed."""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from surreal.algos import get_algorithm
from surreal.cli import main
from surreal.config import algo_config, load_config, save_config
from surreal.envs import make_env
from surreal.policy.artifact import (
    FILE_NAME,
    HEADER_KEYS,
    MAX_HEADER_BYTES,
    ArtifactError,
    decode,
    encode,
    read_policy_file,
    write_policy_file,
)
from surreal.policy.build import PolicyRecorder
from surreal.policy.load import load_policy

OVERRIDES = ["algo=ppo", "env=Pendulum-v1", "algo.hidden_sizes=[8,8]", "seed=3"]


def spaces(cfg):
    env = make_env(cfg.env.id, 0)
    env.close()
    return env.observation_space, env.action_space


@pytest.fixture
def artifact(tmp_path) -> Path:
    """A PPO policy artifact of a fresh learner, with observation statistics that are not the prior's."""
    cfg = load_config(OVERRIDES)
    learner = get_algorithm("ppo").make_learner(*spaces(cfg), algo_config(cfg), torch.device("cpu"))
    learner.obs_rms.update(np.random.default_rng(0).normal(3.0, 2.0, (64, 3)))
    path = tmp_path / "policy" / FILE_NAME
    PolicyRecorder(cfg, *spaces(cfg), "abc123").save(path, learner.params(), version=7, env_steps=640, updates=3)
    return path


def eval_fails(capsys, path: Path, *args: str) -> str:
    """`surreal eval path` exits 2 with exactly one line on stderr; that line."""
    assert main(["eval", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("surreal eval: "), err
    return err


def test_the_header_says_what_the_policy_is(artifact):
    header, tensors = read_policy_file(artifact)
    assert set(header) == HEADER_KEYS
    assert header["algorithm"] == "ppo" and header["env"] == {"id": "Pendulum-v1", "kwargs": {}}
    assert header["observation_space"]["shape"] == [3] and header["action_space"]["low"] == [-2.0]
    assert header["action_head"] == {"type": "box", "squash": "none", "clip": True}
    assert header["network"]["hidden_sizes"] == [8, 8]
    assert header["network"]["tensors"]["policy/actor_mean.0.weight"] == [8, 3]
    assert header["normalizer"]["clip"] == 10.0 and header["normalizer"]["tensors"]["mean"] == "obs_norm/mean"
    assert (header["parameter_version"], header["env_steps"], header["updates"]) == (7, 640, 3)
    assert header["evaluation"] is None and header["git_sha"] == "abc123" and header["seed"] == 3
    assert tensors["obs_norm/mean"].dtype == np.float64 and tensors["obs_norm/count"].shape == ()


def test_other_safetensors_readers_read_it(artifact):
    from safetensors import safe_open
    from safetensors.numpy import load_file

    ours = read_policy_file(artifact)[1]
    theirs = load_file(str(artifact))
    assert set(theirs) == set(ours)
    for name, array in ours.items():
        assert theirs[name].dtype == array.dtype and np.array_equal(theirs[name], array), name
    with safe_open(str(artifact), framework="numpy") as f:
        assert json.loads(f.metadata()["surreal.policy"])["algorithm"] == "ppo"


def test_encode_decode_round_trip_every_dtype():
    tensors = {
        "a/w": np.arange(6, dtype=np.float32).reshape(2, 3),
        "a/s": np.array(2.5),
        "flag": np.array(True),
        "ids": np.arange(3, dtype=np.int64),
        "empty": np.zeros((0, 4), np.float32),
    }
    header, back = decode(encode({"x": 1}, tensors))
    assert header == {"x": 1}
    for name, array in tensors.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape
        assert np.array_equal(back[name], array)


def test_a_loaded_policy_acts_as_the_learners_on_one_observation_or_a_batch(artifact):
    cfg = load_config(OVERRIDES)
    header, tensors = read_policy_file(artifact)
    reference = get_algorithm("ppo").make_policy(*spaces(cfg), algo_config(cfg), 0, 1)
    from surreal.proto.codec import unflatten

    reference.load_params(unflatten(list(tensors.items())))
    policy = load_policy(artifact.parent)  # the policy folder
    obs = np.random.default_rng(1).normal(3.0, 4.0, (50, 3))
    assert np.array_equal(policy.act(obs), reference.act_deterministic(obs))
    assert policy.act(obs[0]).shape == (1,) and np.array_equal(policy.act(obs[0]), policy.act(obs[:1])[0])
    assert np.array_equal(policy.act(obs.astype(np.float32)), reference.act_deterministic(obs.astype(np.float32)))
    sampled = policy.act(obs, deterministic=False)
    assert sampled.shape == (50, 1) and not np.array_equal(sampled, policy.act(obs))
    assert np.all(np.abs(policy.act(obs * 100)) <= 2.0), "clipped to the action bounds"
    with pytest.raises(ValueError, match="observations of shape"):
        policy.act(np.zeros((5, 4)))


def test_load_policy_takes_a_run_folder_a_policy_folder_or_the_file(artifact, tmp_path):
    for path in (tmp_path, artifact.parent, artifact):
        assert load_policy(path).metadata["parameter_version"] == 7
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ArtifactError, match="neither a run folder"):
        load_policy(empty)
    with pytest.raises(ArtifactError, match="no such file"):
        load_policy(tmp_path / "missing")


def test_a_checkpoint_loads_as_the_policy_it_holds(tmp_path):
    """A run trained before artifacts existed: its checkpoint and config.yaml make the same policy."""
    cfg = load_config(OVERRIDES)
    learner = get_algorithm("ppo").make_learner(*spaces(cfg), algo_config(cfg), torch.device("cpu"))
    learner.obs_rms.update(np.random.default_rng(0).normal(3.0, 2.0, (64, 3)))
    (tmp_path / "checkpoints").mkdir()
    save_config(cfg, tmp_path / "config.yaml")
    counters = {"env_steps": 640, "updates": 3, "version": 7}
    torch.save({"learner": learner.state_dict(), "counters": counters}, tmp_path / "checkpoints" / "ckpt-0000000003.pt")
    policy = load_policy(tmp_path)  # no policy/: the newest checkpoint
    assert policy.source.endswith("ckpt-0000000003.pt") and policy.metadata["env_steps"] == 640
    reference = get_algorithm("ppo").make_policy(*spaces(cfg), algo_config(cfg), 0, 1)
    reference.load_params(learner.params())
    obs = np.random.default_rng(1).normal(3.0, 4.0, (20, 3))
    assert np.array_equal(policy.act(obs), reference.act_deterministic(obs))


# -- damaged and hostile files: one line, exit 2, nothing executed ------------------------------------------


def rewrite(path: Path, header_edit=None, tensor_edit=None) -> None:
    header, tensors = read_policy_file(path)
    if header_edit:
        header_edit(header)
    if tensor_edit:
        tensor_edit(tensors)
    path.write_bytes(encode(header, tensors))


def test_truncated_weights(artifact, capsys):
    data = artifact.read_bytes()
    artifact.write_bytes(data[:-100])
    assert "cut short" in eval_fails(capsys, artifact)
    artifact.write_bytes(data[:5])
    assert "too short" in eval_fails(capsys, artifact)


def test_wrong_shapes(artifact, capsys):
    def widen(tensors):
        tensors["policy/actor_mean.0.weight"] = np.zeros((9, 3), np.float32)

    rewrite(artifact, tensor_edit=widen)
    assert "actor_mean.0.weight" in eval_fails(capsys, artifact)


def test_a_safetensors_entry_whose_offsets_lie(artifact, capsys):
    data = artifact.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    entries = json.loads(data[8 : 8 + size])
    name = "policy/actor_mean.0.weight"
    entries[name]["shape"] = [8, 4]  # 32 floats claimed over 24 floats' bytes
    text = json.dumps(entries).encode()
    artifact.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + size :])
    assert "needs 128 bytes" in eval_fails(capsys, artifact)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda h: h.update(payload="rm -rf /"), "unknown payload"),
        (lambda h: h.pop("action_space"), "missing action_space"),
        (lambda h: h.update(format_version=2), "format version 2"),
        (lambda h: h.update(format="pickle"), "not a surreal policy"),
        (lambda h: h["algo_config"].update(__reduce__="os.system"), "fields ppo does not: __reduce__"),
        (lambda h: h["algo_config"].update(hidden_sizes="8,8"), "wrong type: hidden_sizes"),
        (lambda h: h.update(algorithm="dqn"), "algorithm 'dqn'"),
        (lambda h: h["normalizer"].update(clip=5.0), "'normalizer' does not describe"),
        (lambda h: h.update(env_steps="640"), "'env_steps' has the wrong type"),
        (lambda h: h["observation_space"].update(shape=[4]), "tensor"),
    ],
)
def test_a_header_with_unknown_missing_or_wrong_keys(artifact, capsys, edit, expected):
    rewrite(artifact, header_edit=edit)
    assert expected in eval_fails(capsys, artifact)


def test_a_header_of_100_mb_is_refused_before_it_is_parsed(artifact, capsys):
    size = 100 * 1024 * 1024
    with open(artifact, "wb") as f:
        f.write(struct.pack("<Q", size))
        f.write(b"{" + b" " * (size - 2) + b"}")
    assert f"over the {MAX_HEADER_BYTES}-byte limit" in eval_fails(capsys, artifact)


class Exploit:
    """Unpickling this runs `touch <marker>`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_renamed_to_the_artifacts_name_executes_nothing(tmp_path, capsys):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"policy": Exploit(marker)})
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / FILE_NAME).write_bytes(payload)
    eval_fails(capsys, tmp_path)
    assert not marker.exists()
    # The same pickle as the checkpoint of a run without a policy folder: torch.load(weights_only) refuses it.
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    save_config(load_config(OVERRIDES), run / "config.yaml")
    torch.save({"learner": Exploit(marker)}, run / "checkpoints" / "ckpt-0000000001.pt")
    assert "not a checkpoint" in eval_fails(capsys, run)
    assert not marker.exists()


def test_writes_are_atomic_and_the_format_is_bounded(tmp_path):
    path = tmp_path / "p" / FILE_NAME
    write_policy_file(path, {"x": 1}, {"w": np.zeros(3, np.float32)})
    assert sorted(p.name for p in path.parent.iterdir()) == [FILE_NAME], "no temporary file left"
    with pytest.raises(ValueError, match="NaN|Out of range"):
        encode({"x": float("nan")}, {})
    with pytest.raises(ValueError, match="dtype"):
        encode({}, {"s": np.array(["text"])})


def test_import_surreal_loads_no_torch():
    code = "import sys, surreal; surreal.load_policy; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_learner_keeps_its_last_finite_policy_and_the_evaluator_its_best(tmp_path, caplog):
    """Parameters holding NaN are never written as a policy: the learner's `save_policy` says so in its log and the
    last finite artifact stays, and the evaluator does not promote them to `best` whatever their score."""
    import logging
    from types import SimpleNamespace

    from surreal.policy.artifact import BEST_DIR, POLICY_DIR
    from surreal.proto.wire import BlobMeta, Params
    from surreal.roles.evaluator import BestPolicy, EvalRow
    from surreal.roles.learner import save_policy

    cfg = load_config(OVERRIDES)
    learner = get_algorithm("ppo").make_learner(*spaces(cfg), algo_config(cfg), torch.device("cpu"))
    finite = learner.params()
    poisoned = {**finite, "policy": {k: np.full_like(v, np.nan) for k, v in finite["policy"].items()}}
    core = SimpleNamespace(
        counters=SimpleNamespace(version=1, env_steps=64, updates=1),
        policy_recorder=PolicyRecorder(cfg, *spaces(cfg), "abc123"),
        run_dir=tmp_path,
        algo_learner=SimpleNamespace(params=lambda: finite),
        log=logging.getLogger("test.learner"),
    )
    path = save_policy(core)  # type: ignore[arg-type]
    assert path == tmp_path / POLICY_DIR / FILE_NAME
    kept = path.read_bytes()
    core.algo_learner.params, core.counters.updates = (lambda: poisoned), 2
    with caplog.at_level(logging.WARNING, "test.learner"):
        assert save_policy(core) is None  # type: ignore[arg-type]
    assert path.read_bytes() == kept and "kept as it was" in caplog.text and "NaN" in caplog.text
    assert sorted(p.name for p in path.parent.iterdir()) == [FILE_NAME], "nothing half-written beside it"

    best = BestPolicy(cfg, *spaces(cfg), tmp_path)
    row = EvalRow(640, 3, 0.0, 1.0, -100.0, 1.0, 10, None)
    assert not best.offer(Params(BlobMeta(3, "a", env_steps=640), poisoned), row)
    assert not (tmp_path / POLICY_DIR / BEST_DIR / FILE_NAME).exists() and best.score == float("-inf")
    assert best.offer(Params(BlobMeta(3, "a", env_steps=640), finite), row)
    assert read_policy_file(tmp_path / POLICY_DIR / BEST_DIR / FILE_NAME)[0]["evaluation"]["return_mean"] == -100.0
