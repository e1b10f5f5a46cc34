"""`surreal plot runs/<name>`: the learning curve of a run as a PNG.

Drawn on an Agg canvas directly (no pyplot), so plotting needs no display and changes no global
matplotlib state of whatever imported it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from surreal.launch.runfolder import read_eval
from surreal.metricsfile import read_evals, read_metrics
from surreal.policy.artifact import BEST_DIR, FILE_NAME, POLICY_DIR, ArtifactError, read_policy_file


class NoMetricsError(SystemExit):
    """The folder has nothing to plot. A SystemExit so `surreal plot` prints one line, not a traceback;
    code that plots many runs catches it by name."""


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> str:
    """Train return (mean of the last 20 episodes) against env steps, the evaluator's evaluations during
    training (evals.jsonl, when `learner.eval_interval` was set) with the one that produced the best policy
    (policy/best/) starred, the final eval as marked points, and the success rates on a second axis when the env
    reports success (robosuite tasks)."""
    run_dir = Path(run_dir)
    fig = curve_figure(run_dir)
    path = Path(out) if out else run_dir / "learning_curve.png"
    fig.savefig(path, dpi=120)
    return str(path)


def curve_figure(run_dir: Path) -> Figure:
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise NoMetricsError(f"surreal plot: {run_dir} has no metrics.jsonl (not a run folder?)")
    rows = [r for r in read_metrics(metrics) if r.get("train_return_mean") is not None and "env_steps" in r]
    if not rows:
        raise NoMetricsError(f"surreal plot: {metrics} has no training returns yet (no episode finished)")

    fig = Figure(figsize=(7, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    _series(ax, rows, "train_return_mean", label="train return (last 20 episodes)")
    evals = read_evals(run_dir)
    episodes = evals[-1]["eval_episodes"] if evals else "?"
    _series(
        ax, evals, "eval_return_mean", fmt="o-", color="C1", label=f"eval return during training ({episodes} episodes)"
    )
    best = best_evaluation(run_dir)
    if best is not None:
        ax.plot(
            [best["env_steps"]],
            [best["return_mean"]],
            "*",
            markersize=14,
            color="C1",
            markeredgecolor="black",
            label=f"best policy ({POLICY_DIR}/{BEST_DIR}): {best['return_mean']:.1f}",
        )
    evaluation = read_eval(run_dir)
    if "eval_return_mean" in evaluation and "env_steps" in evaluation:
        ax.errorbar(
            [evaluation["env_steps"]],
            [evaluation["eval_return_mean"]],
            yerr=[evaluation.get("eval_return_std") or 0.0],
            fmt="o",
            color="C3",
            capsize=4,
            label=f"final eval ({evaluation.get('eval_episodes', '?')} episodes)",
        )
    handles, labels = ax.get_legend_handles_labels()
    if any(r.get("train_success_rate") is not None for r in rows):
        rate = ax.twinx()
        _series(rate, rows, "train_success_rate", fmt="--", color="C2", label="train success rate (last 20 episodes)")
        _series(rate, evals, "eval_success_rate", fmt="s:", color="C4", label="eval success during training")
        if "env_steps" in evaluation:
            _series(rate, [evaluation], "eval_success_rate", fmt="s", color="C2", label="final eval success")
        rate.set_ylim(-0.02, 1.02)
        rate.set_ylabel("success rate")
        more_handles, more_labels = rate.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    ax.set_title(_title(run_dir))
    ax.grid(alpha=0.3)
    ax.legend(handles, labels, loc="best")
    fig.tight_layout()
    return fig


def best_evaluation(run_dir: Path) -> dict[str, Any] | None:
    """The evaluation that produced the run's best policy (its artifact's header), None without a readable one."""
    path = run_dir / POLICY_DIR / BEST_DIR / FILE_NAME
    if not path.is_file():
        return None
    try:
        evaluation = read_policy_file(path)[0]["evaluation"]
    except ArtifactError:
        return None  # a damaged best is not worth failing the plot for
    return evaluation if isinstance(evaluation, dict) else None


def _series(ax: Axes, rows: list[dict[str, Any]], key: str, fmt: str = "-", **style: Any) -> None:
    """`key` against env steps, for the rows that hold it (none: nothing is drawn)."""
    points = [r for r in rows if r.get(key) is not None]
    if points:
        ax.plot([r["env_steps"] for r in points], [r[key] for r in points], fmt, markersize=3, **style)


def _title(run_dir: Path) -> str:
    """`PPO on Hopper-v5, seed 1` from config.yaml; the folder name when that is missing or unreadable."""
    try:
        cfg: Any = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        return f"{cfg['algo']['name'].upper()} on {cfg['env']['id']}, seed {cfg['seed']}"
    except (OSError, yaml.YAMLError, TypeError, KeyError, AttributeError):
        return run_dir.name
