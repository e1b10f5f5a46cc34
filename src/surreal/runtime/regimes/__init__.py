"""Flow control: how far actors may run ahead, and what the learner may learn from. One module per regime
holds both halves side by side (after Acme's rate limiters and Sample Factory's batcher), and its docstring is
the specification:

    versions.py       VersionsRegime, on-policy ("lockstep", "staleness"): VersionThrottle | ChunkFeed, StalenessBound
    replay_ratio.py   ReplayRatioRegime, off-policy: EnvStepAllowance | TransitionFeed, ReplayRatioLimiter
    common.py         what the runtime asks of a regime (Regime), the halves' interfaces (ActorThrottle, Feed,
                      Follower, Outcome), Counters, LiveActors

The algorithm's config names its regime (`AlgoConfig.regime`, inherited from the regime's config class, which holds
its keys) and `regime_of` builds it, so a role never asks which algorithm or regime it runs. Torch-free and
transport-free: the feeds call the algorithm's learner through the narrow interface their regime declares, and the
tests drive them with scripted replies.
"""

from __future__ import annotations

import importlib
from typing import Any

from surreal.config.schema import ExperimentConfig
from surreal.runtime.regimes.common import ActorThrottle, Counters, Feed, Follower, Outcome, Regime


def regime_of(cfg: ExperimentConfig) -> Regime[Any]:
    """The experiment's regime: the class its algorithm's config names, built from the experiment."""
    module, _, name = cfg.algo.regime.rpartition(".")
    regime: Regime[Any] = getattr(importlib.import_module(module), name)(cfg)
    return regime


__all__ = ["ActorThrottle", "Counters", "Feed", "Follower", "Outcome", "Regime", "regime_of"]
