"""Packaged Hydra configs (`experiment.yaml` + groups), found with `initialize_config_module`."""
