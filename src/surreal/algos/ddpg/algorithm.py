"""DDPG (and TD3) as the roles call it (surreal.algos.interface.Algorithm), with the off-policy actors' collector."""

from typing import TYPE_CHECKING

from surreal.algos.ddpg.learner import DDPGLearner as make_learner
from surreal.algos.ddpg.policy import DDPGPolicy as make_policy
from surreal.algos.offpolicy import chunk_fields, make_collector

__all__ = ["chunk_fields", "make_collector", "make_learner", "make_policy"]

if TYPE_CHECKING:  # mypy checks this module against the interface the roles call
    from surreal.algos.ddpg import algorithm as _this
    from surreal.algos.interface import Algorithm

    _CHECKED: Algorithm = _this
