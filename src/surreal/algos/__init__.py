"""Algorithms, looked up by name: `get_algorithm("sac")` is the module `surreal.algos.sac`.

Each algorithm is its code (`<name>.py`: networks, losses, the update; torch) and its torch-free config class,
which registers itself in `surreal.config.schema.ALGORITHMS` and names that module: `<name>_config.py` beside the
code (found by the registry, nothing lists it), or, for PPO, DDPG and ES, `surreal/config/schema.py`. The
interface the roles call is `surreal.algos.interface`. Importing this package loads neither torch nor
gymnasium: the replay and ps roles, whose image has neither, read the algorithms' configs through it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from surreal.config.schema import ALGORITHMS

if TYPE_CHECKING:
    from surreal.algos.interface import Algorithm


def get_algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGORITHMS))}")
    return cast("Algorithm", importlib.import_module(ALGORITHMS[name].module))
