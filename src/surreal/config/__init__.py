"""The experiment config: typed schema (schema.py) and Hydra loading (loading.py).

Torch-free on purpose: the replay and ps roles, whose images carry no torch, read their config here too.
"""

from surreal.config.loading import (
    algo_config,
    config_from_env,
    expand_aliases,
    load_config,
    read_config,
    save_config,
)
from surreal.config.schema import (
    ChaosConfig,
    ExperimentConfig,
    TopologyConfig,
    validate,
)
from surreal.errors import ConfigError

__all__ = [
    "ChaosConfig",
    "ConfigError",
    "ExperimentConfig",
    "TopologyConfig",
    "algo_config",
    "config_from_env",
    "expand_aliases",
    "load_config",
    "read_config",
    "save_config",
    "validate",
]
