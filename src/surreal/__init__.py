"""Surreal: distributed deep reinforcement learning from a laptop to a Kubernetes cluster.

    import surreal
    run = surreal.train(algo="ppo", env="InvertedPendulum-v5", steps=50_000)
    policy = surreal.load_policy(run.dir)

The Python API (`train`, `start`, `Run`, `RunFailed`, and `ConfigError` for a config that cannot run; surreal/api.py,
docs/api.md) and `load_policy` / `Policy` (a trained policy, surreal/policy/load.py, docs/policies.md) are imported on
first use, so `import surreal` itself loads neither torch nor Hydra (a replay or ps process imports this package too).
"""

from __future__ import annotations

import importlib
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

# Each name and the module that defines it, imported on first use.
_LAZY = {
    "ConfigError": "surreal.errors",
    **dict.fromkeys(("Run", "RunFailed", "start", "train"), "surreal.api"),
    **dict.fromkeys(("Policy", "PolicyError", "load_policy"), "surreal.policy.load"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'surreal' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
