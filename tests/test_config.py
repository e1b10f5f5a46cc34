"""Experiment config: defaults, overrides and shorthands, clear errors before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from surreal.config import ConfigError, ExperimentConfig, load_config, read_config, save_config


def test_defaults_are_the_schema_defaults_with_cleanrl_ppo():
    cfg = load_config([])
    assert cfg == ExperimentConfig()
    assert (cfg.algo.lr, cfg.algo.batch_size, cfg.algo.minibatch_size, cfg.algo.update_epochs) == (3e-4, 2048, 64, 10)
    assert cfg.replay.mode == "fifo"


def test_overrides_and_shorthands():
    cfg = load_config(["actors=4", "env=Hopper-v5", "steps=5000", "name=x", "algo.lr=1e-3", "seed=7"])
    assert (cfg.topology.actors, cfg.env.id, cfg.total_env_steps, cfg.name) == (4, "Hopper-v5", 5000, "x")
    assert cfg.algo.lr == 1e-3
    assert cfg.algo.seed == 7, "the algorithm sees the experiment's seed"


@pytest.mark.parametrize(
    ("override", "named"),
    [("topology.actor=3", "topology.actor"), ("algo.lrr=1", "algo.lrr"), ("seed=abc", "seed"),
     ("algo=nope", "nope")],
)
def test_typos_and_wrong_types_name_the_key(override, named):
    with pytest.raises(ConfigError) as info:
        load_config([override])
    assert named in str(info.value)
    assert "Traceback" not in str(info.value)


def test_bad_values_are_all_listed():
    with pytest.raises(ConfigError) as info:
        load_config(["algo.gamma=2", "topology.actors=0", "device=tpu", "algo.minibatch_size=4096"])
    message = str(info.value)
    for key in ("algo.gamma", "topology.actors", "device", "algo.minibatch_size"):
        assert key in message


def test_on_policy_needs_fifo_and_deterministic_needs_one_actor_and_aligned_batches():
    with pytest.raises(ConfigError, match="on-policy"):
        load_config(["replay.mode=uniform"])
    with pytest.raises(ConfigError, match="topology.actors=1"):
        load_config(["deterministic=true"])
    with pytest.raises(ConfigError, match="multiple"):
        load_config(["deterministic=true", "actors=1", "actor.chunk_steps=300"])
    assert load_config(["deterministic=true", "actors=1"]).deterministic


def test_save_read_round_trip_and_typo_in_a_file(tmp_path):
    cfg = load_config(["env=Hopper-v5", "algo.hidden_sizes=[32,32]"])
    path = save_config(cfg, tmp_path / "config.yaml")
    assert read_config(path) == cfg
    path.write_text(path.read_text().replace("total_env_steps", "total_env_stepz"))
    with pytest.raises(ConfigError, match="total_env_stepz"):
        read_config(path)


def test_config_does_not_import_torch():
    code = "import sys, surreal.config; surreal.config.load_config([]); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
