"""Compose, check, save and read experiment configs.

Hydra's compose API reads the packaged YAML (`surreal/conf`, found as a module so it works from an
installed wheel); the result is merged onto the typed schema and turned into dataclasses, then
`validate`d. Every failure becomes one `ConfigError` with a short message that names the key, instead of
a Hydra traceback, and it happens before any process starts.

Overrides are Hydra's (`algo.lr=1e-4`, `algo=ppo`, `env.kwargs.ctrl_cost_weight=0.1`) plus these
shorthands, rewritten before Hydra sees them:

    actors=N     -> topology.actors=N
    env=ID       -> env.id=ID          (`env={...}` with a dict value is left alone)
    steps=N      -> total_env_steps=N
    name=NAME    is already a top-level key (the run folder name)

Keys under `env.kwargs` are free-form (they go to `gymnasium.make`), so `env.kwargs.K=V` adds or
replaces K without Hydra's `+`/`++` prefix. `algo.seed` cannot be set: it always follows the top-level
`seed` (see `algo_config`).

A value comes from the user's overrides, else from a named preset (`preset=NAME`), else from the task defaults of the
chosen env and algorithm (conf/tasks.yaml, surreal/config/tasks.py), else from the package's YAML; `compose_config`
says which for every key (`surreal config KEY=VALUE...` prints it). A file (a run's config.yaml, the chart's
`experiment`) is read as written: `read_config` fills what it lacks from the package's defaults only.
"""

from __future__ import annotations

import difflib
import io
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from surreal.config.reference import experiment_keys
from surreal.config.schema import ALGORITHMS, DEFAULT_ALGO, AlgoConfig, ExperimentConfig, validate
from surreal.config.tasks import Task, task_for
from surreal.errors import ConfigError
from surreal.fileio import atomic_write_text

CONFIG_MODULE = "surreal.conf"
CONFIG_NAME = "experiment"
ALIASES = {"actors": "topology.actors", "env": "env.id", "steps": "total_env_steps"}
# Keys that moved, old -> new: the flow-control regime's knobs went to its config section (`algo.*`). A config file
# written before (a run folder's config.yaml, chart values) is read with them moved, where the algorithm has them; an
# override naming an old key is told the new one.
MOVED_KEYS = {
    "actor.rollout_ahead": "algo.rollout_ahead",
    "learner.max_staleness": "algo.max_staleness",
    "actor.overdraft_after_s": "algo.overdraft_after_s",
}
GROUPS = ("algo", "preset")  # Hydra config groups: `algo=ddpg`, `preset=ppo-cleanrl` choose a file, not a value
# Names people reach for that are not an algorithm or a preset here, and what to type instead.
CHOICE_ALIASES = {
    "td3": "TD3 is algo=ddpg with algo.twin_critics=true algo.target_policy_noise=0.2 (docs/ddpg.md)",
    "crossq": "CrossQ is preset=crossq: SAC with CrossQ's switches (docs/sac.md)",
}
LIST_KEYS = "`surreal config` lists every key"
# How a value's source is named (`surreal config KEY=VALUE...`): the user's override, a named preset's
# (conf/preset/NAME.yaml), a task entry's (conf/tasks.yaml) or the package's defaults.
USER, PACKAGE = "user", "package"

# A config file (a run folder's config.yaml, the chart's experiment) is a few kB of plain YAML: the file, its nesting,
# its nodes and its bracket count are bounded before YAML builds anything, and anchors and aliases, which no writer
# here uses and which make a small file expand without bound once OmegaConf copies what they share, are refused.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_DEPTH = 32
MAX_CONFIG_NODES = 1 << 17
MAX_FLOW_BRACKETS = 4096  # the pure-Python YAML parser slows down with the square of flow nesting: bound it first

# Hydra keeps one global instance; two threads composing at once would clobber each other's.
_HYDRA_LOCK = threading.Lock()


