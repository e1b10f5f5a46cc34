"""`surreal plot runs/<name>`: the learning curve of a run as a PNG."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from surreal.launch.runfolder import read_metrics  # noqa: E402


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> str:
    run_dir = Path(run_dir)
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("train_return_mean") is not None]
    if not rows:
        raise SystemExit(f"surreal plot: {run_dir} has no training returns in metrics.jsonl")
    title = run_dir.name
    config = run_dir / "config.yaml"
    if config.exists():
        cfg = OmegaConf.load(config)
        title = f"{cfg.algo.name.upper()} on {cfg.env.id}, seed {cfg.seed}, {cfg.topology.actors} actors"
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot([r["env_steps"] for r in rows], [r["train_return_mean"] for r in rows], label="train return (last 20)")
    eval_path = run_dir / "eval.json"
    if eval_path.exists():
        evaluation = json.loads(eval_path.read_text(encoding="utf-8"))
        ax.errorbar([evaluation["env_steps"]], [evaluation["eval_return_mean"]], yerr=[evaluation["eval_return_std"]],
                    fmt="o", color="C3", capsize=4, label=f"eval ({evaluation['eval_episodes']} episodes)")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = Path(out) if out else run_dir / "learning_curve.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)
