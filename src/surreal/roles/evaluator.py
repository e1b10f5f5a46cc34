"""`surreal role evaluator`: the published policy evaluated while training runs, for a curve of eval returns.

    ps ──params, each time their env_steps pass the next multiple of learner.eval_interval──►
        deterministic policy ──► learner.eval_episodes full episodes ──► evals.jsonl rows, /metrics, log

The learner evaluates once, at the end (roles/evaluation.py). A target such as "eval success 0.8 within 500k env
steps" needs the deterministic policy measured as training goes, and the learner cannot do it without stalling its
updates for the episodes' length (20 Lift episodes are 10,000 env steps: a minute of a core). This role is an
actor that sends nothing: it long-polls the ps for the newest blob and, whenever the blob's `env_steps` passed the
next multiple of `learner.eval_interval`, evaluates that blob on the seeds of the final evaluation
(`EVAL_SEED_OFFSET`), so every point of the curve measures the same episodes. A row is labelled with the blob's
own `env_steps`; the policy it scores is the one published then, so an evaluation that takes a while measures no
later policy than it names.

Each row also goes to TensorBoard, against the same env steps, in an event file of the evaluator's own under
`<run>/tensorboard/evaluator/` (`EvalLog`): the learner writes `<run>/tensorboard/`, and no two processes write one
event file. Where it has a run folder, it also keeps the best policy so far by eval return mean (`policy/best/`, the
artifact of surreal/policy/artifact.py with the evaluation in its header), as Stable-Baselines3's EvalCallback keeps
best_model.

Stateless but for the rows it wrote: started again, it continues after the last row of `evals.jsonl` (and beats
the best policy's recorded score, not a fresh one). A learner that resumes from a checkpoint taken before the last
row (a run killed, then `surreal run --resume`; a learner restarted within a run) publishes fewer env steps than that
row names: the rows past that point scored policies the resumed run no longer has, so they are dropped (from
evals.jsonl, and hidden in TensorBoard) and the evaluations are done again as the learner gets there
(`EvaluatorCore.step`), and no row's env steps ever go backwards. It stops on the `done` blob; the learner's
eval.json is the curve's last point. SIGTERM ends it at once (no handler until training is done): it holds nothing
that a written row does not. It costs CPU that the actors and the learner would otherwise get (10 HalfCheetah
episodes took 0.9-1.5 s of a 2-core box's core, the rows' `eval_s`): by default every 25,000 env steps (RL Zoo's
cadence), and only in runs whose budget reaches that (`ExperimentConfig.evaluates_while_training`).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from surreal.algos import get_algorithm
from surreal.config import ExperimentConfig, algo_config, config_from_env
from surreal.envs import env_spaces
from surreal.metrics import RoleMetrics
from surreal.metricsfile import EVALS_FILE, read_evals
from surreal.policy.artifact import BEST_DIR, FILE_NAME, POLICY_DIR, ArtifactError, read_policy_file
from surreal.policy.build import PolicyRecorder, evaluation_section
from surreal.proto.curve import WireContext
from surreal.proto.wire import Params
from surreal.provenance import run_git_sha
from surreal.roles.common import StopFlag, count_errors, hold_until_stopped, param_client, setup_logging
from surreal.roles.evaluation import evaluate_params
from surreal.roles.ports import ParamsIn
from surreal.runstore import EVALUATOR, open_mirror
from surreal.runtime.recorder import TENSORBOARD_DIR, truncate_metrics, write_evaluation
from surreal.settings import Settings

LOG = logging.getLogger("surreal.evaluator")  # the one setup_logging("evaluator") configures in the process
EVALUATOR_BOARD = "evaluator"  # <run>/tensorboard/<this>: the evaluator's TensorBoard run
HOLD_S = 2.0  # long poll: the ps answers when a newer blob arrives or after this long
IDLE_S = 0.5  # pause between fetches while no blob has come (the learner or the ps is still starting)


@dataclass(frozen=True)
class EvalRow:
    """One point of the eval curve: the blob's env steps and version, when it was evaluated, and what its
    deterministic policy scored (success rate only for envs that report success)."""

    env_steps: int
    version: int
    time: float
    eval_s: float
    eval_return_mean: float
    eval_return_std: float
    eval_episodes: int
    eval_success_rate: float | None


def append_row(path: Path, row: EvalRow) -> None:
    """One line per row. A line torn by a kill (SIGTERM ends the evaluator mid-write too) is ended first, so it
    costs only itself: readers skip a line that is not a JSON object (surreal.metricsfile)."""
    torn = False
    if path.is_file() and path.stat().st_size > 0:
        with open(path, "rb") as tail:
            tail.seek(-1, 2)  # the last byte only: the file grows by a row per evaluation
            torn = tail.read(1) != b"\n"
    with open(path, "a", encoding="utf-8") as out:
        out.write(("\n" if torn else "") + json.dumps(asdict(row)) + "\n")


class EvalLog:
    """Where the evaluator's rows go in a run folder: a line of evals.jsonl each, then the same numbers in
    TensorBoard (`eval/*` against env steps, written through at once: SIGTERM ends the evaluator mid-anything)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / EVALS_FILE
        self.board = run_dir / TENSORBOARD_DIR / EVALUATOR_BOARD
        self.tensorboard = self._writer(None)

    def _writer(self, purge_step: int | None) -> Any:
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(self.board), purge_step=purge_step)

    def write(self, row: EvalRow) -> None:
        append_row(self.path, row)
        write_evaluation(self.tensorboard, asdict(row), row.env_steps)
        self.tensorboard.flush()

    def rewind(self, env_steps: int) -> None:
        """Drop the rows past `env_steps` (a learner resumed there): from evals.jsonl, and in TensorBoard by a new
        event file that hides the older ones' later points."""
        truncate_metrics(self.path, {"env_steps": env_steps})
        self.tensorboard.close()
        self.tensorboard = self._writer(env_steps + 1)

    def close(self) -> None:
        self.tensorboard.close()


