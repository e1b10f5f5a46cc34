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
from surreal.commands.catalog import config_listing, env_families, format_value
from surreal.config import load_config, read_config
from surreal.config.reference import experiment_keys, field_docs
from surreal.config.schema import ALGORITHMS, AlgoConfig, ExperimentConfig


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
        defaults = load_config([f"algo={name}"], tasks=False)  # the package's: the task defaults need an env
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
    from surreal.commands.catalog import config_reference_markdown, main

    page = REPO / "docs" / "configuration.md"
    assert page.read_text(encoding="utf-8") == config_reference_markdown(), "run `make config-reference`"
    stale = tmp_path / "configuration.md"
    stale.write_text(config_reference_markdown().replace("| `seed` | int | `1` |", "| `seed` | int | `2` |"))
    assert main([str(stale), "--check"]) == 1 and main([str(page), "--check"]) == 0
    assert "| `algo.clip_coef` |" in page.read_text(encoding="utf-8"), "every algorithm's keys are listed"


def test_run_help_lists_no_env_family_every_algorithm_refuses():
    """Toy text's envs have Discrete (or Tuple) observations, which no algorithm takes: they are not offered."""
    out = surreal_cli("run", "--help")
    families = out.stdout.split("env families", 1)[1].split("(not listed", 1)[0]
    assert "FrozenLake" not in families and "toy text" not in families and "Taxi" not in families
    assert "(not listed: toy text, whose spaces no algorithm here takes)" in out.stdout


def test_run_help_lists_the_task_defaults_with_their_claims():
    from surreal.config.tasks import tasks

    out = surreal_cli("run", "--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "a value is the user's, else the preset's, else the task's, else the package's" in text
    for task in tasks().values():
        assert f"{task.label} {task.claim_text()}" in text, task.label


def test_config_with_overrides_names_where_each_value_came_from():
    out = surreal_cli("config", "env=Pendulum-v1", "algo=sac")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("# task Pendulum-v1/sac: eval return >= -250 in 20,000 env steps")
    for line in (
        "total_env_steps: int = 20000 (task: Pendulum-v1/sac)",
        "algo.learning_starts: int = 1000 (task: Pendulum-v1/sac)",
        "algo.name: str = sac (user)",
        "env.id: str = Pendulum-v1 (user)",
        "algo.batch_size: int = 256 (package)",
    ):
        assert line in lines, line
    narrowed = surreal_cli("config", "total_env", "env=Pendulum-v1", "algo=sac", "steps=3000")
    assert narrowed.stdout.splitlines()[1:] == ["total_env_steps: int = 3000 (user)"], narrowed.stdout
    crossq = surreal_cli("config", "algo.critic_hidden", "preset=crossq")
    assert "algo.critic_hidden_sizes: list[int] = [2048, 2048] (preset: crossq)" in crossq.stdout
    bad = surreal_cli("config", "env=Pendulum-v1", "algo=td3")
    assert bad.returncode == 2 and "algo=ddpg with algo.twin_critics=true" in bad.stderr


def test_cfg_job_with_multirun_prints_every_members_config(tmp_path):
    """`--multirun ... --cfg job` must not ask for the --multirun already there: it prints each member's config."""
    out = surreal_cli("run", "--multirun", "seed=1,2", "env=Pendulum-v1", "algo=sac", "--cfg", "job", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    documents = [d for d in out.stdout.split("--- # ") if d]
    assert len(documents) == 2
    for seed, document in zip((1, 2), documents, strict=True):
        header, _, body = document.partition("\n")
        assert header == f"seed={seed} env=Pendulum-v1 algo=sac"
        path = tmp_path / f"member{seed}.yaml"
        path.write_text(body)
        assert read_config(path) == load_config([f"seed={seed}", "env=Pendulum-v1", "algo=sac"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["member1.yaml", "member2.yaml"], "no run folder, no runs/"
    single = surreal_cli("run", "seed=1,2", "--cfg", "job", cwd=tmp_path)
    assert single.returncode == 2 and "seed=1,2: several values make a sweep, which needs --multirun" in single.stderr


def test_a_config_error_is_one_line_naming_the_override_as_typed(tmp_path):
    out = surreal_cli("run", "--cfg", "job", "steps=1e6", cwd=tmp_path)
    assert out.returncode == 2 and not out.stdout
    assert out.stderr == "surreal: steps=1e6: total_env_steps takes an integer: write steps=1000000\n", out.stderr


def test_the_config_errors_docs_cli_shows_are_what_the_cli_prints(tmp_path):
    """docs/cli.md's examples of config errors, each command run as shown: its one line of stderr, exit 2."""
    section = (REPO / "docs" / "cli.md").read_text().split("## Config errors", 1)[1].split("\n## ", 1)[0]
    example = section.split("```\n", 2)[1]
    lines = example.splitlines()
    pairs = [(lines[i][2:], lines[i + 1]) for i in range(0, len(lines), 2)]
    assert len(pairs) >= 5
    for command, printed in pairs:
        argv = command.split()
        assert argv[0] == "surreal", command
        out = surreal_cli(*argv[1:], cwd=tmp_path)
        assert out.returncode == 2 and out.stderr == printed + "\n", (command, out.stderr)
    assert list(tmp_path.iterdir()) == [], "nothing started"