def dotted_items(mapping: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested mappings as dotted keys (`{"env.kwargs": {"a": 1}}` -> `env.kwargs.a`), as the loader takes them: it
    adds a key under a free-form dict (env.kwargs) one dotted key at a time."""
    out: list[tuple[str, Any]] = []
    for key, value in mapping.items():
        if isinstance(value, Mapping) and value:
            out += dotted_items(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


@dataclass(frozen=True)
class Composition:
    """A composed experiment and where each of its values came from: `sources` maps every key (`surreal config`'s,
    and each `env.kwargs.K`) to "user", "preset: NAME", "task: ENV/ALGO" or "package"; `task` is the entry of
    conf/tasks.yaml that filled keys, if any did."""

    config: ExperimentConfig
    sources: dict[str, str]
    task: Task | None


def load_config(overrides: Sequence[str] | None = None, *, tasks: bool = True) -> ExperimentConfig:
    """The packaged experiment with command-line style overrides applied, typed and validated. `tasks`: let the
    task entry of the chosen env and algorithm (conf/tasks.yaml) fill the keys that neither the overrides nor a
    preset set; False composes on the package's defaults only (the simulator's scenarios model those)."""
    return compose_config(overrides, tasks=tasks).config


def compose_config(overrides: Sequence[str] | None = None, *, tasks: bool = True) -> Composition:
    """`load_config`'s experiment with the source of each value: the user's overrides win, then a named preset's
    keys, then the task entry's, then the package's defaults."""
    if isinstance(overrides, str):
        raise TypeError("overrides is a list of 'key=value' strings, not one string")
    typed = list(overrides or [])
    items = _check_keys(expand_aliases(typed), typed=typed)
    try:
        with _hydra():
            node = compose(config_name=CONFIG_NAME, overrides=items)
    except (HydraException, OmegaConfBaseException) as exc:
        cause = exc.__cause__  # a value of the wrong type for an `algo.*` key: the class checks it while composing
        wrong = _wrong_type(cause, typed) if isinstance(cause, OmegaConfBaseException) else None
        raise ConfigError(wrong or _short(exc)) from None
    choices = _group_choices(items)
    user = _set_keys(items) | ({"algo.name"} if "algo" in choices else set())
    preset_keys = _preset_keys(choices["preset"]) if "preset" in choices else set()
    task, filled = _fill_from_task(node, user | preset_keys) if tasks else (None, set())
    cfg = _to_config(node, typed)
    sources = {}
    for key in [k.key for k in experiment_keys(cfg.algo.name)] + [f"env.kwargs.{k}" for k in cfg.env.kwargs]:
        if _covered(key, user):
            source = USER
        elif _covered(key, preset_keys):
            source = f"preset: {choices['preset']}"
        elif key in filled:
            source = f"task: {task.label}" if task else PACKAGE
        else:
            source = PACKAGE
        sources[key] = source
    kwargs = sorted({sources[f"env.kwargs.{k}"] for k in cfg.env.kwargs})  # the dict's own: its entries' sources
    sources["env.kwargs"] = ", ".join(kwargs) if kwargs else sources["env.kwargs"]
    return Composition(cfg, sources, task if filled else None)


def _fill_from_task(node: DictConfig, taken: set[str]) -> tuple[Task | None, set[str]]:
    """Set the task entry's values (the env and algorithm `node` chose) where no key of `taken` (the user's and the
    preset's) covers them; return the entry and the keys it filled. Its evaluation cadence only where it is below the
    run's budget: a shorter run than the task's cadence gets the package's."""
    env_id = OmegaConf.select(node, "env.id", default=None, throw_on_missing=False)
    algo = OmegaConf.select(node, "algo.name", default=DEFAULT_ALGO, throw_on_missing=False)
    task = task_for(str(env_id), str(algo))
    if task is None:
        return None, set()
    filled = set()
    for key, value in sorted(task.values.items(), key=lambda kv: kv[0] == "learner.eval_interval"):
        if _covered(key, taken):
            continue
        if key == "learner.eval_interval":
            budget = OmegaConf.select(node, "total_env_steps", default=None, throw_on_missing=False)
            if isinstance(budget, (int, float)) and value >= budget:
                continue
        OmegaConf.update(node, key, value, merge=False, force_add=True)
        filled.add(key)
    return task, filled


