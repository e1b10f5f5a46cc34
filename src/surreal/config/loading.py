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
"""

from __future__ import annotations

import difflib
import io
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from surreal.config.schema import ALGORITHMS, AlgoConfig, ExperimentConfig, validate
from surreal.errors import ConfigError
from surreal.fileio import atomic_write_text

CONFIG_MODULE = "surreal.conf"
CONFIG_NAME = "experiment"
DEFAULT_ALGO = "ppo"  # the `algo` default in conf/experiment.yaml
ALIASES = {"actors": "topology.actors", "env": "env.id", "steps": "total_env_steps"}
GROUPS = ("algo", "preset")  # Hydra config groups: `algo=ddpg`, `preset=ppo-cleanrl` choose a file, not a value

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


def load_config(overrides: Sequence[str] | None = None) -> ExperimentConfig:
    """The packaged experiment with command-line style overrides applied, typed and validated."""
    items = _check_keys(expand_aliases(overrides or []))
    try:
        with _hydra():
            node = compose(config_name=CONFIG_NAME, overrides=items)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_short(exc)) from None
    return _to_config(node)


def apply_overrides(cfg: ExperimentConfig, overrides: Sequence[str]) -> ExperimentConfig:
    """`cfg` (an experiment already composed, e.g. a run folder's config.yaml) with `key=value` overrides applied
    in Hydra's grammar and the shorthands, typed and validated as `load_config`'s result is. Config-group choices
    (`algo=`, `preset=`) pick YAML files to compose from and cannot apply to a composed config: refused."""
    items = _check_keys(expand_aliases(overrides), cfg.algo.name)
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
            raise ConfigError(_short(exc, cfg.algo.name)) from None
    return _to_config(node)


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
    defaults = OmegaConf.structured(load_config([f"algo={name}"]))
    try:
        merged = OmegaConf.merge(defaults, node)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"config {path}: {_short(exc, name)}") from None
    assert isinstance(merged, DictConfig)
    return _to_config(merged)


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

    `initialize_config_module` refuses to run while Hydra is initialized (e.g. inside a @hydra.main
    app), so the caller's instance is set aside and put back."""
    with _HYDRA_LOCK:
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


def _to_config(node: DictConfig) -> ExperimentConfig:
    """Merge a composed/read node onto the schema of its algorithm, build the dataclasses, validate."""
    name = OmegaConf.select(node, "algo.name", default=DEFAULT_ALGO, throw_on_missing=False)
    if name not in ALGORITHMS:
        raise ConfigError(f"algo.name: {name!r} is not a known algorithm (known: {', '.join(ALGORITHMS)})")
    try:
        merged = OmegaConf.merge(schema_node(name), node)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(_short(exc, name)) from None
    assert isinstance(cfg, ExperimentConfig)
    cfg.algo.seed = cfg.seed
    return validate(cfg)


def _split_prefix(key: str) -> tuple[str, str]:
    """`++env.id` -> (`++`, `env.id`): Hydra's add/force-add/delete prefixes, then the dotted key."""
    bare = key.lstrip("+~")
    return key[: len(key) - len(bare)], bare.strip()


def _check_keys(overrides: list[str], algo: str | None = None) -> list[str]:
    """Reject unknown keys, all at once and with a suggestion, before Hydra does it one at a time.

    Hydra composes the untyped YAML first, so its own message for `topology.actor=3` advises
    `+topology.actor=3`, which is wrong here. Keys under a free-form dict (env.kwargs) get `++`. `algo`: the
    algorithm whose keys `algo.*` are checked against (default: the one the overrides choose)."""
    algo = algo or _chosen_algo(overrides)
    schema = schema_node(algo if algo in ALGORITHMS else DEFAULT_ALGO)
    problems, checked = [], []
    for item in overrides:
        key, sep, _ = item.partition("=")
        prefix, bare = _split_prefix(key)
        if not sep or prefix or bare in GROUPS or bare.startswith("hydra.") or "@" in bare:
            checked.append(item)  # malformed, explicit +/++/~, a group choice: Hydra's own checks apply
        elif bare == "algo.seed":
            problems.append("algo.seed follows the top-level seed: set seed=N instead")
        elif bare.startswith("algo.") and algo not in ALGORITHMS:
            checked.append(item)  # Hydra reports the unknown algo=... choice
        else:
            kind = _lookup(schema, bare)
            if kind == "unknown":
                problems.append(f"unknown config key '{bare}'{_suggest(bare, schema)}")
            checked.append(f"++{item}" if kind == "free" else item)
    if problems:
        raise ConfigError("invalid override(s):\n  - " + "\n  - ".join(problems))
    return checked


def preset_algorithm(preset: str) -> str:
    """The algorithm `preset=NAME` runs: the one its defaults list picks, else the default algorithm."""
    return _chosen_algo([f"preset={preset}"])


def _chosen_algo(overrides: list[str]) -> str:
    """The algorithm the overrides choose: `algo=NAME`, else the one a `preset=NAME` picks in its defaults list
    (`override /algo: sac`, as conf/preset/crossq.yaml does), else the default."""
    chosen: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and _split_prefix(key)[1] in GROUPS:
            chosen[_split_prefix(key)[1]] = value.strip()
    if "algo" in chosen or "preset" not in chosen:
        return chosen.get("algo", DEFAULT_ALGO)
    preset = resources.files(CONFIG_MODULE) / "preset" / f"{chosen['preset']}.yaml"
    if not preset.is_file():
        return DEFAULT_ALGO  # Hydra names the unknown preset
    defaults = yaml.safe_load(preset.read_text(encoding="utf-8")).get("defaults", [])
    for entry in defaults:
        for group, option in entry.items() if isinstance(entry, dict) else []:
            if group.split()[-1].lstrip("/") == "algo":
                return str(option)
    return DEFAULT_ALGO


def _lookup(schema: DictConfig, dotted: str) -> str:
    """'known' if `dotted` names a schema key, 'free' if it lies inside a free-form dict, else 'unknown'."""
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
    return "known"


def _all_keys(node: DictConfig, prefix: str = "") -> Iterator[str]:
    for key in node:
        full = f"{prefix}{key!s}"
        yield full
        child = node.get(key)
        if isinstance(child, DictConfig):
            yield from _all_keys(child, f"{full}.")


def _suggest(key: str, schema: DictConfig) -> str:
    """The closest schema key at the same depth (`topology.actor` -> `topology.actors`), if any is close."""
    depth = key.count(".")
    candidates = [k for k in _all_keys(schema) if k.count(".") == depth]
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
