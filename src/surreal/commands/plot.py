"""`surreal plot`: learning curves as PNG.

    surreal plot runs/<name>                 one run: train return, evaluations, final eval, success rates
    surreal plot runs/a runs/b runs/c        several runs overlaid, one colour each
    surreal plot runs/<sweep>                a sweep (`surreal run --multirun`): each setting's mean and spread

Drawn on an Agg canvas directly (no pyplot), so plotting needs no display and changes no global
matplotlib state of whatever imported it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from surreal.metricsfile import read_evals, read_metrics
from surreal.policy.artifact import BEST_DIR, FILE_NAME, POLICY_DIR, ArtifactError, read_policy_file
from surreal.runjson import read_eval


class NoMetricsError(SystemExit):
    """The folder has nothing to plot. A SystemExit so `surreal plot` prints one line, not a traceback;
    code that plots many runs catches it by name."""


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> str:
    """Train return (mean of the last 20 episodes) against env steps, the evaluator's evaluations during
    training (evals.jsonl, when `learner.eval_interval` was set) with the one that produced the best policy
    (policy/best/) starred, the final eval as marked points, and the success rates on a second axis when the env
    reports success (robosuite tasks)."""
    run_dir = Path(run_dir)
    path = Path(out) if out else run_dir / "learning_curve.png"
    curve_figure(run_dir).savefig(path, dpi=120)
    return str(path)


def plot_runs(run_dirs: Sequence[str | Path], out: str | Path | None = None) -> str:
    """One run as `plot_run` draws it; several overlaid (`overlay_figure`), by default as overlay.png in the
    folder that holds them all. (A sweep's folder: commands/sweep.py `plot_sweep`.)"""
    dirs = [Path(d) for d in run_dirs]
    if len(dirs) == 1:
        return plot_run(dirs[0], out)
    path = Path(out) if out else Path(os.path.commonpath([d.resolve() for d in dirs])) / "overlay.png"
    overlay_figure(dirs).savefig(path, dpi=120)
    return str(path)


def run_curve(run_dir: Path, train: bool = False) -> tuple[str, np.ndarray, np.ndarray]:
    """What a run's curve is: ("eval", env steps, eval return) from the evaluator's rows and the final eval
    when the run has them (and `train` is not asked for), else ("train", env steps, train return);
    NoMetricsError when it has neither."""
    evals = [r for r in read_evals(run_dir) if r.get("eval_return_mean") is not None]
    final = read_eval(run_dir)
    if evals and not train:
        points = [(r["env_steps"], r["eval_return_mean"]) for r in evals]
        if "eval_return_mean" in final and "env_steps" in final and final["env_steps"] > points[-1][0]:
            points.append((final["env_steps"], final["eval_return_mean"]))
        kind = "eval"
    else:
        rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("train_return_mean") is not None]
        if not rows:
            raise NoMetricsError(f"surreal plot: {run_dir} has no training returns yet")
        points, kind = [(r["env_steps"], r["train_return_mean"]) for r in rows], "train"
    xs, ys = np.array([p[0] for p in points], float), np.array([p[1] for p in points], float)
    return kind, xs, ys