def _covered(key: str, keys: set[str]) -> bool:
    """Whether `key` is one of `keys`, lies under one (`env` set as a whole covers `env.kwargs.x`) or holds one."""
    return any(key == k or key.startswith(f"{k}.") or k.startswith(f"{key}.") for k in keys)


def _set_keys(items: Sequence[str]) -> set[str]:
    """The dotted keys the (expanded) overrides set, group choices aside."""
    keys = set()
    for item in items:
        key, sep, _ = item.partition("=")
        bare = _split_prefix(key)[1]
        if sep and bare not in GROUPS and not bare.startswith("hydra.") or not sep and key.startswith("~"):
            keys.add(bare)
    return keys


def _group_choices(items: Sequence[str]) -> dict[str, str]:
    """`algo=` and `preset=` as the overrides choose them, the last one winning (a preset of `null` is no preset)."""
    chosen: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        bare = _split_prefix(key)[1]
        if sep and bare in GROUPS and not (bare == "preset" and value.strip() in ("", "null")):
            chosen[bare] = value.strip()
    return chosen


def _preset_file(preset: str) -> dict[str, Any]:
    """conf/preset/NAME.yaml as data ({} for a preset that does not exist: `_check_keys` names it)."""
    path = resources.files(CONFIG_MODULE) / "preset" / f"{preset}.yaml"
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}


def _preset_keys(preset: str) -> set[str]:
    """The dotted keys a preset file sets (its defaults list aside; `algo.name` where it picks the algorithm)."""
    data = _preset_file(preset)
    keys = {key for key, _ in dotted_items({k: v for k, v in data.items() if k != "defaults"})}
    return keys | ({"algo.name"} if _preset_algorithm(data) is not None else set())


def apply_overrides(cfg: ExperimentConfig, overrides: Sequence[str]) -> ExperimentConfig:
    """`cfg` (an experiment already composed, e.g. a run folder's config.yaml) with `key=value` overrides applied
    in Hydra's grammar and the shorthands, typed and validated as `load_config`'s result is. Config-group choices
    (`algo=`, `preset=`) pick YAML files to compose from and cannot apply to a composed config: refused."""
    items = _check_keys(expand_aliases(overrides), cfg.algo.name, typed=overrides)
    try:
        parsed = OverridesParser.create().parse_overrides(items)
    except HydraException as exc:
        raise ConfigError(_short(exc)) from None
    node = OmegaConf.structured(replace(cfg, algo=algo_config(cfg)))
    for override in parsed:
        key = override.get_key_element().lstrip("+~")
        if key in GROUPS:
            raise ConfigError(f"{override.input_line}: {key}= chooses config files; it cannot change a composed config")
        if override.is_sweep_override():
            raise ConfigError(f"{override.input_line}: a sweep (several values) needs --multirun")
        try:
            if override.is_delete():
                raise ConfigError(f"{override.input_line}: removing a key is not supported here")
            OmegaConf.update(node, key, override.value(), merge=False, force_add=override.is_force_add())
        except OmegaConfBaseException as exc:
            raise ConfigError(_wrong_type(exc, overrides) or _short(exc, cfg.algo.name)) from None
    return _to_config(node, overrides)


