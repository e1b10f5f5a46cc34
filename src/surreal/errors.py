"""The error for an experiment that cannot be run, below every layer that raises it: the config schema's
`validate` raises it, and so does the robosuite adapter that `validate` consults for a task's parameters
(envs_robosuite.py), so neither has to import the other's package for it."""


class ConfigError(ValueError):
    """The experiment description cannot be run; the message names every offending key."""
