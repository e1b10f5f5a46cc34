"""The CLI shows what exists: `surreal run --help` (algorithms, presets, env families, read from where they are
defined), `surreal run --cfg job` (the composed config, nothing started), `surreal config` (every key, its default
and its doc, from the typed config), `surreal --version`."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata, resources

import pytest
import yaml

import surreal
from conftest import REPO
from surreal.config import load_config, read_config
from surreal.config.reference import experiment_keys, field_docs
from surreal.config.schema import ALGORITHMS, AlgoConfig, ExperimentConfig
from surreal.launch.catalog import config_listing, env_families, format_value


def surreal_cli(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "surreal", *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def test_version_is_the_installed_package_version():
    out = surreal_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"surreal {surreal.__version__}"
    assert surreal.__version__ == metadata.version("surreal-rl"), "pyproject.toml and surreal.__version__ agree"


def test_run_help_lists_every_algorithm_preset_and_env_family():
    out = surreal_cli("run", "--help")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for name, cls in ALGORITHMS.items():
        assert f"\n  {name} " in text, name
        line = text.split(f"\n  {name} ")[1].splitlines()[0]
        assert ("Discrete actions" in line) == ("discrete" in cls.action_spaces), line
    folder = resources.files("surreal.conf").joinpath("preset")
    presets = [e.name.removesuffix(".yaml") for e in folder.iterdir() if e.name.endswith(".yaml")]
    assert presets and all(f"\n  {p} " in text for p in presets)
    for label, ids, _ in env_families():
        assert f"\n  {label}" in text and ids[0] in text
    assert {"HalfCheetah-v5", "CartPole-v1", "Pendulum-v1", "robosuite:Lift"} <= set(text.replace(",", " ").split())
    assert "HalfCheetah-v4" not in text, "one version per env: the newest"


def test_plain_help_does_not_import_gymnasium_for_other_commands():
    """`surreal role replay` runs in an image without gymnasium: only `run --help` reads the env registry."""
    code = (
        "import sys; from surreal.cli import build_parser; build_parser(); "
        "assert 'gymnasium' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_cfg_job_prints_the_composed_config_and_starts_nothing(tmp_path):
    overrides = ["algo=ddpg", "env=Pendulum-v1", "algo.learning_starts=1000", "actors=3"]
    out = surreal_cli("run", "--cfg", "job", *overrides, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    path = tmp_path / "printed.yaml"
    path.write_text(out.stdout)
    assert read_config(path) == load_config(overrides)
    assert yaml.safe_load(out.stdout)["algo"]["learning_starts"] == 1000
    assert list(tmp_path.iterdir()) == [path], "no run folder, no runs/"
    bad = surreal_cli("run", "--cfg", "job", "topology.actorz=2", cwd=tmp_path)
    assert bad.returncode == 2 and "topology.actorz" in bad.stderr and not bad.stdout


def test_every_config_key_has_a_doc():
    """`surreal config` and the chart's schema describe every key: a field added without a comment fails here."""
    for name in ALGORITHMS:
        undocumented = [k.key for k in experiment_keys(name) if not k.doc.strip()]
        assert not undocumented, f"algo={name}: document these fields where they are declared: {undocumented}"


def test_a_field_doc_is_the_comment_above_it_and_on_its_line_and_a_redefinition_keeps_the_base_doc():
    from surreal.algos.sac_config import SACConfig

    docs = field_docs(ExperimentConfig)
    assert docs["total_env_steps"].startswith("the training budget in env steps")
    assert field_docs(type(ExperimentConfig().actor))["rollout_ahead"].startswith("On-policy throttle:")
    replay = field_docs(type(ExperimentConfig().replay))
    assert replay["capacity_bytes"].startswith("And bytes per shard") and replay["alpha"].startswith("prioritized")
    assert field_docs(SACConfig)["name"] == field_docs(AlgoConfig)["name"], "a redefined field keeps the base doc"


def test_config_lists_every_key_with_its_default_and_doc():
    out = surreal_cli("config")
    assert out.returncode == 0, out.stderr
    for name in ALGORITHMS:
        assert f"# algo={name}" in out.stdout
        defaults = load_config([f"algo={name}"])
        for key in experiment_keys(name):
            node = defaults
            for part in key.key.split("."):
                node = getattr(node, part)
            expected = "auto" if key.key == "replay.mode" else format_value(node)  # `auto` resolves when composed
            assert f"{key.key}: {key.type} = {expected}" in out.stdout, key.key


def test_config_prefix_and_algo_narrow_the_listing():
    listing = config_listing("learner.eval")
    assert listing.splitlines()[0] == "learner.eval_episodes: int = 10"
    assert "learner.eval_interval: int = 25000" in listing and "learner.prefetch" not in listing
    lr = config_listing("algo.lr")
    assert "# algo=ppo\nalgo.lr: float = 0.0003" in lr and "# algo=es\nalgo.lr: float = 0.01" in lr
    assert "# algo=ddpg" not in lr, "ddpg has actor_lr and critic_lr, no lr"
    sac = config_listing("algo", "sac")
    assert "algo.critic_hidden_sizes: list[int] = [256, 256]" in sac and "# algo=ppo" not in sac
    assert "algo.seed" not in config_listing(), "algo.seed follows the top-level seed: not a key to set"


@pytest.mark.parametrize(
    ("args", "says"),
    [(["config", "learnr"], "did you mean learner"), (["config", "--algo", "a3c"], "is not one of ppo")],
)
def test_config_refuses_what_matches_nothing_in_one_line(args, says):
    out = surreal_cli(*args)
    assert out.returncode == 2 and says in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_the_configuration_reference_page_is_what_the_typed_config_says(tmp_path):
    """docs/configuration.md is generated (`make config-reference`): a key added, removed, retyped, redefaulted or
    redocumented without regenerating it fails here, and the check itself catches a stale page."""
    from surreal.launch.catalog import config_reference_markdown, main

    page = REPO / "docs" / "configuration.md"
    assert page.read_text(encoding="utf-8") == config_reference_markdown(), "run `make config-reference`"
    stale = tmp_path / "configuration.md"
    stale.write_text(config_reference_markdown().replace("| `seed` | int | `1` |", "| `seed` | int | `2` |"))
    assert main([str(stale), "--check"]) == 1 and main([str(page), "--check"]) == 0
    assert "| `algo.clip_coef` |" in page.read_text(encoding="utf-8"), "every algorithm's keys are listed"
