"""Tuned defaults per task (surreal/conf/tasks.yaml): RL Baselines3 Zoo's per-env hyperparameters, so that
`surreal run env=Pendulum-v1 algo=sac` trains for Pendulum's budget and warm-up instead of a MuJoCo task's.

An entry is keyed by env id and algorithm; its values fill the keys neither the user nor a named preset sets (the
loader, surreal/config/loading.py, applies them and records where every value came from). Each entry carries the
claim its results files back: tests/test_tasks.py holds the registry to bench/results/, and `surreal run --help`
prints the claims. Torch- and gymnasium-free, as the rest of the config layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from surreal.errors import ConfigError

TASKS_FILE = "tasks.yaml"  # in the packaged config module (surreal/conf)
METRICS = {"eval_return_mean": "eval return", "eval_success_rate": "eval success rate"}


@dataclass(frozen=True)
class Claim:
    """What the entry's results files measured: every run in them reached `at_least` of `metric` (its final
    evaluation) in the entry's env-step budget. `unlike_results`: key -> why the claim holds although the results'
    runs had another value for it."""

    metric: str
    at_least: float
    results: tuple[str, ...]
    unlike_results: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """One entry: the env, the algorithm, the values it sets (dotted keys) and its claim."""

    env: str
    algo: str
    values: dict[str, Any]
    claim: Claim

    @property
    def label(self) -> str:
        """How a value's source names the entry: `Pendulum-v1/sac`."""
        return f"{self.env}/{self.algo}"

    def claim_text(self) -> str:
        """`eval return >= -250 in 20,000 env steps`, from the claim and the budget the entry sets."""
        steps = self.values.get("total_env_steps")
        budget = f" in {steps:,} env steps" if isinstance(steps, int) else ""
        bar = self.claim.at_least
        shown = f"{bar:g}" if isinstance(bar, float) and not bar.is_integer() else f"{int(bar):,}"
        return f"{METRICS[self.claim.metric]} >= {shown}{budget}"


@cache
def tasks() -> dict[tuple[str, str], Task]:
    """(env id, algorithm) -> its entry, read once from the packaged tasks.yaml."""
    text = resources.files("surreal.conf").joinpath(TASKS_FILE).read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    out = {}
    for env, per_algo in data.items():
        for algo, entry in per_algo.items():
            claim = entry["claim"]
            out[(env, algo)] = Task(
                env=env,
                algo=algo,
                values=dict(entry["set"]),
                claim=Claim(
                    metric=claim["metric"],
                    at_least=float(claim["at_least"]),
                    results=tuple(claim["results"]),
                    unlike_results=dict(claim.get("unlike_results") or {}),
                ),
            )
            if claim["metric"] not in METRICS:
                raise ConfigError(f"{TASKS_FILE}: {env}/{algo}: metric must be one of {', '.join(METRICS)}")
    return out


def task_for(env_id: str, algo: str) -> Task | None:
    """The entry for this env and algorithm, or None (the package's defaults apply)."""
    return tasks().get((env_id, algo))
