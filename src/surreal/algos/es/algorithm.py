"""ES as the roles call it (surreal.algos.interface.Algorithm)."""

from typing import TYPE_CHECKING

from surreal.algos.es.learner import ESLearner as make_learner
from surreal.algos.es.policy import chunk_fields, make_collector, make_policy

__all__ = ["chunk_fields", "make_collector", "make_learner", "make_policy"]

if TYPE_CHECKING:  # mypy checks this module against the interface the roles call
    from surreal.algos.es import algorithm as _this
    from surreal.algos.interface import Algorithm

    _CHECKED: Algorithm = _this
