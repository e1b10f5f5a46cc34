"""The typed experiment schema: one dataclass tree that Hydra merges YAML and overrides onto.

Typed so a typo'd key or a wrong type fails while the config is composed, before any process starts;
`validate` then checks the values and the cross-field rules, listing every problem at once. Torch-free:
the replay and ps roles read it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MIB = 1 << 20
REPLAY_MODES = ("fifo", "uniform", "prioritized")
ON_POLICY = {"ppo"}


class ConfigError(ValueError):
    """The experiment description cannot be run; the message names every offending key."""


@dataclass
class PPOConfig:
    """PPO hyperparameters; defaults are CleanRL's ppo_continuous_action (see conf/algo/ppo.yaml).

    `seed` is not set by users here: the loader copies the experiment's top-level seed into it so the
    algorithm sees one object with everything it needs."""

    name: str = "ppo"
    seed: int = 1
    lr: float = 3e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    batch_size: int = 2048
    minibatch_size: int = 64
    update_epochs: int = 10
    clip_coef: float = 0.2
    clip_vloss: bool = True
    norm_adv: bool = True
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    obs_norm: bool = True
    obs_clip: float = 10.0
    reward_scale: bool = True
    reward_clip: float = 10.0


@dataclass
class EnvConfig:
    id: str = "HalfCheetah-v5"
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class TopologyConfig:
    actors: int = 2
    envs_per_actor: int = 1
    replay_shards: int = 1
    ps_replicas: int = 1


@dataclass
class ActorConfig:
    chunk_steps: int = 256  # environment steps per experience chunk (T); a chunk holds T x envs_per_actor
    param_fetch_interval: int = 1  # chunks between "newer than v?" checks
    fetch_timeout_s: float = 5.0
    torch_threads: int = 1  # one core per actor: its batch of K observations is small
    # On-policy throttle: an actor produces at most rollout_ahead x its share of a learner batch with one
    # parameter version, then waits for the next. 1 is lock-step; 2 lets collection overlap the update
    # with at most one version of lag; 0 never waits (off-policy).
    rollout_ahead: int = 2


@dataclass
class ReplayConfig:
    mode: str = "fifo"
    capacity: int = 100_000  # transitions per shard
    alpha: float = 0.6
    beta: float = 0.4
    priority_eps: float = 1e-6
    max_message_bytes: int = 64 * MIB
    max_frames: int = 256


@dataclass
class LearnerConfig:
    prefetch: int = 2  # sample requests kept in flight per shard
    max_staleness: int = 4  # chunks from parameters more than this many versions old are dropped
    checkpoint_interval: int = 20  # updates
    keep_checkpoints: int = 3
    eval_episodes: int = 10
    torch_threads: int = 1  # CPU threads for a CPU learner: PPO's 64-sample minibatches gain nothing from more


@dataclass
class PSConfig:
    max_message_bytes: int = 64 * MIB


@dataclass
class ExperimentConfig:
    name: str | None = None  # run folder name; None: a timestamped name chosen by the launcher
    algo: PPOConfig = field(default_factory=PPOConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    seed: int = 1
    total_env_steps: int = 1_000_000
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    deterministic: bool = False  # 1 actor, 1 shard, lock-step versions, torch deterministic algorithms
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    ps: PSConfig = field(default_factory=PSConfig)


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """Check values and cross-field rules; raise one ConfigError listing every problem."""
    problems: list[str] = []

    def need(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    positive = {
        "total_env_steps": cfg.total_env_steps,
        "topology.actors": cfg.topology.actors,
        "topology.envs_per_actor": cfg.topology.envs_per_actor,
        "topology.replay_shards": cfg.topology.replay_shards,
        "topology.ps_replicas": cfg.topology.ps_replicas,
        "actor.chunk_steps": cfg.actor.chunk_steps,
        "actor.param_fetch_interval": cfg.actor.param_fetch_interval,
        "actor.torch_threads": cfg.actor.torch_threads,
        "replay.capacity": cfg.replay.capacity,
        "replay.max_message_bytes": cfg.replay.max_message_bytes,
        "replay.max_frames": cfg.replay.max_frames,
        "learner.prefetch": cfg.learner.prefetch,
        "learner.checkpoint_interval": cfg.learner.checkpoint_interval,
        "learner.keep_checkpoints": cfg.learner.keep_checkpoints,
        "learner.eval_episodes": cfg.learner.eval_episodes,
        "learner.torch_threads": cfg.learner.torch_threads,
        "ps.max_message_bytes": cfg.ps.max_message_bytes,
        "algo.batch_size": cfg.algo.batch_size,
        "algo.minibatch_size": cfg.algo.minibatch_size,
        "algo.update_epochs": cfg.algo.update_epochs,
    }
    for key, value in positive.items():
        need(value > 0, f"{key} must be > 0 (got {value})")
    need(cfg.actor.fetch_timeout_s > 0, f"actor.fetch_timeout_s must be > 0 (got {cfg.actor.fetch_timeout_s})")
    need(cfg.actor.rollout_ahead >= 0, f"actor.rollout_ahead must be >= 0 (got {cfg.actor.rollout_ahead})")
    need(cfg.learner.max_staleness >= 0, f"learner.max_staleness must be >= 0 (got {cfg.learner.max_staleness})")
    need(bool(cfg.env.id.strip()), "env.id must name a Gymnasium environment")
    need(re.fullmatch(r"auto|cpu|cuda(:\d+)?", cfg.device) is not None,
         f"device must be auto, cpu, cuda or cuda:N (got {cfg.device!r})")
    need(cfg.replay.mode in REPLAY_MODES,
         f"replay.mode must be one of {', '.join(REPLAY_MODES)} (got {cfg.replay.mode!r})")
    need(0 <= cfg.replay.alpha <= 1, f"replay.alpha must be in [0, 1] (got {cfg.replay.alpha})")
    need(0 <= cfg.replay.beta <= 1, f"replay.beta must be in [0, 1] (got {cfg.replay.beta})")
    need(cfg.replay.priority_eps > 0, f"replay.priority_eps must be > 0 (got {cfg.replay.priority_eps})")

    algo = cfg.algo
    need(0 < algo.gamma <= 1, f"algo.gamma must be in (0, 1] (got {algo.gamma})")
    need(0 <= algo.gae_lambda <= 1, f"algo.gae_lambda must be in [0, 1] (got {algo.gae_lambda})")
    need(algo.lr > 0, f"algo.lr must be > 0 (got {algo.lr})")
    need(algo.clip_coef > 0, f"algo.clip_coef must be > 0 (got {algo.clip_coef})")
    need(algo.max_grad_norm > 0, f"algo.max_grad_norm must be > 0 (got {algo.max_grad_norm})")
    need(algo.ent_coef >= 0 and algo.vf_coef >= 0, "algo.ent_coef and algo.vf_coef must be >= 0")
    need(algo.obs_clip > 0 and algo.reward_clip > 0, "algo.obs_clip and algo.reward_clip must be > 0")
    need(bool(algo.hidden_sizes) and all(h > 0 for h in algo.hidden_sizes),
         f"algo.hidden_sizes must be a non-empty list of positive sizes (got {algo.hidden_sizes})")
    need(algo.minibatch_size <= algo.batch_size,
         f"algo.minibatch_size ({algo.minibatch_size}) must be <= algo.batch_size ({algo.batch_size})")
    if algo.name in ON_POLICY:
        need(cfg.replay.mode == "fifo", f"{algo.name} is on-policy: replay.mode must be fifo (got {cfg.replay.mode!r})")
        need(cfg.replay.capacity >= algo.batch_size,
             f"replay.capacity ({cfg.replay.capacity}) must hold one batch (algo.batch_size={algo.batch_size})")
    if cfg.deterministic:
        chunk = cfg.actor.chunk_steps * cfg.topology.envs_per_actor
        need(cfg.topology.actors == 1, "deterministic=true needs topology.actors=1")
        need(cfg.topology.replay_shards == 1, "deterministic=true needs topology.replay_shards=1")
        need(chunk > 0 and algo.batch_size % chunk == 0,
             f"deterministic=true needs algo.batch_size ({algo.batch_size}) to be a multiple of "
             f"actor.chunk_steps x topology.envs_per_actor ({chunk})")
    if problems:
        raise ConfigError("invalid experiment config:\n  - " + "\n  - ".join(problems))
    return cfg
