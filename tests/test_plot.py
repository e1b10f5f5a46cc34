"""`surreal plot`: a PNG learning curve from a run folder, and a clear error for a folder without one."""

from __future__ import annotations

import json

import numpy as np
import pytest

from surreal.commands.plot import (
    NoMetricsError,
    across_seeds,
    curve_figure,
    overlay_figure,
    plot_run,
    plot_runs,
    sweep_figure,
)
from surreal.commands.sweep import plot_sweep
from surreal.config import load_config, save_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(run_dir, returns: list[float | None]) -> None:
    run_dir.mkdir(parents=True)
    save_config(load_config(["name=curve", "env=Hopper-v5", "seed=4"]), run_dir / "config.yaml")
    rows = [{"env_steps": 2048 * (i + 1), "updates": i + 1, "train_return_mean": r} for i, r in enumerate(returns)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"env_st')


def test_plot_writes_a_png_learning_curve(tmp_path):
    run_dir = tmp_path / "curve"
    write_run(run_dir, [None, *[float(i * i) for i in range(40)]])
    (run_dir / "eval.json").write_text(
        json.dumps({"eval_return_mean": 1600.0, "eval_return_std": 40.0, "eval_episodes": 10, "env_steps": 2048 * 41})
    )

    path = plot_run(run_dir)
    assert path == str(run_dir / "learning_curve.png")
    data = (run_dir / "learning_curve.png").read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000

    out = tmp_path / "elsewhere.png"
    assert plot_run(str(run_dir), out) == str(out) and out.read_bytes().startswith(PNG_MAGIC)


def test_a_run_with_success_rates_gets_a_second_axis_for_them(tmp_path):
    run_dir = tmp_path / "curve"
    write_run(run_dir, [1.0, 2.0, 3.0])
    assert len(curve_figure(run_dir).axes) == 1, "no success reported: returns only"
    rows = [
        {"env_steps": 2048 * i, "updates": i, "train_return_mean": 1.0, "train_success_rate": i / 4} for i in (1, 2)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "eval.json").write_text(
        json.dumps({"eval_return_mean": 5.0, "eval_success_rate": 0.5, "env_steps": 4096})
    )
    fig = curve_figure(run_dir)
    assert [ax.get_ylabel() for ax in fig.axes] == ["episode return", "success rate"]
    assert list(fig.axes[1].lines[0].get_ydata()) == [0.25, 0.5] and list(fig.axes[1].lines[1].get_ydata()) == [0.5]
    assert plot_run(run_dir).endswith(".png")


def test_plot_without_metrics_or_returns_says_why(tmp_path):
    with pytest.raises(NoMetricsError, match="no metrics.jsonl"):
        plot_run(tmp_path)
    write_run(tmp_path / "young", [None, None])
    with pytest.raises(NoMetricsError, match="no training returns yet"):
        plot_run(tmp_path / "young")


def test_the_evaluators_rows_are_drawn_on_both_axes(tmp_path):
    run_dir = tmp_path / "curve"
    write_run(run_dir, [1.0, 2.0, 3.0])
    rows = [{"env_steps": 2048 * i, "train_return_mean": 1.0, "train_success_rate": i / 4} for i in (1, 2, 3)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = [
        {"env_steps": 2000 * i, "eval_return_mean": 10.0 * i, "eval_episodes": 5, "eval_success_rate": i / 5}
        for i in (1, 2, 3)
    ]
    (run_dir / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals) + '{"env_st')
    (run_dir / "eval.json").write_text(
        json.dumps({"eval_return_mean": 40.0, "eval_success_rate": 0.8, "env_steps": 6144})
    )
    returns, rates = curve_figure(run_dir).axes
    train, during = returns.lines[:2]  # then the final eval's errorbar (its point and caps)
    assert [list(train.get_ydata()), list(during.get_ydata())] == [[1.0] * 3, [10.0, 20.0, 30.0]]
    assert list(during.get_xdata()) == [2000, 4000, 6000]
    assert [list(line.get_ydata()) for line in rates.lines] == [[0.25, 0.5, 0.75], [0.2, 0.4, 0.6], [0.8]]


def test_the_evaluation_that_produced_the_best_policy_is_starred(tmp_path):
    import numpy as np
    import torch

    from surreal.algos import get_algorithm
    from surreal.config import algo_config
    from surreal.envs import make_env
    from surreal.policy.artifact import BEST_DIR, FILE_NAME, POLICY_DIR
    from surreal.policy.build import PolicyRecorder

    run_dir = tmp_path / "curve"
    write_run(run_dir, [1.0, 2.0, 3.0])
    evals = [{"env_steps": s, "eval_return_mean": r, "eval_episodes": 3} for s, r in ((2048, 5.0), (4096, 9.0))]
    (run_dir / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    assert not any(line.get_marker() == "*" for line in curve_figure(run_dir).axes[0].lines), "no best yet"

    cfg = load_config(["algo=ppo", "env=Pendulum-v1", "algo.hidden_sizes=[8]"])
    env = make_env(cfg.env.id, 0)
    params = (
        get_algorithm("ppo")
        .make_learner(env.observation_space, env.action_space, algo_config(cfg), torch.device("cpu"))
        .params()
    )
    evaluation = {"return_mean": 9.0, "return_std": 1.0, "episodes": 3, "success_rate": None, "seed": 1}
    PolicyRecorder(cfg, env.observation_space, env.action_space, "sha").save(
        run_dir / POLICY_DIR / BEST_DIR / FILE_NAME,
        params,
        version=2,
        env_steps=4096,
        updates=None,
        evaluation={**evaluation, "env_steps": 4096},
    )
    (star,) = [line for line in curve_figure(run_dir).axes[0].lines if line.get_marker() == "*"]
    assert np.array_equal(star.get_xdata(), [4096]) and np.array_equal(star.get_ydata(), [9.0])
    assert "best policy" in star.get_label()
    assert plot_run(run_dir).endswith(".png")


def test_several_runs_are_overlaid_one_colour_each(tmp_path):
    for name, scale in (("a", 1.0), ("b", 2.0)):
        write_run(tmp_path / name, [scale * i for i in range(10)])
    (tmp_path / "b" / "evals.jsonl").write_text(json.dumps({"env_steps": 4096, "eval_return_mean": 3.0}) + "\n")
    fig = overlay_figure([tmp_path / "a", tmp_path / "b"])
    (ax,) = fig.axes
    labelled = {line.get_label(): line for line in ax.lines if not line.get_label().startswith("_")}
    assert {"a", "b"} <= set(labelled) and labelled["a"].get_color() != labelled["b"].get_color()
    assert list(labelled["b"].get_ydata()) == [2.0 * i for i in range(10)]
    path = plot_runs([tmp_path / "a", tmp_path / "b"])
    assert path == str(tmp_path / "overlay.png") and (tmp_path / "overlay.png").read_bytes().startswith(PNG_MAGIC)
    assert plot_runs([tmp_path / "a"]) == str(tmp_path / "a" / "learning_curve.png"), "one run: as before"
    with pytest.raises(NoMetricsError, match="no training returns yet"):
        plot_runs([tmp_path / "a", tmp_path / "nothing"])


def test_seeds_are_averaged_on_the_env_steps_they_all_cover():
    steps, mean, low, high = across_seeds(
        [(np.array([0.0, 100.0, 200.0]), np.array([0.0, 10.0, 20.0])), (np.array([50.0, 150.0]), np.array([5.0, 5.0]))]
    )
    assert list(steps) == [50.0, 100.0, 150.0] and list(mean) == [5.0, 7.5, 10.0]
    assert list(low) == [5.0, 5.0, 5.0] and list(high) == [5.0, 10.0, 15.0]


def test_a_sweep_folder_is_drawn_as_its_settings_mean_and_spread(tmp_path):
    sweep_dir = tmp_path / "sweep"
    members = [
        {"name": f"00{i}", "overrides": [f"seed={i}", "env=Hopper-v5"], "swept": {"seed": str(i)}} for i in (1, 2)
    ]
    for member in members:
        write_run(sweep_dir / member["name"], [1.0, 2.0, 3.0])
    (sweep_dir / "sweep.json").write_text(json.dumps({"name": "sweep", "members": members}))
    fig = sweep_figure([("seeds", [sweep_dir / "001", sweep_dir / "002"])])
    (ax,) = fig.axes
    assert ax.get_ylabel().startswith("train return") and len(ax.collections) == 1, "a band for the spread"
    assert plot_sweep(sweep_dir) == str(sweep_dir / "curves.png")
    assert (sweep_dir / "curves.png").read_bytes().startswith(PNG_MAGIC)
