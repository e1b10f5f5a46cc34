"""The error for an experiment that cannot be run, below every layer that raises it: the config schema's
`validate` raises it, and so does the robosuite adapter that `validate` consults for a task's parameters
(envs_robosuite.py), so neither has to import the other's package for it."""


class ConfigError(ValueError):
    """The experiment description cannot be run; the message names every offending key."""


def install_extra(extra: str) -> str:
    """How to install one of the package's extras, for a message: from a checkout (the only install before the first
    release publishes `surreal-rl`), and from PyPI after it."""
    return f"pip install '.[{extra}]' in a checkout, 'surreal-rl[{extra}]' once released"
