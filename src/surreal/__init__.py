"""Surreal: distributed deep reinforcement learning from a laptop to a Kubernetes cluster.

`surreal.load_policy(path)` loads a trained policy (surreal/policy/load.py). It and `Policy` are imported on first
use, so `import surreal` stays light: the replay and ps roles, whose image has no torch, import this package too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Policy", "PolicyError", "__version__", "load_policy"]

if TYPE_CHECKING:
    from surreal.policy.load import Policy, PolicyError, load_policy


def __getattr__(name: str) -> Any:
    if name in ("load_policy", "Policy", "PolicyError"):
        from surreal.policy import load

        return getattr(load, name)
    raise AttributeError(f"module 'surreal' has no attribute {name!r}")
