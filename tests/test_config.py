"""Experiment config: defaults, overrides and shorthands, clear errors before anything starts."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from importlib import resources

import pytest
import yaml
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from surreal.algos.ppo.config import PPOConfig
from surreal.config import (
    ConfigError,
    ExperimentConfig,
    TopologyConfig,
    algo_config,
    config_from_env,
    expand_aliases,
    load_config,
    read_config,
    save_config,
    validate,
)
from surreal.config.loading import MOVED_KEYS, _hydra, schema_node
from surreal.config.schema import ALGORITHMS


def test_defaults_are_the_schema_defaults_with_cleanrl_ppo():
    cfg = load_config([])
    assert cfg == ExperimentConfig()
    assert isinstance(cfg.algo, PPOConfig)
    assert (cfg.algo.lr, cfg.algo.batch_size, cfg.algo.minibatch_size, cfg.algo.update_epochs) == (3e-4, 2048, 64, 10)
    assert (cfg.algo.gamma, cfg.algo.gae_lambda, cfg.algo.clip_coef, cfg.algo.max_grad_norm) == (0.99, 0.95, 0.2, 0.5)
    assert cfg.replay.mode == "fifo"


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_the_package_composes_every_schema_key_with_the_classes_defaults(algo):
    """Hydra can only override (without '+') what the composed config holds: experiment.yaml spells out every section
    but `algo`, whose options are the registered config classes themselves, so no YAML repeats an algorithm's
    defaults and none can disagree with them."""

    def keys(node, prefix=""):
        out = set()
        for key in node:
            out.add(prefix + key)
            if OmegaConf.is_dict(node[key]) and key != "kwargs":
                out |= keys(node[key], f"{prefix}{key}.")
        return out

    with _hydra():
        composed = compose(config_name="experiment", overrides=[f"algo={algo}"])
    assert keys(composed) == keys(schema_node(algo))
    loaded = load_config([f"algo={algo}"], tasks=False)
    assert loaded.algo == replace(ALGORITHMS[algo](), seed=loaded.seed)
    assert not (resources.files("surreal.conf") / "algo").is_dir(), "an algorithm's defaults live in its dataclass"


def test_replay_mode_auto_follows_the_algorithm_and_contradictions_are_named():
    assert load_config(["algo=ddpg"]).replay.mode == "uniform"
    assert load_config(["algo=es"]).replay.mode == "fifo"
    assert load_config(["algo=ddpg", "replay.mode=prioritized"]).replay.mode == "prioritized"
    with pytest.raises(ConfigError, match="ddpg is off-policy: replay.mode must be uniform or prioritized"):
        load_config(["algo=ddpg", "replay.mode=fifo"])
    with pytest.raises(ConfigError, match="es is on-policy: replay.mode must be fifo"):
        load_config(["algo=es", "replay.mode=uniform"])
    with pytest.raises(ConfigError, match="deterministic=true is for on-policy"):
        load_config(["algo=ddpg", "deterministic=true", "actors=1"])
    with pytest.raises(ConfigError) as bad:
        load_config(
            ["algo=ddpg", "algo.n_step=0", "algo.tau=2", "algo.noise_type=pink", "actor.chunk_steps=2", "algo.n_step=3"]
        )
    assert all(s in str(bad.value) for s in ("algo.tau", "noise_type", "actor.chunk_steps (2) must be >= algo.n_step"))
    with pytest.raises(ConfigError, match="algo.sigma must be > 0"):
        load_config(["algo=es", "algo.sigma=0"])
    with pytest.raises(ConfigError, match=r"algo.lr.*did you mean"):
        load_config(["algo=es", "algo.lrr=1"])


def test_overrides_and_shorthands():
    cfg = load_config(
        [
            "actors=4",
            "env=Hopper-v5",
            "steps=5000",
            "name=x",
            "algo.lr=1e-3",
            "seed=7",
            "env.kwargs.ctrl_cost_weight=0.2",
            "algo.hidden_sizes=[32,32]",
        ]
    )
    assert (cfg.topology.actors, cfg.env.id, cfg.total_env_steps, cfg.name) == (4, "Hopper-v5", 5000, "x")
    assert (cfg.algo.lr, cfg.algo.hidden_sizes, cfg.env.kwargs) == (1e-3, [32, 32], {"ctrl_cost_weight": 0.2})
    assert cfg.algo.seed == 7, "the algorithm sees the experiment's seed"


def test_expand_aliases_touches_only_the_shorthands():
    assert expand_aliases(["actors=4", "env=Ant-v5", "steps=10", "name=a", "algo=ppo", "env.id=X", "++steps=3"]) == [
        "topology.actors=4",
        "env.id=Ant-v5",
        "total_env_steps=10",
        "name=a",
        "algo=ppo",
        "env.id=X",
        "++total_env_steps=3",
    ]


def test_algo_config_carries_the_top_level_seed_without_touching_the_experiment():
    cfg = ExperimentConfig(seed=5)
    view = algo_config(cfg)
    assert isinstance(view, PPOConfig) and view.seed == 5
    assert cfg.algo.seed == 1 and view is not cfg.algo


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("topology.actor=3", "'topology.actors'"),
        ("algo.lrr=1", "'algo.lr'"),
        ("seed=abc", "seed"),
        ("actors=x", "topology.actors"),
        ("algo=nope", "nope"),
        ("algo.seed=3", "seed=N"),
        ("bogus", "bogus"),
    ],
)
def test_typos_and_wrong_types_name_the_key(override, named):
    with pytest.raises(ConfigError) as info:
        load_config([override])
    message = str(info.value)
    assert named in message
    assert "Traceback" not in message and "search path" not in message and len(message.splitlines()) <= 3


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("steps=1e6", ["steps=1e6", "write steps=1000000"]),
        ("steps=2.5e5", ["write steps=250000"]),
        ("actors=x", ["actors=x", "topology.actors takes an integer"]),
        ("algo.lr=abc", ["algo.lr=abc", "takes a number"]),
        ("learner.compile=maybe", ["learner.compile=maybe", "true or false"]),
        ("+foo=1", ["+foo=1", "unknown config key 'foo'", "`surreal config` lists every key"]),
        ("step=2000", ["step=2000", "did you mean 'steps'?", "`surreal config`"]),
        ("actor=4", ["actor=4", "section of keys", "did you mean 'actors'?"]),
        ("+seed=3", ["+seed=3", "write seed=3"]),
        ("algo=td3", ["algo=td3", "algo=ddpg", "algo.twin_critics=true"]),
        ("preset=td3", ["preset=td3", "algo=ddpg", "algo.twin_critics=true"]),
        ("algo=crossq", ["algo=crossq", "preset=crossq"]),
        ("algo=sacc", ["algo=sacc", "did you mean algo=sac?"]),
        ("preset=cleanrl", ["preset=cleanrl", "did you mean preset=ppo-cleanrl?"]),
        ("seed=1,2,3", ["seed=1,2,3", "needs --multirun", "seed=[...]"]),
        ("bogus", ["'bogus' is not KEY=VALUE"]),
        ("algo.hidden_sizes=[1,", ["algo.hidden_sizes=[1,", "cannot parse"]),
        ("steps=0", ["steps=0: total_env_steps must be > 0"]),
    ],
)
def test_an_error_names_the_override_as_typed_and_what_to_type_instead(override, says):
    """No raw OmegaConf or Hydra text: the override as the user typed it (`steps=`, not `total_env_steps`) and a
    spelling that works."""
    with pytest.raises(ConfigError) as info:
        load_config([override])
    message = str(info.value)
    for text in says:
        assert text in message, (text, message)
    raw = ("Value '", "could not be converted", "not in 'ExperimentConfig'", "Could not find", "hydra.cc", "Ambiguous")
    assert not any(r in message for r in raw), message
    assert len(message.splitlines()) <= 3, message


def test_a_resumed_runs_overrides_get_the_same_messages():
    from surreal.config.loading import apply_overrides

    with pytest.raises(ConfigError, match="write steps=2000000"):
        apply_overrides(load_config([]), ["steps=2e6"])
    with pytest.raises(ConfigError, match="did you mean 'steps'"):
        apply_overrides(load_config([]), ["step=2000"])


def test_every_unknown_key_is_listed_at_once():
    with pytest.raises(ConfigError) as info:
        load_config(["topology.actor=3", "learner.prefech=1", "actors=2"])
    assert "topology.actor'" in str(info.value) and "learner.prefech'" in str(info.value)


def test_bad_values_are_all_listed():
    with pytest.raises(ConfigError) as info:
        load_config(
            [
                "algo.gamma=2",
                "topology.actors=0",
                "device=tpu",
                "algo.minibatch_size=4096",
                "algo.gae_lambda=-0.1",
                "replay.mode=lifo",
                "env=''",
                "name=a/b",
            ]
        )
    message = str(info.value)
    for key in (
        "algo.gamma",
        "topology.actors",
        "device",
        "algo.minibatch_size",
        "algo.gae_lambda",
        "replay.mode",
        "env.id",
        "name=",
    ):
        assert key in message
    assert isinstance(info.value, ValueError)


def test_on_policy_needs_fifo_and_a_batch_worth_of_capacity():
    with pytest.raises(ConfigError, match="on-policy"):
        load_config(["replay.mode=uniform"])
    with pytest.raises(ConfigError, match="replay.capacity"):
        load_config(["replay.capacity=1000"])


def test_deterministic_needs_one_actor_one_shard_and_aligned_batches():
    with pytest.raises(ConfigError) as info:
        load_config(["deterministic=true", "topology.replay_shards=2", "actor.chunk_steps=300"])
    for needed in ("topology.actors=1", "topology.replay_shards=1", "multiple"):
        assert needed in str(info.value)
    assert load_config(["deterministic=true", "actors=1"]).deterministic
    with pytest.raises(ConfigError, match="multiple"):  # 2 envs x 256 steps = 512 divides 2048; 3 x 256 does not
        validate(replace(ExperimentConfig(deterministic=True), topology=TopologyConfig(actors=1, envs_per_actor=3)))


def test_save_read_round_trip_and_errors_in_a_file(tmp_path):
    cfg = load_config(["env=Hopper-v5", "algo.hidden_sizes=[32,32]", "seed=9", "name=rt", "algo.target_kl=0.02"])
    path = save_config(cfg, tmp_path / "run" / "config.yaml")
    assert read_config(path) == cfg
    assert config_from_env({"SURREAL_CONFIG": str(path)}) == cfg
    assert config_from_env({}) == ExperimentConfig()

    path.write_text(path.read_text().replace("total_env_steps", "total_env_stepz"))
    with pytest.raises(ConfigError, match="total_env_stepz.*did you mean 'total_env_steps'"):
        read_config(path)
    path.write_text("seed: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot read"):
        read_config(path)
    with pytest.raises(ConfigError, match="cannot read"):
        read_config(tmp_path / "missing.yaml")


def test_a_partial_file_takes_the_packaged_defaults_of_its_algorithm(tmp_path):
    """The Helm chart mounts only the keys a values file sets; the rest must be what `surreal run` uses."""
    path = tmp_path / "experiment.yaml"
    path.write_text("algo: ppo\nenv: {id: Hopper-v5}\ntopology: {actors: 8}\nseed: 3\n")
    assert read_config(path) == load_config(["env=Hopper-v5", "actors=8", "seed=3"])
    path.write_text("algo: {name: ppo, lr: 1.0e-4}\n")
    assert read_config(path) == load_config(["algo.lr=1e-4"])
    path.write_text("algo: {name: ppo, lrr: 1.0e-4}\n")
    with pytest.raises(ConfigError, match="algo.lrr.*did you mean 'algo.lr'"):
        read_config(path)
    path.write_text("algo: nope\n")
    with pytest.raises(ConfigError, match="'nope' is not a known algorithm"):
        read_config(path)


def test_loads_repeatedly_and_leaves_an_outer_hydra_alone():
    assert load_config(["actors=3"]).topology.actors == 3
    assert load_config([]).topology.actors == 2
    with initialize_config_module(config_module="surreal.conf", version_base="1.3"):
        outer = GlobalHydra.instance().hydra
        assert load_config(["steps=10"]).total_env_steps == 10
        assert GlobalHydra.instance().hydra is outer
    assert not GlobalHydra.instance().is_initialized()


def test_config_imports_neither_torch_nor_gymnasium_for_any_algorithm():
    """The replay and ps images carry neither: every algorithm's config (the registry imports each algorithm folder's
    surreal/algos/<name>/config.py) must load without them."""
    code = (
        "import sys, surreal.config as c; from surreal.config.schema import ALGORITHMS; "
        "[c.load_config([f'algo={name}']) for name in ALGORITHMS]; "
        "assert 'sac' in ALGORITHMS and not {'torch', 'gymnasium'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_registry_lists_the_default_algorithm_first_whatever_was_imported_first():
    """`surreal config`, `surreal run --help`, docs/configuration.md and the chart's schema list the algorithms in the
    registry's order, which must not follow whichever config module a process happened to import first."""
    code = (
        "import surreal.algos.sac.config, surreal.algos.es.config; from surreal.config.schema import ALGORITHMS; "
        "assert list(ALGORITHMS) == ['ppo', 'ddpg', 'es', 'sac'], list(ALGORITHMS)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_preset_that_picks_the_algorithm_types_the_overrides_by_it():
    """`preset=crossq` selects SAC in its defaults list, so SAC's keys are known without `algo=sac`."""
    cfg = load_config(["preset=crossq", "algo.critic_hidden_sizes=[64,64]"])
    assert (cfg.algo.name, cfg.algo.critic_hidden_sizes, cfg.algo.critic_norm) == ("sac", [64, 64], "batch_renorm")
    with pytest.raises(ConfigError, match="unknown config key 'algo.lr'"):
        load_config(["preset=crossq", "algo.lr=1e-3"])


@pytest.mark.parametrize("algo", ["ppo", "es"])
def test_a_config_file_written_before_the_regime_keys_moved_is_read_with_them_moved(tmp_path, algo):
    """A run folder's config.yaml from before `actor.rollout_ahead`, `learner.max_staleness` and
    `actor.overdraft_after_s` moved to the regime's section (`algo.*`) still resumes: the values move with them, and a
    lock-step ES, which has no rollout_ahead, drops the one it never used."""
    path = tmp_path / "config.yaml"
    save_config(load_config([f"algo={algo}"]), path)
    data = yaml.safe_load(path.read_text())
    for old in MOVED_KEYS:
        section, _, key = old.partition(".")
        data["algo"].pop(key, None)
        data[section][key] = {"rollout_ahead": 3, "max_staleness": 7, "overdraft_after_s": 12.5}[key]
    path.write_text(yaml.safe_dump(data))
    cfg = read_config(path)
    assert cfg.algo.overdraft_after_s == 12.5
    assert getattr(cfg.algo, "rollout_ahead", 3) == 3 and getattr(cfg.algo, "max_staleness", 7) == 7
    assert algo == "es" or (cfg.algo.rollout_ahead, cfg.algo.max_staleness) == (3, 7)


@pytest.mark.parametrize("old", sorted(MOVED_KEYS))
def test_an_override_of_a_moved_key_names_where_it_went(old):
    with pytest.raises(ConfigError, match=rf"^{old}=3: {old} moved to {MOVED_KEYS[old]}: write {MOVED_KEYS[old]}=3$"):
        load_config([old + "=3"])
