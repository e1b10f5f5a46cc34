"""What is checked before any role of a run starts: an experiment that cannot work is refused in one line, and a
budget that a default eats is said in one line, before a process, a port or a run folder exists.

    cfg = load_config(overrides)        # keys, types, values (surreal.config)
    warnings = preflight(cfg)           # ConfigError: refused; else the warnings to print
    cfg, warnings = checked(cfg)        # the same, and the config the roles run: its replay layout resolved

The env is built once, here, as every role would build it (`probe_env`), and the refusals import no torch, so a
refusal costs an interpreter, Hydra and the env's own import. Only then is the algorithm's module (torch) imported, for
the replay's layout (`with_replay_layout`: the shards, which have neither torch nor gymnasium, are laid out by the
experiment and not by whichever peer's chunk comes first, or, a FIFO, hold every chunk to it) and the chunk's size
(`check_chunk_size`, a chunk of frames priced at the most it can hold): a layout or a chunk no shard could hold is
refused here rather than by every shard. Image observations with central inference are refused too (not served yet).
"""

from __future__ import annotations

import difflib
import inspect
import math
import re
from dataclasses import replace
from typing import Any

import gymnasium as gym

from surreal.config import ConfigError, ExperimentConfig, algo_config
from surreal.config.schema import LearnerConfig, OffPolicyConfig
from surreal.envs import check_env_id, episode_limit, is_adapter_id, make_env
from surreal.envs_pixels import wants_pixels
from surreal.proto.frame_fields import served_fields
from surreal.proto.wire import PER_ENV, SAMPLE_ARRAYS, Fields, is_per_chunk, layout_of
from surreal.replay.buffers import REPLY_HEADER_RESERVE
from surreal.replay.frame_storage import has_frames, stored_nbytes
from surreal.spaces import check_spaces, describe, is_image

UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '([^']+)'")
MAKE_KWARGS = ("max_episode_steps", "disable_env_checker", "render_mode")  # what gym.make itself takes
MAX_DETAIL = 300  # characters of an exception's text a refusal quotes


def preflight(cfg: ExperimentConfig) -> list[str]:
    """Refuse (ConfigError) what cannot run; return one line per budget warning."""
    return _refusals(cfg)[2]


def checked(cfg: ExperimentConfig) -> tuple[ExperimentConfig, list[str]]:
    """`preflight`, and the config the roles run: `cfg` with its replay layout resolved (`with_replay_layout`), once
    its chunks are known to fit a replay message (`check_chunk_size`)."""
    observation_space, action_space, warnings = _refusals(cfg)
    check_chunk_size(cfg, observation_space, action_space)
    check_sample_size(cfg, observation_space, action_space)
    return with_replay_layout(cfg, observation_space, action_space), warnings


def chunk_nbytes(cfg: ExperimentConfig, fields: Fields) -> int | None:
    """The most bytes the arrays of one chunk an actor sends can take: `actor.chunk_steps` x `topology.envs_per_actor`
    cells of the algorithm's `chunk_fields`, one `PER_ENV` entry per env, and a `PER_CHUNK` array (a chunk's frames)
    as long as every index into it could make it: each step's stacks whole, none shared (what `frames.split` stores
    when every step ends an episode; a game's chunks hold about one frame a step). None for an algorithm whose chunks
    are not rollouts (neither `obs` nor frames: ES ships returns and noise offsets)."""
    if "obs" not in fields and not any(is_per_chunk(name) for name in fields):
        return None
    cells = cfg.actor.chunk_steps * cfg.topology.envs_per_actor
    rows = {name: 0 for name in fields if is_per_chunk(name)}
    for f in fields.values():
        if f.index_of is not None:
            rows[f.index_of] += cells * math.prod(f.shape)
    size = 0
    for name, f in fields.items():
        count = (
            rows[name]
            if is_per_chunk(name)
            else cfg.topology.envs_per_actor
            if name.startswith(f"{PER_ENV}/")
            else cells
        )
        size += count * f.dtype.itemsize * math.prod(f.shape)
    return size


def check_chunk_size(cfg: ExperimentConfig, observation_space: Any, action_space: Any) -> None:
    """ConfigError, one line, when one chunk of this experiment cannot fit `replay.max_message_bytes`: a shard would
    count every chunk as oversized and drop it, and the run would never learn. Images are where this bites (a chunk
    of 1,024 Atari steps can be 58 MB even as each frame once). Imports the algorithm's module (its `chunk_fields`)."""
    from surreal.algos import get_algorithm

    fields = get_algorithm(cfg.algo.name).chunk_fields(observation_space, action_space, algo_config(cfg))
    size = chunk_nbytes(cfg, fields)
    limit = cfg.replay.max_message_bytes
    if size is None or size <= limit:
        return
    obs = fields.get("obs")
    sent = (
        "as each frame once, at most every step's stacks whole"
        if obs is None
        else f"as {obs.dtype} {obs.shape}, twice a step"
    )
    raise ConfigError(
        f"one chunk of actor.chunk_steps={cfg.actor.chunk_steps} x topology.envs_per_actor="
        f"{cfg.topology.envs_per_actor} steps of {cfg.env.id} (observations {describe(observation_space)}, sent "
        f"{sent}) can be {size:,} bytes, more than replay.max_message_bytes={limit:,}; "
        "lower actor.chunk_steps or topology.envs_per_actor, or raise replay.max_message_bytes"
    )


