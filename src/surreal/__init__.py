"""Surreal: distributed deep reinforcement learning from a laptop to a Kubernetes cluster.

    import surreal
    run = surreal.train(algo="ppo", env="InvertedPendulum-v5", steps=50_000)

The Python API (`train`, `start`, `Run`, `RunFailed`, and `ConfigError` for a config that cannot run; surreal/api.py,
docs/api.md) is imported on first use, so `import surreal` itself loads neither torch nor Hydra (a replay or ps
process imports this package too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["ConfigError", "Run", "RunFailed", "__version__", "start", "train"]

if TYPE_CHECKING:
    from surreal.api import Run, RunFailed, start, train
    from surreal.errors import ConfigError

_API = frozenset({"Run", "RunFailed", "start", "train"})


def __getattr__(name: str) -> Any:
    if name == "ConfigError":
        from surreal.errors import ConfigError

        return ConfigError
    if name in _API:
        from surreal import api

        return getattr(api, name)
    raise AttributeError(f"module 'surreal' has no attribute {name!r}")
