"""Algorithms, looked up by name: `get_algorithm("sac")` is the module `surreal.algos.sac.algorithm`.

An algorithm is a folder, `algos/<name>/`: its torch-free config class (`config.py`), which registers itself in
`surreal.config.schema.ALGORITHMS` (the registry imports every folder's config.py: nothing lists them) and names the
module of its code (`module`: the folder's `algorithm.py`, gathering its nets, policy and learner). What several share
lives beside the folders: the interface the roles call (`interface.py`), the data-parallel hooks (`replica.py`),
the compiled and captured steps (`capture.py`), the exported policy module (`inference.py`), the off-policy actors'
and learners' common parts (`offpolicy.py`, `sample_steps.py`, `stacked.py`) and the running normalizer. Importing this
package loads neither torch nor gymnasium: the replay and ps roles, whose image has neither, read the algorithms'
configs through it.
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
