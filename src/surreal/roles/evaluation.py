"""The end of training, after a `LearnerCore` reached `total_env_steps`: a last checkpoint, the deterministic
policy evaluated on fresh seeds, eval.json, the final policy artifact with that score in its header, and a final
blob marked `done` (actors stop on it). The learner's shell (roles/learner.py `main`) and serial mode
(launch/serial.py) call it; the core itself only learns.

A learner resumed after it finished (checkpoint at `total_env_steps` and eval.json present) does not evaluate
again: the shell announces `done` (`finished_before`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from surreal.config import ExperimentConfig, algo_config
from surreal.fileio import atomic_write_text
from surreal.policy.build import evaluation_section
from surreal.runtime.rollout import Evaluation, evaluate

if TYPE_CHECKING:  # the learner's shell imports this module: the core's type only, never at run time
    from surreal.roles.learner import LearnerCore

EVAL_FILE = "eval.json"
# Evaluation episodes start from seeds no training env used: env k of the evaluation's (up to 10) starts from
# seed + EVAL_SEED_OFFSET + k, and its later episodes continue that env's generator (runtime/rollout.py evaluate).
EVAL_SEED_OFFSET = 1_000_003


def evaluate_params(cfg: ExperimentConfig, policy: Any, arrays: dict[str, Any]) -> Evaluation:
    """`policy` with the parameters `arrays`, its deterministic episodes run on the evaluation seeds: the final
    evaluation's and every point of the evaluator's curve (roles/evaluator.py) are the same episodes."""
    policy.load_params(arrays)
    return evaluate(cfg.env.id, policy, cfg.learner.eval_episodes, cfg.seed + EVAL_SEED_OFFSET, cfg.env.kwargs)


def finished_before(core: LearnerCore) -> bool:
    """Resumed after training ended (eval.json written): announce `done` without evaluating again."""
    return core.reached_total and (core.run_dir / EVAL_FILE).exists()


def finish(core: LearnerCore) -> dict[str, Any]:
    """Checkpoint, evaluate the deterministic policy, write eval.json, tell actors training is over; returns
    eval.json's content."""
    core.checkpoint()
    cfg, counters = core.cfg, core.counters
    policy = core.algo.make_policy(core.obs_space, core.act_space, algo_config(cfg), 0, 1)
    evaluation = evaluate_params(cfg, policy, core.algo_learner.params())
    result = evaluation.report(env_steps=counters.env_steps, updates=counters.updates)
    atomic_write_text(core.run_dir / EVAL_FILE, json.dumps(result, indent=2))
    core.save_policy(evaluation_section(result, cfg.seed, counters.env_steps))
    core.recorder.evaluation(result, counters.env_steps)
    mean, std = result["eval_return_mean"], result["eval_return_std"]
    core.log.info("eval over %d episodes: %.1f +- %.1f", result["eval_episodes"], mean, std)
    core.announce_done()
    return result
