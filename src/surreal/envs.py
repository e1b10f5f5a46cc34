"""Gymnasium environment construction, the same for actors, evaluation and benchmarks.

Vector envs use SAME_STEP autoreset: the observation returned on a done step is already the next
episode's first one and the real final observation is in ``infos["final_obs"]``, which is what a
time-limit bootstrap needs (docs/architecture.md: ``next_obs`` holds the final observation).

Ids starting `robosuite:` (`robosuite:Lift`) are robosuite tasks, built by the adapter in `envs_robosuite.py`
and stepped through the same vector env; robosuite itself is imported only then. Ids starting `ALE/` (`ALE/Pong-v5`)
are Atari games with the standard preprocessing (`envs_atari.py`); ale-py is imported only then. A Gymnasium MuJoCo
id with `env.kwargs.pixels=true` is the task seen through its camera, stacked renders (`envs_pixels.py`).

Training envs and evaluation envs: `training=` (default True) says which an env is for. It changes only what an env
does for training's sake and would distort a score: an Atari game's reward clipping and episodic life
(`envs_atari.py`); every other env is the same either way. Experience for learning (the actor's envs, a trial
update's) is `training=True`; an evaluation (`runtime.rollout.evaluate`: the learner's final one, the evaluator's,
`surreal eval`) is `training=False`; building an env only to read its spaces may pass either.

A `module:Name` id makes `gym.make` import `module` first, which runs its top-level code: that is how the user's own
envs register, and it must stay the user's choice. An id read from a file (a policy artifact, a checkpoint's or a run
folder's config.yaml, a sweep's plan) is admitted only when its module is already imported (`admit_env_id`); the user
imports one by naming it (`--import MODULE` on the command line, `imports=[...]` in Python: `import_modules`), or by
typing the id itself (`--env`, `env=` on `surreal run`). Everything downstream of that check (the roles a launcher
starts) imports as `gym.make` does.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import gymnasium as gym

from surreal import envs_atari, envs_masked, envs_pixels, envs_robosuite
from surreal.config import ConfigError, ExperimentConfig

envs_masked.register()  # InvertedPendulumNoVel-v5 and the other velocity-masked tasks, as Gymnasium ids

# Wraps env i of a vector env (`surreal eval --video` records with it): (env, i) -> the env to step.
EnvWrapper = Callable[[gym.Env, int], gym.Env]


def make_vec_env(
    env_id: str,
    num_envs: int,
    seed: int,
    env_kwargs: dict[str, Any] | None = None,
    wrap: EnvWrapper | None = None,
    *,
    training: bool = True,
) -> gym.vector.VectorEnv:
    """K environments stepped in this process (an actor's envs are small; one core per actor). Env i is
    seeded with seed + i, so actors given disjoint seed ranges never replay the same episodes. `wrap`: each env
    built as `make_env` builds it (gym.make, which is what gym.make_vec builds too), then wrapped. `training`: for
    learning (True) or for evaluation (module docstring)."""
    envs: gym.vector.VectorEnv
    if wrap is not None or is_adapter_id(env_id) or envs_pixels.wants_pixels(env_kwargs):

        def make(i: int) -> gym.Env:
            env = build_env(env_id, env_kwargs, training=training)
            return env if wrap is None else wrap(env, i)

        fns = [partial(make, i) for i in range(num_envs)]
        envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    else:
        envs = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
            **(env_kwargs or {}),
        )
    envs.reset(seed=[seed + i for i in range(num_envs)])  # type: ignore[arg-type]  # one seed per env is documented
    envs.action_space.seed(seed)
    return envs


def is_adapter_id(env_id: str) -> bool:
    """An id this package builds itself (robosuite, Atari) rather than `gym.make`."""
    return envs_robosuite.is_robosuite_id(env_id) or envs_atari.is_atari_id(env_id)


def build_env(env_id: str, env_kwargs: dict[str, Any] | None = None, *, training: bool = True) -> gym.Env:
    """One environment as `gym.make` builds it (a robosuite id, an Atari id: the adapter), not reset yet."""
    if envs_robosuite.is_robosuite_id(env_id):
        return envs_robosuite.RobosuiteEnv(env_id, **(env_kwargs or {}))
    if envs_atari.is_atari_id(env_id):
        return envs_atari.AtariEnv(env_id, training=training, **(env_kwargs or {}))
    if envs_pixels.wants_pixels(env_kwargs):
        return envs_pixels.PixelEnv(env_id, **(env_kwargs or {}))
    return gym.make(env_id, **(env_kwargs or {}))


def make_env(env_id: str, seed: int, env_kwargs: dict[str, Any] | None = None, *, training: bool = True) -> gym.Env:
    """One environment, reset with `seed`, for evaluation (`training=False`) and for reading the spaces."""
    env = build_env(env_id, env_kwargs, training=training)
    env.reset(seed=seed)
    return env


def env_spaces(cfg: ExperimentConfig) -> tuple[gym.Space, gym.Space]:
    """The experiment's env's observation and action spaces, read from one env made for the purpose."""
    probe = make_env(cfg.env.id, cfg.seed, cfg.env.kwargs)
    try:
        return probe.observation_space, probe.action_space
    finally:
        probe.close()


def env_module(env_id: str) -> str | None:
    """The module `gym.make(env_id)` would import first: a `module:Name` id's (a robosuite task's adapter is this
    package's own), else None."""
    if envs_robosuite.is_robosuite_id(env_id):
        return None
    module, sep, _ = env_id.rpartition(":")
    return module if sep else None


def admit_env_id(env_id: str, where: str) -> None:
    """ConfigError, one line saying how to allow it, unless making `env_id` imports nothing new: a registered id, or a
    `module:Name` whose module is already imported (named by the user: `import_modules`). `where` names the file the id
    came from."""
    module = env_module(env_id)
    if module is not None and module not in sys.modules:
        raise ConfigError(
            f"{where} names env {env_id!r}, which would import module {module!r} and run its code; pass "
            f"--import {module} (Python: imports=[{module!r}]) to allow it"
        )


def import_modules(modules: Iterable[str], flag: str = "--import") -> None:
    """Import the modules the user named (`--import MODULE`, `imports=[...]`), so the envs they register are
    registered and ids naming them are admitted; ConfigError, one line, for one that does not import."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - the user's module: whatever its import raises, one line
            raise ConfigError(f"{flag} {module}: cannot import it ({type(exc).__name__}: {exc})") from None


def modules_named(env_ids: Iterable[str | None]) -> list[str]:
    """The modules of the `module:Name` ids the user typed (`--env`, `env=`): naming the id names its module."""
    return [module for env_id in env_ids if env_id and (module := env_module(env_id)) is not None]


def env_ids_in(overrides: Iterable[str]) -> list[str]:
    """The env ids that config overrides set (`env=ID`, `env.id=ID`): typed by the user, so theirs to import."""
    ids = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.strip().lstrip("+~") in ("env", "env.id"):
            ids.append(value.strip().strip("'\""))
    return ids


def check_env_id(env_id: str, env_kwargs: dict[str, Any] | None = None) -> None:
    """Raise ConfigError, with the nearest registered ids, unless `env_id` is in Gymnasium's registry (after
    importing the module of a `module:Name` id, as `gym.make` would). Checked before any process starts,
    so a typo is one clear line instead of every role crash-looping. A robosuite id is checked against
    robosuite's tasks, and its `env_kwargs` against the task's parameters (Gymnasium ids' kwargs are not:
    `gym.make` accepts any). An Atari id is checked against ale-py's games and the preset's settings."""
    if envs_robosuite.is_robosuite_id(env_id):
        envs_robosuite.check(env_id, env_kwargs)
        return
    if envs_atari.is_atari_id(env_id):
        envs_atari.check(env_id, env_kwargs)
        return
    if envs_pixels.wants_pixels(env_kwargs):
        envs_pixels.check(env_id, env_kwargs)
        return
    module, sep, name = env_id.rpartition(":")
    if sep:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"env.id={env_id!r}: cannot import {module!r} ({exc})") from None
    registered = gym.envs.registry
    if (name if sep else env_id) in registered:
        return
    near = difflib.get_close_matches(name if sep else env_id, list(registered), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
    raise ConfigError(f"env.id={env_id!r} is not a registered Gymnasium environment{hint}")


def env_steps_bound(cfg: ExperimentConfig) -> int | None:
    """The most env steps one unit of this experiment's data may claim: the algorithm's
    `max_env_steps_per_unit`, given the env's episode limit (`episode_limit`)."""
    return cfg.algo.max_env_steps_per_unit(episode_limit(cfg.env.id, cfg.env.kwargs))


def episode_limit(env_id: str, env_kwargs: dict[str, Any] | None = None) -> int | None:
    """The most steps one episode takes: the registered time limit, a robosuite task's horizon, an Atari game's
    frame cap over its frame skip; None when the env has none."""
    if envs_robosuite.is_robosuite_id(env_id):
        return envs_robosuite.horizon(env_kwargs)
    if envs_atari.is_atari_id(env_id):
        return envs_atari.max_episode_steps(env_kwargs)
    if envs_pixels.wants_pixels(env_kwargs):
        return envs_pixels.max_episode_steps(env_id, env_kwargs)
    module, sep, name = env_id.rpartition(":")
    if sep:
        importlib.import_module(module)  # a `module:Name` id registers its envs on import, as gym.make does
    return gym.spec(name if sep else env_id).max_episode_steps