def save_config(cfg: ExperimentConfig, path: str | os.PathLike[str]) -> Path:
    """Write `cfg` as resolved YAML (every key, no defaults list): what roles read via SURREAL_CONFIG.

    Written to a temporary name and renamed, so a role starting meanwhile never reads half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, config_yaml(cfg))
    return path


def config_yaml(cfg: ExperimentConfig) -> str:
    """`cfg` as the resolved YAML `save_config` writes (and `surreal run --cfg job` prints)."""
    return OmegaConf.to_yaml(OmegaConf.structured(replace(cfg, algo=algo_config(cfg))))


def check_yaml(text: str, what: str) -> None:
    """ConfigError, one line, unless `text` is YAML within the config file's bounds (`MAX_CONFIG_*`) with no anchor
    or alias: checked on the parser's events, before any node is composed (composing recurses once per level)."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config {what}: over {MAX_CONFIG_BYTES:,} bytes, larger than any config")
    if text.count("[") + text.count("{") > MAX_FLOW_BRACKETS:
        raise ConfigError(f"config {what}: more than {MAX_FLOW_BRACKETS:,} flow brackets, more than any config holds")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it
    depth = nodes = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise ConfigError(f"config {what}: YAML anchors and aliases are not read here")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_CONFIG_DEPTH:
                    raise ConfigError(f"config {what}: nested deeper than {MAX_CONFIG_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            nodes += 1
            if nodes > MAX_CONFIG_NODES:
                raise ConfigError(f"config {what}: more than {MAX_CONFIG_NODES:,} YAML nodes")
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot read config {what}: {' '.join(str(exc).split())}") from None


def read_config(path: str | os.PathLike[str]) -> ExperimentConfig:
    """A config file, typed and validated like `load_config`'s: a full one written by `save_config`, or a
    partial one (the Helm chart's `experiment` values) whose missing keys take the packaged defaults of
    its algorithm. `algo` may be a name (`algo: ddpg`) or a mapping with a `name` (`algo: {name: ddpg, ...}`)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
        text = data.decode("utf-8")
        check_yaml(text, str(path))
        node = OmegaConf.load(io.StringIO(text))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read config {path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except (OSError, yaml.YAMLError, OmegaConfBaseException) as exc:
        raise ConfigError(f"cannot read config {path}: {' '.join(str(exc).split())}") from None
    if not isinstance(node, DictConfig):
        raise ConfigError(f"config {path} is not a mapping of keys to values")
    if isinstance(node.get("algo"), str):
        node.algo = {"name": node.algo}
    name = OmegaConf.select(node, "algo.name", default=DEFAULT_ALGO, throw_on_missing=False)
    if name not in ALGORITHMS:
        raise ConfigError(f"algo.name: {name!r} is not a known algorithm (known: {', '.join(ALGORITHMS)})")
    defaults = OmegaConf.structured(load_config([f"algo={name}"], tasks=False))  # a file is read as it is written
    _move_keys(node, defaults)
    try:
        merged = OmegaConf.merge(defaults, node)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"config {path}: {_short(exc, name)}") from None
    assert isinstance(merged, DictConfig)
    return _to_config(merged)


def _move_keys(node: DictConfig, schema: DictConfig) -> None:
    """A file written before a key moved (MOVED_KEYS): its value goes to the new key where the algorithm has it (a
    lock-step ES has no rollout_ahead: the old value is dropped, as it never applied)."""
    for old, new in MOVED_KEYS.items():
        section, _, key = old.partition(".")
        held = node.get(section)
        if not isinstance(held, DictConfig) or key not in held:
            continue
        value = held.pop(key)
        if OmegaConf.select(schema, new, default=None) is not None and OmegaConf.select(node, new) is None:
            OmegaConf.update(node, new, value, force_add=True)


def config_from_env(environ: Mapping[str, str] | None = None) -> ExperimentConfig:
    """What a role runs: the file named by SURREAL_CONFIG, else the packaged defaults."""
    path = (os.environ if environ is None else environ).get("SURREAL_CONFIG")
    return read_config(path) if path else load_config([])


def algo_config(cfg: ExperimentConfig) -> AlgoConfig:
    """The algorithm's hyperparameters with `seed` = the experiment's top-level seed.

    Algorithm code takes only its own config object (`make_policy(..., algo_config(cfg), ...)`), yet
    needs the seed; the seed stays top-level so one `seed=` seeds environments and networks alike. A
    loaded config already has them equal; this also covers configs built in Python. Returns a copy."""
    return replace(cfg.algo, seed=cfg.seed)


def expand_aliases(overrides: Sequence[str]) -> list[str]:
    """Rewrite the shorthands `actors=`, `env=`, `steps=` to their full keys; everything else as is."""
    if isinstance(overrides, str):
        raise TypeError("overrides is a list of 'key=value' strings, not one string")
    expanded = []
    for item in overrides:
        key, sep, value = item.partition("=")
        prefix, bare = _split_prefix(key)
        dict_value = bare == "env" and value.lstrip().startswith("{")
        if sep and bare in ALIASES and not dict_value:
            expanded.append(f"{prefix}{ALIASES[bare]}={value}")
        else:
            expanded.append(item)
    return expanded


def schema_node(algo: str = DEFAULT_ALGO) -> DictConfig:
    """The typed, all-defaults tree for one algorithm: `ExperimentConfig` with `algo` typed by its class."""
    node = OmegaConf.structured(ExperimentConfig)
    node.algo = OmegaConf.structured(ALGORITHMS[algo])
    return node


@contextmanager
def _hydra() -> Iterator[None]:
    """Hydra initialized on the packaged configs, and left as it was found afterwards.

    The `algo` group's options are the registered config classes themselves (Hydra's ConfigStore), so an algorithm's
    defaults are written once, in its dataclass, and no YAML repeats them. `initialize_config_module` refuses to run
    while Hydra is initialized (e.g. inside a @hydra.main app), so the caller's instance is set aside and put back."""
    with _HYDRA_LOCK:
        for name, cls in ALGORITHMS.items():
            ConfigStore.instance().store(group="algo", name=name, node=cls)
        outer = GlobalHydra.instance()
        saved = outer.hydra if outer.is_initialized() else None
        outer.clear()
        try:
            with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
                yield
        finally:
            GlobalHydra.instance().clear()
            if saved is not None:
                GlobalHydra.instance().initialize(saved)


