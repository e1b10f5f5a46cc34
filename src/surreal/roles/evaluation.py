"""The deterministic policy evaluated on fresh seeds: the learner's final evaluation (roles/learner.py `finish`)
and every point of the evaluator's curve (roles/evaluator.py) run the same episodes, and `surreal eval` with the
run's seed repeats them."""

from __future__ import annotations

from typing import Any

from surreal.config import ExperimentConfig
from surreal.runtime.rollout import Evaluation, evaluate

EVAL_FILE = "eval.json"
# Evaluation episodes start from seeds no training env used: env k of the evaluation's (up to 10) starts from
# seed + EVAL_SEED_OFFSET + k, and its later episodes continue that env's generator (runtime/rollout.py evaluate).
EVAL_SEED_OFFSET = 1_000_003


def evaluate_params(cfg: ExperimentConfig, policy: Any, arrays: dict[str, Any]) -> Evaluation:
    """`policy` with the parameters `arrays`, its deterministic episodes run on the evaluation seeds: the final
    evaluation's and every point of the evaluator's curve (roles/evaluator.py) are the same episodes."""
    policy.load_params(arrays)
    return evaluate(cfg.env.id, policy, cfg.learner.eval_episodes, cfg.seed + EVAL_SEED_OFFSET, cfg.env.kwargs)
