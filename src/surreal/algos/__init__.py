"""Algorithm registry. Each algorithm module provides `make_policy`, `make_collector`, `make_learner` and
`LOCKSTEP`, on-policy ones also `filter_stale` (docs/architecture.md); modules are imported on lookup, so
importing this package never loads torch."""

from __future__ import annotations

import importlib
from types import ModuleType

ALGORITHMS = {"ppo": "surreal.algos.ppo", "ddpg": "surreal.algos.ddpg", "es": "surreal.algos.es"}


def get_algorithm(name: str) -> ModuleType:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGORITHMS))}")
    return importlib.import_module(ALGORITHMS[name])
