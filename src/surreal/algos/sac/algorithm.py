"""SAC as the roles call it (surreal.algos.interface.Algorithm), with the off-policy actors' collector."""

from typing import TYPE_CHECKING

from surreal.algos.offpolicy import chunk_fields, make_collector
from surreal.algos.sac.learner import SACLearner as make_learner
from surreal.algos.sac.policy import SACPolicy as make_policy

__all__ = ["chunk_fields", "make_collector", "make_learner", "make_policy"]

if TYPE_CHECKING:  # mypy checks this module against the interface the roles call
    from surreal.algos.interface import Algorithm
    from surreal.algos.sac import algorithm as _this

    _CHECKED: Algorithm = _this