def _to_config(node: DictConfig, typed: Sequence[str] = ()) -> ExperimentConfig:
    """Merge a composed/read node onto the schema of its algorithm, build the dataclasses, validate. `typed`: the
    overrides as the user wrote them, so that an error names a key as it was typed (`steps=`, not
    `total_env_steps`)."""
    name = OmegaConf.select(node, "algo.name", default=DEFAULT_ALGO, throw_on_missing=False)
    if name not in ALGORITHMS:
        raise ConfigError(f"algo.name: {name!r} is not a known algorithm (known: {', '.join(ALGORITHMS)})")
    try:
        merged = OmegaConf.merge(schema_node(name), node)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(_wrong_type(exc, typed) or _short(exc, name)) from None
    assert isinstance(cfg, ExperimentConfig)
    cfg.algo.seed = cfg.seed
    try:
        return validate(cfg)
    except ConfigError as exc:
        raise ConfigError(_as_typed(str(exc), typed)) from None


# What a typed key takes, from OmegaConf's "could not be converted to <Type>" / "is not a valid bool".
_TAKES = {"Integer": "an integer", "Float": "a number", "bool": "true or false"}
_WRONG_TYPE = re.compile(r"Value '(?P<value>[^']*)'.*?(?:converted to (?P<to>\w+)|not a valid (?P<bool>bool))")


def _wrong_type(exc: OmegaConfBaseException, typed: Sequence[str]) -> str | None:
    """A value of the wrong type as one line naming the override as typed and what to type instead:
    `steps=1e6: total_env_steps takes an integer: write steps=1000000`. None when `exc` is not that."""
    key = getattr(exc, "full_key", None)
    match = _WRONG_TYPE.search(str(exc))
    if not key or match is None or not isinstance(exc, ValidationError):
        return None
    takes = _TAKES.get(match.group("to") or match.group("bool") or "", "another type")
    item = _typed_item(key, typed)
    written = item.partition("=")[0] if item else key
    message = f"{item or key}: {key} takes {takes}"
    if match.group("to") == "Integer":
        try:
            number = float(match.group("value"))
        except ValueError:
            number = None
        if number is not None and number.is_integer():
            message += f": write {written}={int(number)}"
        elif number is not None:
            message += f" (got {match.group('value')})"
    return message


def _typed_item(key: str, typed: Sequence[str]) -> str | None:
    """The override, as typed, that set the dotted `key` (the last one, as the last one wins)."""
    found = None
    for original in typed:
        expanded = expand_aliases([original])[0]
        if _split_prefix(expanded.partition("=")[0])[1] == key:
            found = original
    return found


