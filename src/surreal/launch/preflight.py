"""What is checked before any role of a run starts: an experiment that cannot work is refused in one line, and a
budget that a default eats is said in one line, before a process, a port or a run folder exists.

    cfg = load_config(overrides)        # keys, types, values (surreal.config)
    warnings = preflight(cfg)           # ConfigError: refused; else the warnings to print

Refused (ConfigError, one line): an env id that is not registered (`check_env_id`), an env that does not build with
its `env.kwargs` (a keyword its constructor does not take, a missing dependency such as Box2D, anything its
constructor or first reset raises), and spaces the algorithm does not take (its config's `observation_spaces` /
`action_spaces`, surreal/spaces.py). The env is built once, here, as every role would build it; torch is never
imported, so a refusal costs an interpreter, Hydra and the env's own import (under a second for MuJoCo; robosuite's
import and scene take a few).

Warned (`budget_warnings`): an off-policy warm-up (`algo.learning_starts`) that leaves at most half the budget to
learn from, an evaluator interval set above the budget (not the default's: a short run simply has no evaluator),
and an on-policy batch that can take more env steps than the whole budget. `surreal run` prints them; a Python
caller gets them as strings.
"""

from __future__ import annotations

import difflib
import inspect
import re
from typing import Any

import gymnasium as gym

from surreal import envs_robosuite
from surreal.config import ConfigError, ExperimentConfig
from surreal.config.schema import LearnerConfig, OffPolicyConfig
from surreal.envs import check_env_id, make_env
from surreal.spaces import check_spaces

UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '([^']+)'")
MAKE_KWARGS = ("max_episode_steps", "disable_env_checker", "render_mode")  # what gym.make itself takes
MAX_DETAIL = 300  # characters of an exception's text a refusal quotes


def preflight(cfg: ExperimentConfig) -> list[str]:
    """Refuse (ConfigError) what cannot run; return one line per budget warning."""
    check_env_id(cfg.env.id, cfg.env.kwargs)
    observation_space, action_space, max_episode_steps = probe_env(cfg)
    check_spaces(cfg.algo, observation_space, action_space, cfg.env.id)
    return budget_warnings(cfg, max_episode_steps)


def probe_env(cfg: ExperimentConfig) -> tuple[gym.Space[Any], gym.Space[Any], int | None]:
    """Build the env once with its kwargs (and reset it): its spaces and episode limit, or a one-line ConfigError."""
    env_id, kwargs = cfg.env.id, cfg.env.kwargs
    try:
        env = make_env(env_id, cfg.seed, kwargs)
    except ConfigError:
        raise
    except TypeError as exc:
        unexpected = UNEXPECTED_KEYWORD.search(str(exc))
        if unexpected is None or unexpected.group(1) not in (kwargs or {}):
            raise ConfigError(f"env.id={env_id!r} does not build: {_detail(exc)}") from None
        key = unexpected.group(1)
        near = difflib.get_close_matches(key, _accepted_kwargs(env_id), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        raise ConfigError(f"env.kwargs.{key} is not a parameter of {env_id}{hint}") from None
    except Exception as exc:  # anything the env's constructor or first reset raises: a missing dependency, a bad value
        raise ConfigError(f"env.id={env_id!r} does not build with env.kwargs={kwargs or {}}: {_detail(exc)}") from None
    try:
        if envs_robosuite.is_robosuite_id(env_id):
            limit: int | None = envs_robosuite.horizon(kwargs)
        else:
            limit = env.spec.max_episode_steps if env.spec is not None else None
        return env.observation_space, env.action_space, limit
    finally:
        env.close()


def _detail(exc: Exception) -> str:
    """An exception as one short line: its type, and its text's lines joined."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    text = text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _accepted_kwargs(env_id: str) -> list[str]:
    """The keywords a Gymnasium id's constructor takes (for a suggestion), plus gym.make's own."""
    try:
        entry = gym.spec(env_id.rpartition(":")[2]).entry_point
        creator = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
        assert creator is not None
        names = [p for p in inspect.signature(creator).parameters if p not in ("self", "args", "kwargs")]
    except Exception:  # a suggestion only: an entry point we cannot inspect gets none
        names = []
    return [*names, *MAKE_KWARGS]


def budget_warnings(cfg: ExperimentConfig, max_episode_steps: int | None) -> list[str]:
    """One line per budget a default (or a setting) eats: each says what, how much, and what to set instead."""
    out = []
    budget = cfg.total_env_steps
    algo = cfg.algo
    if isinstance(algo, OffPolicyConfig) and algo.learning_starts * 2 >= budget:
        left = max(0, budget - algo.learning_starts)
        out.append(
            f"algo.learning_starts={algo.learning_starts:,} (env steps of random actions before the first update) "
            f"leaves {left:,} of steps={budget:,} to learn from; set algo.learning_starts lower or steps higher"
        )
    interval = cfg.learner.eval_interval
    if interval != LearnerConfig.eval_interval and interval > budget:  # the default in a short run: no evaluator
        out.append(
            f"learner.eval_interval={interval:,} is above steps={budget:,}: the evaluator never evaluates, "
            "only the final evaluation runs"
        )
    if algo.on_policy:
        per_unit = algo.max_env_steps_per_unit(max_episode_steps)
        if per_unit is not None and algo.batch_size * per_unit > budget:
            steps = algo.batch_size * per_unit
            amount = f"{steps:,} env steps" if per_unit == 1 else f"up to {steps:,} env steps"
            out.append(
                f"one update of algo.batch_size={algo.batch_size:,} takes {amount}, more than steps={budget:,}: "
                "the run may end after a single update; lower algo.batch_size or raise steps"
            )
    return out
