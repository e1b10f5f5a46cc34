"""What a user can choose, read from where it is defined: the algorithms (the registry, surreal.config.schema), the
presets (surreal/conf/preset/*.yaml), the task defaults (surreal/conf/tasks.yaml), the env families (Gymnasium's
registry) and every config key with its default and doc (surreal.config.reference). `surreal run --help` and
`surreal config` print these; nothing here keeps a list.

Torch-free; gymnasium is imported only for the env families, and robosuite never (its tasks are listed by the error
for an unknown one, `surreal run env=robosuite:?`).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import textwrap
from collections import defaultdict
from functools import cache
from importlib import resources
from typing import Any

from surreal.config.loading import CONFIG_MODULE, Composition, preset_algorithm
from surreal.config.reference import ConfigKey, algorithm_keys, experiment_keys
from surreal.config.schema import ALGORITHMS, SPACE_KINDS
from surreal.config.tasks import tasks
from surreal.errors import install_extra

# Gymnasium's own env packages (gymnasium.envs.<family>), as users know them, and the module each one needs.
FAMILIES = {
    "mujoco": ("MuJoCo", "mujoco"),
    "classic_control": ("classic control", None),
    "box2d": ("Box2D", "Box2D"),
    "toy_text": ("toy text", None),
}
INSTALL = {"mujoco": 'pip install "gymnasium[mujoco]"', "box2d": 'pip install "gymnasium[box2d]"'}


def algorithms() -> list[tuple[str, str]]:
    """(name, what it takes and how it learns) for every registered algorithm."""
    out = []
    for name, cls in ALGORITHMS.items():
        observations = " or ".join(SPACE_KINDS[k] for k in sorted(cls.observation_spaces))
        actions = " or ".join(SPACE_KINDS[k] for k in sorted(cls.action_spaces))
        regime = "on-policy" if cls.flow_control != "replay_ratio" else "off-policy"
        out.append((name, f"{regime}; {observations} observations; {actions} actions"))
    return out


def presets() -> list[tuple[str, str, str]]:
    """(name, the algorithm it runs, its first comment line up to the first parenthesis or colon) per preset."""
    out = []
    for entry in sorted(resources.files(CONFIG_MODULE).joinpath("preset").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        name = entry.name.removesuffix(".yaml")
        comments = [
            line.lstrip("#").strip()
            for line in entry.read_text(encoding="utf-8").splitlines()
            if line.startswith("#") and "@package" not in line
        ]
        summary = comments[0] if comments else ""
        for stop in (" (", ":"):
            summary = summary.split(stop, 1)[0]
        out.append((name, preset_algorithm(name), summary.strip()))
    return out


def env_families() -> list[tuple[str, list[str], str | None]]:
    """(family, the newest version of each of its ids, why it cannot run here or None) for Gymnasium's own families
    and surreal's velocity-masked MuJoCo tasks; ids from other packages (`module:Name`) are not listed, nor ids whose
    spaces no algorithm takes (toy text's Discrete and Tuple observations: `refused_families` names those)."""
    return [family for family in _families() if family[1]]


def refused_families() -> list[str]:
    """The families `env_families` leaves out because no algorithm takes any of their envs' spaces."""
    return [label for label, ids, _ in _families() if not ids]


@cache
def _families() -> list[tuple[str, list[str], str | None]]:
    import gymnasium as gym

    newest: dict[str, dict[str, tuple[int, str]]] = defaultdict(dict)
    for env_id, spec in gym.envs.registry.items():
        entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
        parts = entry.split(":")[0].split(".")
        if spec.namespace is not None or parts[:2] != ["gymnasium", "envs"] or len(parts) < 3:
            continue
        family = parts[2]
        version = spec.version if spec.version is not None else -1
        if version >= newest[family].get(spec.name, (-2, ""))[0]:
            newest[family][spec.name] = (version, env_id)
    out = []
    for family in [*FAMILIES, *sorted(set(newest) - set(FAMILIES))]:
        if family not in newest:
            continue
        label, module = FAMILIES.get(family, (family, None))
        missing = None
        if module is not None and importlib.util.find_spec(module) is None:
            missing = f"not installed: {INSTALL.get(family, f'pip install {module}')}"
        ids = sorted(env_id for _, env_id in newest[family].values())
        out.append((label, ids if missing else [i for i in ids if _some_algorithm_takes(i)], missing))
    from surreal.envs_masked import MASKED_TASKS  # surreal's own ids: MuJoCo tasks with their velocities masked

    mujoco = next((missing for label, _, missing in out if label == FAMILIES["mujoco"][0]), None)
    out.append(("MuJoCo, no vel.", sorted(MASKED_TASKS), mujoco))
    return out


def _some_algorithm_takes(env_id: str) -> bool:
    """Whether any registered algorithm takes this Gymnasium id's observation and action spaces (the env is built
    once, without a reset: a few ms each). An env that does not build is kept: preflight says why when it is run."""
    import gymnasium as gym

    from surreal.spaces import space_kind

    try:
        env = gym.make(env_id)
    except Exception:  # a missing dependency or a bad install: listed, and refused with its reason at `surreal run`
        return True
    try:
        observations, actions = space_kind(env.observation_space), space_kind(env.action_space)
    finally:
        env.close()
    return any(observations in cls.observation_spaces and actions in cls.action_spaces for cls in ALGORITHMS.values())


def run_help_epilog() -> str:
    """The part of `surreal run --help` that names what exists."""
    lines = ["algorithms (algo=NAME; `surreal config algo --algo NAME` lists its keys):"]
    lines += [f"  {name:<12} {summary}" for name, summary in algorithms()]
    lines.append("presets (preset=NAME: a published set of hyperparameters, conf/preset/NAME.yaml):")
    lines += [f"  {name:<12} algo={algo}: {summary}" for name, algo, summary in presets()]
    lines.append(
        "task defaults (conf/tasks.yaml: a value is the user's, else the preset's, else the task's, else the package's;"
    )
    lines.append("  `surreal config env=ID algo=NAME` prints each value and where it came from):")
    for task in tasks().values():
        body = f"{task.claim_text()} ({', '.join(f'{k}={format_value(v)}' for k, v in task.values.items())})"
        lines += textwrap.wrap(
            body, _width(), initial_indent=f"  {task.label:<24}", subsequent_indent=" " * 26, break_on_hyphens=False
        )
    lines.append("env families (env=ID: a registered Gymnasium id, module:Name, or robosuite:<Task>):")
    for label, ids, missing in env_families():
        body = ", ".join(ids) + (f" ({missing})" if missing else "")
        lines += textwrap.wrap(body, _width(), initial_indent=f"  {label:<16}", subsequent_indent=" " * 18)
    robosuite = "" if importlib.util.find_spec("robosuite") else f" (not installed: {install_extra('robosuite')})"
    lines.append(f"  {'robosuite':<16}robosuite:Lift and robosuite's other tasks{robosuite}")
    refused = refused_families()
    if refused:
        lines.append(f"  (not listed: {', '.join(refused)}, whose spaces no algorithm here takes)")
    lines += [
        "env.kwargs.K=V passes K to the env's constructor; the env is built once before any process starts,",
        "so an env that does not build, a keyword it does not take or spaces the algorithm cannot take are refused.",
        "every config key, its default and its doc: surreal config [PREFIX]",
        "the composed config without running it: surreal run --cfg job [overrides...]",
    ]
    return "\n".join(lines)


# -- surreal config ---------------------------------------------------------------------------------------


def config_listing(prefix: str = "", algo: str | None = None) -> str:
    """Every key starting with `prefix`: `key: type = default` and its doc, indented. `algo.*` keys come per
    algorithm (all, or the one named), each block under a `# algo=NAME` line. Empty when no key matches."""
    names = [algo] if algo is not None else list(ALGORITHMS)
    blocks = []
    # A plain prefix: `learner` and `learner.eval` both match learner.eval_interval.
    shared = [k for k in experiment_keys(names[0]) if not k.key.startswith("algo.") and k.key.startswith(prefix)]
    if shared:
        blocks.append(_entries(shared))
    for name in names:
        own = [k for k in algorithm_keys(name) if k.key.startswith(prefix)]
        if own:
            blocks.append(f"# algo={name}\n" + _entries(own))
    return "\n\n".join(blocks)


def composed_listing(composition: Composition, prefix: str = "") -> str:
    """`surreal config KEY=VALUE...`: every key starting with `prefix` of the experiment those overrides compose, one
    line each, `key: type = value (source)`, the source being the user, a preset, a task entry or the package. Empty
    when no key matches."""
    cfg = composition.config
    lines = []
    if composition.task is not None:
        task = composition.task
        lines.append(f"# task {task.label}: {task.claim_text()} (bench/results/{', '.join(task.claim.results)})")
    for k in experiment_keys(cfg.algo.name):
        if k.key.startswith(prefix):
            value: Any = cfg
            for part in k.key.split("."):
                value = getattr(value, part)
            lines.append(f"{k.key}: {k.type} = {format_value(value)} ({composition.sources[k.key]})")
    return "\n".join(lines) if len(lines) > (composition.task is not None) else ""


def _entries(keys: list[ConfigKey]) -> str:
    width = _width()
    out = []
    for k in keys:
        out.append(f"{k.key}: {k.type} = {format_value(k.default)}")
        out += textwrap.wrap(k.doc, width, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(out)


def format_value(value: Any) -> str:
    """A default as it is written in an override: null, true, 0.0003, [64, 64], {}."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value) if isinstance(value, (bool, list, dict, type(None))) else str(value)


def known_prefixes() -> list[str]:
    """Every key and every dotted parent of one, for suggesting a prefix that matched nothing."""
    found: set[str] = set()
    for name in ALGORITHMS:
        for k in experiment_keys(name):
            parts = k.key.split(".")
            found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return sorted(found)


def _width() -> int:
    return max(60, min(shutil.get_terminal_size((100, 24)).columns, 110))


# -- docs/configuration.md ---------------------------------------------------------------------------------

REFERENCE_HEADER = """# Configuration reference

Every key `surreal run` (and `surreal.train(overrides=...)`) takes, with its type, its packaged default and its doc.
Generated from the typed config by `make config-reference` (`python -m surreal.commands.catalog`); a test fails when
this page and the code differ. In a terminal, `surreal config [PREFIX] [--algo NAME]` prints the same.

Overrides are Hydra's syntax: `surreal run algo=sac env=Hopper-v5 algo.lr=1e-3 topology.actors=4`. The shorthands
`env=`, `actors=`, `steps=` and `name=` set `env.id`, `topology.actors`, `total_env_steps` and `name`.
"""


def config_reference_markdown() -> str:
    """The configuration reference page: the keys every experiment has, then each algorithm's `algo.*` keys, as
    Key / Type / Default / Description tables."""
    names = list(ALGORITHMS)
    shared = [k for k in experiment_keys(names[0]) if not k.key.startswith("algo.")]
    parts = [REFERENCE_HEADER, "## Every experiment\n", _table(shared)]
    for name in names:
        parts += [f"## `algo={name}`\n", _table(algorithm_keys(name))]
    parts += [TASKS_HEADER, _tasks_table()]
    return "\n".join(parts)


TASKS_HEADER = """## Task defaults

Where an experiment's env and algorithm have an entry in `surreal/conf/tasks.yaml` (RL Baselines3 Zoo's tuned
hyperparameters per env, here per env and algorithm), its values fill every key that neither your overrides nor a
named preset set: a value is yours, else the preset's, else the task's, else the package's (the tables above).
`surreal config env=ID algo=NAME` prints each value of that experiment with where it came from, and the run's
`config.yaml` holds them all resolved. A task's `learner.eval_interval` applies only to a run longer than it. Each
entry's claim is what its results files measured with these values (`tests/test_tasks.py` holds the entries to
them; `python -m bench.task_presets ENV ALGO` measures an entry as a user gets it).
"""


def _tasks_table() -> str:
    rows = ["| Task | Sets | Claim | Results |", "|---|---|---|---|"]
    for task in tasks().values():
        sets = ", ".join(f"`{k}={format_value(v)}`" for k, v in task.values.items())
        results = ", ".join(f"`bench/results/{name}`" for name in task.claim.results)
        rows.append(f"| `{task.label}` | {sets} | {task.claim_text()} | {results} |")
    return "\n".join(rows) + "\n"


def _table(keys: list[ConfigKey]) -> str:
    cell = lambda text: text.replace("|", "\\|").replace("\n", " ")
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    rows += [f"| `{k.key}` | {cell(k.type)} | `{cell(format_value(k.default))}` | {cell(k.doc)} |" for k in keys]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """`python -m surreal.commands.catalog PATH [--check]`: write the configuration reference to PATH, or with `--check`
    exit 1 when PATH differs from it."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m surreal.commands.catalog", description=main.__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = config_reference_markdown()
    if args.check:
        current = args.path.read_text(encoding="utf-8") if args.path.exists() else ""
        if current != text:
            print(f"{args.path} differs from the typed config: run `make config-reference`")
            return 1
        return 0
    args.path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