def check_sample_size(cfg: ExperimentConfig, observation_space: Any, action_space: Any) -> None:
    """ConfigError, one line, when one sample a learner asks a transition replay for (`algo.batch_size` x
    `learner.minibatches_per_sample` transitions, its stacks whole) cannot fit `replay.max_message_bytes`: the shard
    would refuse every request. Images are where this bites (SAC's 256 x 4 transitions of two 9 x 84 x 84 stacks are
    130 MB)."""
    from surreal.algos import get_algorithm

    if cfg.replay.mode == "fifo" or not isinstance(cfg.algo, OffPolicyConfig):
        return
    fields = served_fields(get_algorithm(cfg.algo.name).chunk_fields(observation_space, action_space, algo_config(cfg)))
    per_transition = sum(f.dtype.itemsize * math.prod(f.shape) for f in fields.values())
    per_transition += sum(dtype.itemsize for dtype in SAMPLE_ARRAYS.values())
    transitions = cfg.algo.batch_size // cfg.learner.replicas * cfg.learner.minibatches_per_sample
    limit = cfg.replay.max_message_bytes - REPLY_HEADER_RESERVE
    if transitions * per_transition > limit:
        raise ConfigError(
            f"one sample of algo.batch_size={cfg.algo.batch_size} x learner.minibatches_per_sample="
            f"{cfg.learner.minibatches_per_sample} transitions of {cfg.env.id} ({per_transition:,} bytes each, stacks "
            f"whole) is {transitions * per_transition:,} bytes, more than replay.max_message_bytes="
            f"{cfg.replay.max_message_bytes:,}; lower either or raise replay.max_message_bytes"
        )


def _refusals(cfg: ExperimentConfig) -> tuple[gym.Space[Any], gym.Space[Any], list[str]]:
    check_env_id(cfg.env.id, cfg.env.kwargs)
    observation_space, action_space, max_episode_steps = probe_env(cfg)
    check_spaces(cfg.algo, observation_space, action_space, cfg.env.id)
    if cfg.topology.inference == "central" and is_image(observation_space):
        raise ConfigError(
            f"topology.inference=central does not serve image observations yet ({cfg.env.id}'s are "
            f"{describe(observation_space)}); use topology.inference=per_actor"
        )
    return observation_space, action_space, budget_warnings(cfg, max_episode_steps)


def with_replay_layout(cfg: ExperimentConfig, observation_space: Any, action_space: Any) -> ExperimentConfig:
    """`cfg` with `replay.layout` resolved (the algorithm's `chunk_fields` over these spaces; imports the algorithm's
    module): a transition replay is laid out by it, a FIFO holds every chunk to it. ConfigError, one line, when a
    transition shard could not hold or serve that layout."""
    from surreal.algos import get_algorithm

    fields = get_algorithm(cfg.algo.name).chunk_fields(observation_space, action_space, algo_config(cfg))
    if cfg.replay.mode == "fifo":  # whole chunks, nothing preallocated: the layout only checks them
        return replace(cfg, replay=replace(cfg.replay, layout=layout_of(fields)))
    return with_layout(cfg, fields)


def with_layout(cfg: ExperimentConfig, fields: Fields) -> ExperimentConfig:
    """`cfg` with `fields` as its transition replay's `replay.layout`, checked against the shard's capacity in bytes
    and its replies' frame limit as a shard would lay it out (replay/buffers.py): ConfigError, one line, if not."""
    if len(fields) + len(SAMPLE_ARRAYS) > cfg.replay.max_frames:
        raise ConfigError(
            f"{cfg.algo.name}'s {len(fields)} transition fields and a reply's {len(SAMPLE_ARRAYS)} index arrays "
            f"exceed replay.max_frames={cfg.replay.max_frames}"
        )
    if has_frames(fields) and cfg.replay.mode == "prioritized":
        raise ConfigError(
            f"replay.mode=prioritized does not store frames ({cfg.env.id}'s images are stored each frame once, sampled "
            "uniformly); use replay.mode=uniform"
        )
    stored = stored_nbytes(fields, cfg.replay.capacity)  # a chunk of frames: each frame once (replay/frame_storage.py)
    if stored > cfg.replay.capacity_bytes:
        per_transition = math.ceil(stored / cfg.replay.capacity)
        raise ConfigError(
            f"replay.capacity={cfg.replay.capacity:,} transitions of {per_transition:,} bytes ({cfg.algo.name} on "
            f"{cfg.env.id}) exceed replay.capacity_bytes={cfg.replay.capacity_bytes:,}; lower the capacity or raise "
            "the bytes"
        )
    return replace(cfg, replay=replace(cfg.replay, layout=layout_of(fields)))


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
        if is_adapter_id(env_id) or wants_pixels(kwargs):
            limit: int | None = episode_limit(env_id, kwargs)
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
    interval = cfg.learner.eval_interval
    if interval != LearnerConfig.eval_interval and interval > budget:  # the default in a short run: no evaluator
        out.append(
            f"learner.eval_interval={interval:,} is above steps={budget:,}: the evaluator never evaluates, "
            "only the final evaluation runs"
        )
    return out + cfg.algo.budget_warnings(budget, max_episode_steps)  # the regime's warm-up or first batch