def _as_typed(message: str, typed: Sequence[str]) -> str:
    """`validate`'s lines about a key the user set through a shorthand, prefixed with the override as typed:
    `steps=0: total_env_steps must be > 0 (got 0)`."""
    lines = message.splitlines()
    for i, line in enumerate(lines):
        text = line.lstrip(" -")
        key = match.group(0) if (match := re.match(r"[\w.]+", text)) else ""
        item = _typed_item(key, typed) if key else None
        if item is not None and item.partition("=")[0] != key:
            lines[i] = f"{line[: len(line) - len(text)]}{item}: {text}"
    return "\n".join(lines)


def _split_prefix(key: str) -> tuple[str, str]:
    """`++env.id` -> (`++`, `env.id`): Hydra's add/force-add/delete prefixes, then the dotted key."""
    bare = key.lstrip("+~")
    return key[: len(key) - len(bare)], bare.strip()


def _check_keys(overrides: list[str], algo: str | None = None, *, typed: Sequence[str]) -> list[str]:
    """Check every override before Hydra sees it, and list every problem at once, each naming the override as typed
    and what to type instead: an unknown key (with the closest key or shorthand), a value given to a section of keys,
    an algorithm or preset that does not exist (TD3 and CrossQ say how they are spelled here), several values without
    --multirun, and what Hydra's grammar cannot parse.

    Hydra composes the untyped YAML first, so its own message for `topology.actor=3` advises `+topology.actor=3`, which
    is wrong here (the typed config is closed). Keys under a free-form dict (env.kwargs) get `++`. `algo`: the
    algorithm whose keys `algo.*` are checked against (default: the one the overrides choose). `typed`: the overrides
    as written (before the shorthands were expanded), one per item of `overrides`."""
    algo = algo or _chosen_algo(overrides)
    schema = schema_node(algo if algo in ALGORITHMS else DEFAULT_ALGO)
    parser = OverridesParser.create()
    problems, checked = [], []
    for original, item in zip(typed, overrides, strict=True):
        key, sep, value = item.partition("=")
        prefix, bare = _split_prefix(key)
        if not sep:
            if prefix == "~":
                checked.append(item)  # a deletion: Hydra's own checks apply
            else:
                problems.append(f"{original!r} is not KEY=VALUE ({LIST_KEYS})")
            continue
        try:
            parsed = parser.parse_overrides([item])[0]
        except HydraException as exc:
            problems.append(f"{original}: cannot parse the value ({_short(exc).split(' See https')[0]})")
            continue
        if parsed.is_sweep_override():
            listed = f"{original.partition('=')[0]}=[...]"
            problems.append(f"{original}: several values make a sweep, which needs --multirun (a list: {listed})")
        elif bare in GROUPS:
            problem = _choice_problem(bare, value.strip())
            if problem:
                problems.append(problem)
            checked.append(item)
        elif bare.startswith("hydra.") or "@" in bare:
            checked.append(item)
        elif bare in MOVED_KEYS:
            problems.append(f"{original}: {bare} moved to {MOVED_KEYS[bare]}: write {MOVED_KEYS[bare]}={value}")
        elif bare == "algo.seed":
            problems.append("algo.seed follows the top-level seed: set seed=N instead")
        elif bare.startswith("algo.") and algo not in ALGORITHMS:
            checked.append(item)  # the unknown algo=... choice is the problem, named above
        else:
            kind = _lookup(schema, bare)
            if kind == "unknown":
                how = " (`+` cannot add a key to the typed config)" if "+" in prefix else ""
                problems.append(f"{original}: unknown config key '{bare}'{_suggest(bare, schema)}{how}; {LIST_KEYS}")
            elif kind == "section" and not value.lstrip().startswith("{"):
                near = _suggest(bare, schema, exclude=bare)
                problems.append(f"{original}: '{bare}' is a section of keys ({bare}.KEY=VALUE), not a value{near}")
            elif prefix == "+" and kind != "free":
                problems.append(f"{original}: '{bare}' exists already: write {bare}={value}")
            else:
                checked.append(f"++{item.lstrip('+')}" if kind == "free" else item)
    if len(problems) == 1:
        raise ConfigError(problems[0])  # one line, naming the override as typed
    if problems:
        raise ConfigError("invalid overrides:\n  - " + "\n  - ".join(problems))
    return checked


