"""Task defaults (surreal/conf/tasks.yaml, RL Baselines3 Zoo's idea): an entry fills what neither the user nor a preset
sets, every value's source is known, a run's config.yaml holds them resolved, and every entry's claim is what its
results files in bench/results/ measured with the values it sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from surreal.config import load_config, read_config, save_config
from surreal.config.loading import ALIASES, compose_config, dotted_items
from surreal.config.tasks import METRICS, Task, tasks

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TASKS = sorted(tasks().values(), key=lambda t: t.label)
# Keys a learning run's row never depends on the value of: the name of its folder.
NOT_LEARNING = {"name"}


def value_at(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        if isinstance(node, dict):
            if part not in node:
                return None
            node = node[part]
        else:
            node = getattr(node, part)
    return node


def parsed(override: str) -> tuple[str, Any]:
    """`key=value` as Hydra types it, its shorthand expanded."""
    (item,) = OverridesParser.create().parse_overrides([override])
    key = item.get_key_element().lstrip("+~")
    return ALIASES.get(key, key), item.value()


def preset_values(name: str) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load((REPO / "src" / "surreal" / "conf" / "preset" / f"{name}.yaml").read_text())
    return dict(dotted_items({k: v for k, v in data.items() if k != "defaults"}))


def ran_with(data: dict) -> dict[str, Any]:
    """The values a results file's runs had beyond the package's defaults: a task benchmark's are recorded as the runs
    resolved them (`task_values`); a learning benchmark's are its preset's keys, then its overrides, then its budget
    and actors (bench.learning passes those last)."""
    if data["benchmark"] == "task_presets":
        return dict(data["task_values"])
    ran: dict[str, Any] = {}
    overrides = [parsed(o) for o in data["overrides"]]
    for key, value in overrides:
        if key == "preset":
            ran.update(preset_values(value))
    ran.update((k, v) for k, v in overrides if k != "preset")
    ran.update({"total_env_steps": data["steps"], "topology.actors": data["actors"]})
    ran.pop("env.id", None)
    return ran


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.label)
def test_an_entry_holds_what_its_results_files_measured(task: Task) -> None:
    """Every results file cited ran this env and algorithm with the values the entry sets (a key the entry sets
    otherwise is named in `unlike_results` with why), set nothing else away from the package's defaults, and every
    run in it that completed its budget reached the claim's bar."""
    package = load_config([f"algo={task.algo}", f"env={task.env}"], tasks=False)
    completed = 0
    for name in task.claim.results:
        data = json.loads((RESULTS / name).read_text())
        assert (data["algo"], data["env"]) == (task.algo, task.env), name
        ran = ran_with(data)
        for key, value in task.values.items():
            if key not in task.claim.unlike_results:
                assert ran.get(key, value_at(package, key)) == value, (
                    f"{name}: {key} ran as {ran.get(key)}, not {value}"
                )
        for key, value in ran.items():
            if key not in task.values and key not in task.claim.unlike_results and key not in NOT_LEARNING:
                assert value == value_at(package, key), f"{name} ran with {key}={value}: the entry must set it too"
        for row in data["runs"]:
            if row["status"] != "completed":
                continue  # stopped short of its budget: it says nothing about the budget
            completed += 1
            assert row["env_steps"] >= task.values["total_env_steps"], (name, row["seed"])
            assert row[task.claim.metric] >= task.claim.at_least, (name, row["seed"], row[task.claim.metric])
    assert completed >= 1, f"{task.label}: no completed run backs the claim"
    assert task.claim.metric in METRICS and "total_env_steps" in task.values


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.label)
def test_an_entry_fills_the_keys_of_a_plain_run_and_names_itself_as_their_source(task: Task) -> None:
    composed = compose_config([f"env={task.env}", f"algo={task.algo}"])
    assert composed.task == task
    for key, value in task.values.items():
        assert value_at(composed.config, key) == value, key
        assert composed.sources[key] == f"task: {task.label}", key
    assert composed.sources["env.id"] == composed.sources["algo.name"] == "user"
    others = {k for k, s in composed.sources.items() if s.startswith("task")} - set(task.values) - {"env.kwargs"}
    assert not others, others


def test_the_user_wins_over_the_task_and_a_cadence_longer_than_the_run_is_dropped() -> None:
    composed = compose_config(["env=Pendulum-v1", "algo=sac", "steps=3000", "algo.learning_starts=500"])
    cfg = composed.config
    assert (cfg.total_env_steps, cfg.algo.learning_starts) == (3000, 500)
    assert composed.sources["total_env_steps"] == composed.sources["algo.learning_starts"] == "user"
    assert composed.sources["topology.actors"] == "task: Pendulum-v1/sac", "the rest of the entry still applies"
    task_cadence = tasks()[("Pendulum-v1", "sac")].values["learner.eval_interval"]
    assert task_cadence >= 3000 and composed.sources["learner.eval_interval"] == "package"
    assert cfg.learner.eval_interval == load_config(["algo=sac"], tasks=False).learner.eval_interval


def test_a_named_preset_wins_over_the_task() -> None:
    """preset=lift-sac sets robosuite:Lift and its own budget: the Lift entry fills only what the preset leaves."""
    composed = compose_config(["preset=lift-sac"])
    lift = tasks()[("robosuite:Lift", "sac")]
    assert composed.config.total_env_steps == 1_000_000 != lift.values["total_env_steps"]
    assert composed.sources["total_env_steps"] == "preset: lift-sac"
    assert composed.sources["algo.name"] == composed.sources["env.id"] == "preset: lift-sac"
    assert composed.sources["topology.actors"] == "task: robosuite:Lift/sac"


def test_without_an_entry_or_with_tasks_off_the_package_defaults_apply() -> None:
    plain = compose_config(["env=Hopper-v5", "algo=sac"])
    assert plain.task is None and set(plain.sources.values()) == {"user", "package"}
    off = load_config(["env=Pendulum-v1", "algo=sac"], tasks=False)
    assert off.total_env_steps == 1_000_000 and off.algo.learning_starts == 10_000
    assert load_config([]) == load_config([], tasks=False), "the default experiment (HalfCheetah-v5, PPO) has no entry"


def test_a_runs_config_file_holds_the_task_values_resolved_and_reads_back_unchanged(tmp_path: Path) -> None:
    """Resume and the chart read config.yaml as it is written: the task's values are in it, not re-derived."""
    cfg = load_config(["env=Pendulum-v1", "algo=ddpg", "name=t"])
    path = save_config(cfg, tmp_path / "config.yaml")
    text = path.read_text()
    assert "total_env_steps: 30000" in text and "chunk_steps: 32" in text
    assert read_config(path) == cfg
