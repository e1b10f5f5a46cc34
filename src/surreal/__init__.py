"""Surreal: distributed deep reinforcement learning from a laptop to a Kubernetes cluster.

    import surreal
    run = surreal.train(algo="ppo", env="InvertedPendulum-v5", steps=50_000)
    policy = surreal.load_policy(run.dir)

The Python API (`train`, `start`, `Run`, `RunFailed`, and `ConfigError` for a config that cannot run; surreal/api.py,
docs/api.md) and `load_policy` / `Policy` (a trained policy, surreal/policy/load.py, docs/policies.md) are imported on
first use, so `import surreal` itself loads neither torch nor Hydra (a replay or ps process imports this package too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
    "ConfigError",
    "Policy",
    "PolicyError",
    "Run",
    "RunFailed",
    "__version__",
    "load_policy",
    "start",
    "train",
]

if TYPE_CHECKING:
    from surreal.api import Run, RunFailed, start, train
    from surreal.errors import ConfigError
    from surreal.policy.load import Policy, PolicyError, load_policy

_API = frozenset({"Run", "RunFailed", "start", "train"})
_POLICY = frozenset({"load_policy", "Policy", "PolicyError"})


def __getattr__(name: str) -> Any:
    if name == "ConfigError":
        from surreal.errors import ConfigError

        return ConfigError
    if name in _API:
        from surreal import api

        return getattr(api, name)
    if name in _POLICY:
        from surreal.policy import load

        return getattr(load, name)
    raise AttributeError(f"module 'surreal' has no attribute {name!r}")