def _choice_problem(group: str, choice: str) -> str | None:
    """Why `algo=CHOICE` or `preset=CHOICE` names nothing here, with what to type instead; None if it exists."""
    known = list(ALGORITHMS) if group == "algo" else preset_names()
    if choice in known or (group == "preset" and choice in ("", "null")):
        return None
    if choice.lower() in CHOICE_ALIASES:
        return f"{group}={choice}: {CHOICE_ALIASES[choice.lower()]}"
    close = difflib.get_close_matches(choice, known, n=1, cutoff=0.6)
    near = f"did you mean {group}={close[0]}? " if close else ""
    what = "algorithm" if group == "algo" else "preset"
    return f"{group}={choice}: no such {what} ({near}known: {', '.join(known)})"


def preset_algorithm(preset: str) -> str:
    """The algorithm `preset=NAME` runs: the one its defaults list picks, else the default algorithm."""
    return _chosen_algo([f"preset={preset}"])


def _chosen_algo(overrides: list[str]) -> str:
    """The algorithm the overrides choose: `algo=NAME`, else the one a `preset=NAME` picks in its defaults list
    (`override /algo: sac`, as conf/preset/crossq.yaml does), else the default."""
    chosen = _group_choices(overrides)
    if "algo" in chosen or "preset" not in chosen:
        return chosen.get("algo", DEFAULT_ALGO)
    return _preset_algorithm(_preset_file(chosen["preset"])) or DEFAULT_ALGO


def _preset_algorithm(data: Mapping[str, Any]) -> str | None:
    """The algorithm a preset's defaults list picks (`override /algo: sac`), or None."""
    for entry in data.get("defaults", []):
        for group, option in entry.items() if isinstance(entry, dict) else []:
            if group.split()[-1].lstrip("/") == "algo":
                return str(option)
    return None


def preset_names() -> list[str]:
    """Every packaged preset (conf/preset/NAME.yaml)."""
    folder = resources.files(CONFIG_MODULE).joinpath("preset")
    return sorted(e.name.removesuffix(".yaml") for e in folder.iterdir() if e.name.endswith(".yaml"))


def _lookup(schema: DictConfig, dotted: str) -> str:
    """'known' if `dotted` names a schema key, 'section' if it names a group of keys (`topology`), 'free' if it is or
    lies inside a free-form dict (env.kwargs), else 'unknown'."""
    node: Any = schema
    for part in dotted.split("."):
        if isinstance(node, DictConfig):
            if OmegaConf.get_type(node) is dict:
                return "free"
            if part not in list(node):  # `in` on a DictConfig is False for a MISSING (required) key
                return "unknown"
            node = node.get(part)
        elif isinstance(node, ListConfig) and part.isdigit():
            node = None
        else:
            return "unknown"
    if isinstance(node, DictConfig):
        return "free" if OmegaConf.get_type(node) is dict else "section"
    return "known"


def _all_keys(node: DictConfig, prefix: str = "") -> Iterator[str]:
    for key in node:
        full = f"{prefix}{key!s}"
        yield full
        child = node.get(key)
        if isinstance(child, DictConfig):
            yield from _all_keys(child, f"{full}.")


def _suggest(key: str, schema: DictConfig, exclude: str | None = None) -> str:
    """The closest schema key at the same depth (`topology.actor` -> `topology.actors`), or shorthand (`step` ->
    `steps`), if any is close."""
    depth = key.count(".")
    candidates = [k for k in _all_keys(schema) if k.count(".") == depth and k != exclude]
    if depth == 0:
        candidates += list(ALIASES)
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _short(exc: Exception, algo: str = DEFAULT_ALGO) -> str:
    """An OmegaConf/Hydra error as one line: the offending key, what is wrong, no traceback or search path."""
    lines = []
    for line in str(exc).strip().splitlines():
        if line.strip().startswith(("full_key:", "reference_type=", "object_type=", "Config search path")):
            break
        if line.strip():
            lines.append(line.strip())
    message = " ".join(lines) if lines else type(exc).__name__
    key = getattr(exc, "full_key", None)
    if key:
        message = f"{key}: {message}"
        if isinstance(exc, ConfigKeyError):
            message += _suggest(key, schema_node(algo))
    return message
