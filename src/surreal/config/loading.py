"""Compose, check, save and read experiment configs.

Hydra's compose API reads the packaged YAML (`surreal/conf`), so it works from an installed wheel; the
result is merged onto the typed schema and turned into dataclasses. Every failure becomes one
`ConfigError` with a short message instead of a Hydra traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_module
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from surreal.config.schema import ConfigError, ExperimentConfig, PPOConfig, validate

# Shorthands users type most; each rewrites to its full key.
ALIASES = {"actors": "topology.actors", "env": "env.id", "steps": "total_env_steps"}


def expand_aliases(overrides: list[str]) -> list[str]:
    expanded = []
    for item in overrides:
        key, sep, value = item.partition("=")
        prefix = key[: len(key) - len(key.lstrip("+~"))]
        bare = key[len(prefix):]
        expanded.append(f"{prefix}{ALIASES[bare]}{sep}{value}" if sep and bare in ALIASES else item)
    return expanded


def _to_config(node) -> ExperimentConfig:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(ExperimentConfig), node)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(_short(exc)) from None
    assert isinstance(cfg, ExperimentConfig)
    cfg.algo.seed = cfg.seed
    return validate(cfg)


def load_config(overrides: list[str] | None = None) -> ExperimentConfig:
    """The packaged experiment with Hydra overrides (`algo.lr=1e-3`, shorthands `env=`, `actors=`, `steps=`)."""
    try:
        with initialize_config_module(config_module="surreal.conf", version_base="1.3"):
            node = compose(config_name="experiment", overrides=expand_aliases(list(overrides or [])))
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_short(exc)) from None
    return _to_config(node)


def save_config(cfg: ExperimentConfig, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)), encoding="utf-8")
    return path


def read_config(path: str | os.PathLike) -> ExperimentConfig:
    """A resolved config written by `save_config` (what roles get through SURREAL_CONFIG)."""
    try:
        node = OmegaConf.load(path)
    except (OSError, OmegaConfBaseException) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    return _to_config(node)


def config_from_env() -> ExperimentConfig:
    path = os.environ.get("SURREAL_CONFIG")
    return read_config(path) if path else load_config([])


def algo_config(cfg: ExperimentConfig) -> PPOConfig:
    """The algorithm's hyperparameters, with the experiment seed filled in."""
    cfg.algo.seed = cfg.seed
    return cfg.algo


def _short(exc: Exception) -> str:
    """The first lines of an OmegaConf/Hydra error (what and why, without the traceback) plus its key."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    message = " ".join(lines[:2]) if lines else type(exc).__name__
    key = getattr(exc, "full_key", None)
    return f"{message} (key: {key})" if key and key not in message else message
