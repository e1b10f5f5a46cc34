"""The experiment config: typed schema (schema.py) and Hydra loading (loading.py). Torch-free."""

from surreal.config.loading import algo_config, config_from_env, load_config, read_config, save_config
from surreal.config.schema import ConfigError, ExperimentConfig, PPOConfig, validate

__all__ = [
    "ConfigError",
    "ExperimentConfig",
    "PPOConfig",
    "algo_config",
    "config_from_env",
    "load_config",
    "read_config",
    "save_config",
    "validate",
]