def across_seeds(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(env steps, mean, min, max) of several curves, each interpolated linearly onto the env steps where any of
    them has a point, within the range they all cover (seeds report at different env steps)."""
    lo, hi = max(xs[0] for xs, _ in curves), min(xs[-1] for xs, _ in curves)
    grid = np.unique(np.concatenate([xs[(xs >= lo) & (xs <= hi)] for xs, _ in curves]))
    values = np.stack([np.interp(grid, xs, ys) for xs, ys in curves])
    return grid, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def sweep_figure(groups: Sequence[tuple[str, Sequence[Path]]], title: str = "sweep") -> Figure:
    """Per (label, run folders) group, the mean across its runs (seeds) as a line and their spread (min to max)
    as a band, against env steps. Eval returns when every run has the evaluator's rows, else train returns.
    Runs with nothing to draw yet are left out; NoMetricsError if none has anything."""

    def collect(train: bool) -> list[tuple[str, list[tuple[str, np.ndarray, np.ndarray]]]]:
        curves = []
        for label, dirs in groups:
            found = []
            for run_dir in dirs:
                try:
                    found.append(run_curve(Path(run_dir), train))
                except NoMetricsError:
                    continue
            if found:
                curves.append((label, found))
        return curves

    curves = collect(train=False)
    if not curves:
        raise NoMetricsError(f"surreal plot: no run of {title} has training returns yet")
    kind = "eval" if all(k == "eval" for _, found in curves for k, _, _ in found) else "train"
    if kind == "train":  # one kind of curve throughout: a sweep mixing both draws train returns
        curves = collect(train=True)
    fig, ax = _axes()
    for i, (label, found) in enumerate(curves):
        series = [(xs, ys) for _, xs, ys in found]
        color = f"C{i % 10}"
        grid, mean, low, high = across_seeds(series)
        if len(grid) == 0:  # the runs share no range of env steps: each on its own
            for xs, ys in series:
                ax.plot(xs, ys, "-", color=color, alpha=0.6)
            ax.plot([], [], "-", color=color, label=f"{label} (n={len(series)})")
            continue
        ax.plot(grid, mean, "-", color=color, label=f"{label} (n={len(series)})")
        if len(series) > 1:
            ax.fill_between(grid, low, high, color=color, alpha=0.2, linewidth=0)
    what = "eval return (deterministic policy)" if kind == "eval" else "train return (last 20 episodes)"
    return _finish(fig, ax, what, f"{title}: mean and min-max across seeds", fontsize="small")


def overlay_figure(run_dirs: Sequence[Path]) -> Figure:
    """Several runs on one axis, one colour each: train return as a line, the evaluator's evaluations and the
    final eval as points, labelled by folder (parent/folder where names repeat)."""
    names = [d.name for d in run_dirs]
    labels = [f"{d.parent.name}/{d.name}" if names.count(d.name) > 1 else d.name for d in run_dirs]
    fig, ax = _axes()
    drawn = 0
    for i, (run_dir, label) in enumerate(zip(run_dirs, labels, strict=True)):
        color = f"C{i % 10}"
        rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("train_return_mean") is not None]
        evals = read_evals(run_dir)
        evaluation = read_eval(run_dir)
        if not rows and not evals and "eval_return_mean" not in evaluation:
            raise NoMetricsError(f"surreal plot: {run_dir} has no training returns yet (not a run folder?)")
        _series(ax, rows, "train_return_mean", color=color, label=label)
        _series(ax, evals, "eval_return_mean", fmt="o--", color=color)
        if "eval_return_mean" in evaluation and "env_steps" in evaluation:
            ax.plot([evaluation["env_steps"]], [evaluation["eval_return_mean"]], "*", color=color, markersize=10)
        drawn += 1
    ax.plot([], [], "k-", label="train return (last 20 episodes)")
    ax.plot([], [], "ko--", markersize=3, label="eval during training")
    ax.plot([], [], "k*", markersize=8, label="final eval")
    return _finish(fig, ax, "episode return", f"{drawn} runs", fontsize="small")


def curve_figure(run_dir: Path) -> Figure:
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise NoMetricsError(f"surreal plot: {run_dir} has no metrics.jsonl (not a run folder?)")
    rows = [r for r in read_metrics(metrics) if r.get("train_return_mean") is not None and "env_steps" in r]
    if not rows:
        raise NoMetricsError(f"surreal plot: {metrics} has no training returns yet (no episode finished)")

    fig, ax = _axes()
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
    return _finish(fig, ax, "episode return", _title(run_dir), handles, labels)


def _axes() -> tuple[Figure, Axes]:
    """Every plot's figure, on an Agg canvas of its own (module docstring), and its axis."""
    fig = Figure(figsize=(7, 4.2))
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def _finish(fig: Figure, ax: Axes, ylabel: str, title: str, *legend: Any, **legend_style: Any) -> Figure:
    """Every plot's frame: env steps against `ylabel`, the title, a light grid, the legend (`ax.legend`'s
    arguments); laid out."""
    ax.set_xlabel("environment steps")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(*legend, loc="best", **legend_style)
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
