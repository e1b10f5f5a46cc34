"""Packaged Hydra configs (`experiment.yaml`, the `preset` group; the `algo` group is the registered config classes),
found with `initialize_config_module`."""