def next_threshold(env_steps: int, interval: int) -> int:
    """The first multiple of `interval` after `env_steps`: when the next evaluation is due."""
    return (env_steps // interval + 1) * interval


class BestPolicy:
    """policy/best/policy.safetensors: the evaluated blob with the highest eval return mean so far."""

    def __init__(self, cfg: ExperimentConfig, obs_space: Any, act_space: Any, run_dir: Path) -> None:
        self.path = run_dir / POLICY_DIR / BEST_DIR / FILE_NAME
        self.seed = cfg.seed
        self.recorder = PolicyRecorder(cfg, obs_space, act_space, run_git_sha(run_dir))
        self.score = float("-inf")
        if self.path.is_file():  # a restarted evaluator: the score to beat is the one kept
            try:
                evaluation = read_policy_file(self.path)[0]["evaluation"]
                self.score = float(evaluation["return_mean"]) if evaluation else self.score
            except (ArtifactError, TypeError, ValueError):
                pass  # a damaged best is replaced by the next evaluation

    def offer(self, params: Params, row: EvalRow) -> bool:
        """Keep `params` if `row` beats the best so far and they are finite (a file of NaN weights is refused
        where it is read, so it never replaces the best); whether it did."""
        if not row.eval_return_mean > self.score:
            return False
        blob = params.blob
        try:
            self.recorder.save(
                self.path,
                params.arrays,
                version=blob.version,
                env_steps=blob.env_steps,
                updates=None,  # the ps's blob carries no update count
                evaluation=evaluation_section(asdict(row), self.seed, blob.env_steps),
            )
        except ArtifactError as exc:  # NaN or infinity in the blob: a reader would refuse it; the best stays
            LOG.warning("version %d not promoted to the best policy: %s", blob.version, exc)
            return False
        self.score = row.eval_return_mean
        return True


class EvaluatorCore:
    """Fetch the newest blob; evaluate it when its env steps reached the next threshold; write its row and keep it
    as the best policy when it scores best (`best`), where there is a run folder. No sockets (the tests drive it
    with an in-process ps)."""

    def __init__(self, cfg: ExperimentConfig, params: ParamsIn, run_dir: Path | None = None) -> None:
        """`run_dir`: where the rows are written (`EvalLog`, continuing after the last row of a restarted
        evaluator's evals.jsonl) and the best policy kept; None: the rows only go to the caller."""
        if cfg.learner.eval_interval <= 0:
            raise ValueError("the evaluator needs learner.eval_interval > 0")
        self.cfg = cfg
        self.params = params
        spaces = env_spaces(cfg)
        self.policy = get_algorithm(cfg.algo.name).make_policy(*spaces, algo_config(cfg), 0, 1)
        self.best = BestPolicy(cfg, *spaces, run_dir) if run_dir is not None else None
        self.eval_log = EvalLog(run_dir) if run_dir is not None else None
        self.rows = [int(row["env_steps"]) for row in read_evals(run_dir)] if run_dir is not None else []
        self.due = next_threshold(self.rows[-1] if self.rows else 0, cfg.learner.eval_interval)
        self.version, self.incarnation, self.done = -1, "", False

    def step(self, hold_s: float = HOLD_S, timeout_s: float = 5.0) -> EvalRow | None:
        """One fetch (a long poll for a newer blob); a row, written, when the blob it brought was due for evaluation."""
        reply = self.params.fetch(self.version, self.incarnation, timeout_s, hold_s, self.version + 1)
        if not isinstance(reply, Params):
            return None
        blob = reply.blob
        self.version, self.incarnation, self.done = blob.version, blob.incarnation, blob.done
        if self.rows and blob.env_steps < self.rows[-1]:  # the learner resumed from before the last row
            LOG.info("the learner resumed at %d env steps: rows after it dropped", blob.env_steps)
            if self.eval_log is not None:
                self.eval_log.rewind(blob.env_steps)
            self.rows = [steps for steps in self.rows if steps <= blob.env_steps]
            self.due = next_threshold(self.rows[-1] if self.rows else 0, self.cfg.learner.eval_interval)
        if blob.done or blob.env_steps < self.due:
            return None
        row = self.evaluate(reply)
        if self.eval_log is not None:
            self.eval_log.write(row)
        self.rows.append(blob.env_steps)
        self.due = next_threshold(blob.env_steps, self.cfg.learner.eval_interval)
        return row

    def evaluate(self, params: Params) -> EvalRow:
        started = time.monotonic()
        result = evaluate_params(self.cfg, self.policy, params.arrays)
        row = EvalRow(
            env_steps=params.blob.env_steps,
            version=params.blob.version,
            time=round(time.time(), 3),
            eval_s=round(time.monotonic() - started, 3),
            **result.summary(),
        )
        if self.best is not None:
            self.best.offer(params, row)
        return row

    def close(self) -> None:
        if self.eval_log is not None:
            self.eval_log.close()


def main(args: argparse.Namespace) -> int:
    del args
    settings = Settings.from_env()
    cfg = config_from_env()
    log = setup_logging("evaluator", settings.index)
    torch.set_num_threads(1)
    metrics = RoleMetrics("evaluator", settings.index)
    m_return = metrics.gauge("evaluator_return_mean", "mean return of the last evaluation")
    m_success = metrics.gauge("evaluator_success_rate", "success rate of the last evaluation (success envs only)")
    m_env_steps = metrics.gauge("evaluator_env_steps", "env steps of the blob evaluated last")
    m_evals = metrics.counter("evaluator_evaluations_total", "evaluations done")
    run_dir = settings.run_dir
    # With a bucket the run folder is its cache (a pod's scratch too): rows and best policy come back from there.
    mirror = open_mirror(settings.run_uri, run_dir, EVALUATOR, metrics)
    if mirror is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        mirror.pull()
    ctx = WireContext(settings.curve_keys)
    params = param_client(ctx, settings, cfg, count_errors(metrics))
    core = EvaluatorCore(cfg, params, run_dir if run_dir.is_dir() else None)  # a pod's: rows to the log and /metrics
    metrics.serve(settings.bind_host, settings.metrics_port)
    log.info(
        "evaluating every %d env steps (%d episodes); first at %d",
        cfg.learner.eval_interval,
        cfg.learner.eval_episodes,
        core.due,
    )
    try:
        while not core.done:  # SIGTERM's default action ends it, mid-evaluation too
            row = core.step()
            if row is None:
                if core.version < 0:  # no blob yet: the learner or the ps is still starting
                    time.sleep(IDLE_S)
                continue
            if mirror is not None:
                mirror.push_soon()
            m_return.set(row.eval_return_mean)
            if row.eval_success_rate is not None:
                m_success.set(row.eval_success_rate)
            m_env_steps.set(row.env_steps)
            m_evals.inc()
            success = "" if row.eval_success_rate is None else f", success {row.eval_success_rate:.0%}"
            log.info(
                "eval at %d env steps: %.1f +- %.1f%s (%.1f s)",
                row.env_steps,
                row.eval_return_mean,
                row.eval_return_std,
                success,
                row.eval_s,
            )
        if settings.hold_when_done:
            hold_until_stopped(StopFlag().install(), log)
    finally:
        core.close()
        if mirror is not None:
            mirror.close()
        params.close()
        ctx.term()
        metrics.close()
    log.info("stopped at version %d%s", core.version, " (training done)" if core.done else "")
    return 0
