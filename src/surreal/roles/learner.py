"""`surreal role learner`: the single centralized learner.

    replay shards ──sample replies (prefetched)──► batch ──update──► params (PUB) ──► ps
                                                                └──► checkpoints, metrics.jsonl

Sample requests stay `prefetch` deep per shard, so replies queue in the socket while an update runs and
the next batch is already there when it ends. Parameters (with the observation-normalizer statistics
inside) are published after every update; a checkpoint is written every `checkpoint_interval` updates
and at the end, and `--resume` continues from the latest one with the same counters. When
`total_env_steps` is reached it evaluates the deterministic policy, writes eval.json, publishes a final
blob marked `done` (actors stop on it) and exits 0, or with SURREAL_HOLD_WHEN_DONE stays up re-sending that
blob until stopped. A learner resumed after it finished does not evaluate again: it announces `done`.

On-policy algorithms (PPO, ES) learn from whole chunks, `batch_size` units per update. Off-policy ones
(DDPG) learn from sampled transition batches, one gradient step each, at `replay_ratio` steps per env step
(the env steps come from the shards' replies), send priorities back to the owning shard, publish every
`publish_interval` steps and write a metrics row every 250 (docs/architecture.md, "Flow control").
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
import uuid
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zmq

from surreal.algos import get_algorithm
from surreal.config import ExperimentConfig, algo_config
from surreal.config.schema import DDPGConfig
from surreal.envs import make_env
from surreal.metrics import RoleMetrics
from surreal.proto.channels import ParamPublisher, SampleClient
from surreal.proto.codec import Limits
from surreal.roles.common import StopFlag, hold_until_stopped, load_config, setup_logging
from surreal.runtime.checkpoint import CheckpointStore
from surreal.runtime.rollout import Chunk, evaluate
from surreal.settings import Settings

RECENT_EPISODES = 20
OFF_POLICY_ROW_UPDATES = 250  # off-policy: gradient steps per metrics row (and per checkpoint_interval unit)
IDLE_POLL_S = 0.005  # off-policy learner ahead of its replay ratio: pause between replies instead of spinning
DONE_LINGER_S = 1.0  # keep answering late-subscribing ps replicas with the final blob this long


@dataclass
class Counters:
    """What a resumed learner must continue from (all checkpointed)."""

    env_steps: int = 0
    updates: int = 0
    version: int = 0
    episodes: int = 0
    stale_dropped: int = 0
    recent_returns: list[float] = field(default_factory=list)
    shard_env_steps: list[int] = field(default_factory=list)  # off-policy: each replay shard's count seen last


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


def chunks_from_reply(arrays: dict[str, Any], meta: dict[str, Any]) -> list[Chunk]:
    """A FIFO sample reply holds chunks under "0", "1", ... with their metadata in meta["chunks"]."""
    metas = meta.get("chunks", [])
    chunks = []
    for i, chunk_meta in enumerate(metas):
        chunks.append(
            Chunk(
                arrays=arrays[str(i)],
                version=int(chunk_meta.get("version", 0)),
                actor=int(chunk_meta.get("actor", 0)),
                episode_returns=[float(r) for r in chunk_meta.get("episode_returns", [])],
                episode_lengths=[int(n) for n in chunk_meta.get("episode_lengths", [])],
                steps=int(chunk_meta["env_steps"]) if "env_steps" in chunk_meta else None,
            )
        )
    return chunks


class Learner:
    """The learner's loop, separate from process setup so tests can drive it in-process."""

    def __init__(self, cfg: ExperimentConfig, settings: Settings, resume: bool, log: logging.Logger) -> None:
        self.cfg = cfg
        self.log = log
        self.run_dir = settings.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        seed_everything(cfg.seed, cfg.deterministic)
        self.device = resolve_device(cfg.device)
        torch.set_num_threads(cfg.learner.torch_threads)
        probe = make_env(cfg.env.id, cfg.seed, cfg.env.kwargs)
        self.obs_space, self.act_space = probe.observation_space, probe.action_space
        probe.close()
        self.algo = get_algorithm(cfg.algo.name)
        self.learner = self.algo.make_learner(self.obs_space, self.act_space, algo_config(cfg), self.device)
        self.checkpoints = CheckpointStore(self.run_dir / "checkpoints", cfg.learner.keep_checkpoints)
        self.counters = Counters()
        if resume:
            self._restore()
        self.incarnation = uuid.uuid4().hex[:12]

        self.ctx = zmq.Context()
        limits = Limits(max_frames=cfg.replay.max_frames, max_bytes=cfg.replay.max_message_bytes)
        self.publisher = ParamPublisher(self.ctx, settings.bind(settings.params_pub_port))
        self.sampler = SampleClient(self.ctx, [r.sample for r in settings.replay], limits, cfg.learner.prefetch)
        self.queue: deque[Chunk] = deque()
        self.queued_transitions = 0
        self.version_lags: list[int] = []

        self.metrics = RoleMetrics("learner", 0)
        m = self.metrics
        self.m_env_steps = m.gauge("learner_env_steps", "environment steps consumed")
        self.m_updates = m.gauge("learner_updates", "updates done")
        self.m_version = m.gauge("learner_param_version", "latest published parameter version")
        self.m_stale = m.gauge("learner_stale_dropped", "chunks dropped for exceeding max_staleness")
        self.m_queue = m.gauge("learner_queued_transitions", "transitions received, waiting for an update")
        self.m_return = m.gauge("learner_train_return_mean", "mean return of recent training episodes")
        self.m_loss = m.gauge("learner_stat", "last update's statistics", ["name"])
        self.m_update_s = m.gauge("learner_update_seconds", "wall time of the last update")
        # A resumed learner reports where it is from the start (the chart's `helm test` reads these).
        self.m_env_steps.set(self.counters.env_steps)
        self.m_updates.set(self.counters.updates)
        self.m_stale.set(self.counters.stale_dropped)
        self.metrics_file = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self.tensorboard = self._tensorboard()

    def _tensorboard(self):
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(self.run_dir / "tensorboard"))

    # -- state ---------------------------------------------------------------------------------------

    def _restore(self) -> None:
        state = self.checkpoints.load_latest()
        if state is None:
            self.log.info("--resume: no checkpoint yet, starting fresh")
            return
        self.learner.load_state_dict(state["learner"])
        self.counters = Counters(**state["counters"])
        self.log.info(
            "resumed at update %d, %d env steps, version %d",
            self.counters.updates,
            self.counters.env_steps,
            self.counters.version,
        )
        # Drop metrics rows written after this checkpoint: the run continues from here.
        self._truncate_metrics(self.counters.updates)

    def _truncate_metrics(self, updates: int) -> None:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line)["updates"] <= updates:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
        path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")

    def checkpoint(self) -> None:
        # The algorithm's state carries its own torch RNG; the learner draws no other random numbers.
        state = {"learner": self.learner.state_dict(), "counters": asdict(self.counters)}
        self.checkpoints.save(self.counters.updates, state)

    # -- the loop ------------------------------------------------------------------------------------

    def publish(self, done: bool = False) -> None:
        meta: dict[str, Any] = {"incarnation": self.incarnation, "done": done, "env_steps": self.counters.env_steps}
        budget = self.step_budget()
        if budget is not None:
            meta["env_step_budget"] = budget
        self.publisher.publish(self.counters.version, meta, self.learner.params())
        self.m_version.set(self.counters.version)

    def receive(self, timeout_s: float) -> None:
        """Take one sample reply (if any arrives in time) into the queue."""
        got = self.sampler.next_batch(self.cfg.algo.batch_size, timeout_s)
        if got is None:
            return
        _shard, message = got
        for chunk in chunks_from_reply(message.arrays, message.meta):
            self.queue.append(chunk)
            self.queued_transitions += chunk.size
            self.counters.env_steps += chunk.env_steps
            self._episodes(chunk.episode_returns)
        self.m_queue.set(self.queued_transitions)

    def _episodes(self, returns: list[float]) -> None:
        self.counters.episodes += len(returns)
        self.counters.recent_returns = (self.counters.recent_returns + returns)[-RECENT_EPISODES:]

    def take_batch(self) -> list[Chunk]:
        """Whole chunks, oldest first, until `batch_size` units; the rest waits for the next update."""
        batch, total = [], 0
        while self.queue and total < self.cfg.algo.batch_size:
            chunk = self.queue.popleft()
            batch.append(chunk)
            total += chunk.size
        self.queued_transitions -= total
        return batch

    def update(self, batch: list[Chunk]) -> None:
        c = self.counters
        lags = [max(0, c.version - chunk.version) for chunk in batch]
        kept, dropped = self.algo.filter_stale(batch, c.version, self.cfg.learner.max_staleness)
        c.stale_dropped += dropped
        if not kept:
            return
        started = time.perf_counter()
        # Learning-rate annealing counts the steps used before this batch, as CleanRL does.
        used_before = c.env_steps - sum(chunk.env_steps for chunk in (*self.queue, *batch))
        progress = min(1.0, used_before / self.cfg.total_env_steps)
        stats = self.learner.update(kept, progress)
        c.updates += 1
        c.version += 1
        self.publish()
        self._record(stats, float(np.mean(lags)), time.perf_counter() - started)
        if c.updates % self.cfg.learner.checkpoint_interval == 0:
            self.checkpoint()

    def _record(self, stats: dict[str, float], lag_mean: float | None, update_s: float) -> None:
        c = self.counters
        row = {
            "env_steps": c.env_steps,
            "updates": c.updates,
            "version": c.version,
            "episodes": c.episodes,
            "train_return_mean": float(np.mean(c.recent_returns)) if c.recent_returns else None,
            "stale_dropped": c.stale_dropped,
            **({} if lag_mean is None else {"version_lag_mean": lag_mean}),
            **{k: float(v) for k, v in stats.items()},
        }
        self.metrics_file.write(json.dumps(row) + "\n")
        self.metrics_file.flush()
        self.m_env_steps.set(c.env_steps)
        self.m_updates.set(c.updates)
        self.m_stale.set(c.stale_dropped)
        self.m_update_s.set(update_s)
        if row["train_return_mean"] is not None:
            self.m_return.set(row["train_return_mean"])
            self.tensorboard.add_scalar("train/return_mean", row["train_return_mean"], c.env_steps)
        for name, value in stats.items():
            self.m_loss.labels(name=name).set(float(value))
            self.tensorboard.add_scalar(f"learner/{name}", float(value), c.env_steps)
        if lag_mean is not None:
            self.tensorboard.add_scalar("learner/version_lag_mean", lag_mean, c.env_steps)

    # -- off-policy: sampled transitions ------------------------------------------------------------

    def updates_allowed(self) -> int:
        """Gradient steps the replay ratio allows at the env steps received so far (0 until learning_starts)."""
        algo = self.cfg.algo
        assert isinstance(algo, DDPGConfig), "only off-policy algorithms have a replay ratio"
        past_start = self.counters.env_steps - algo.learning_starts
        return int(past_start * algo.replay_ratio) if past_start >= 0 else 0

    def step_budget(self) -> int | None:
        """Off-policy flow control: env steps the actors together may have taken by now, `rollout_ahead`
        messages per actor past what the replay ratio needs (docs/architecture.md). None: unthrottled."""
        algo, ahead = self.cfg.algo, self.cfg.actor.rollout_ahead
        if not isinstance(algo, DDPGConfig) or ahead == 0:
            return None
        slack = ahead * self.cfg.topology.actors * algo.chunk_size(self.cfg)
        return int(algo.learning_starts + self.counters.updates / algo.replay_ratio + slack)

    def note_progress(self, shard: int, meta: dict[str, Any]) -> None:
        """A sample reply's env-step count and finished episodes (off-policy learners see no chunks)."""
        counts = self.counters.shard_env_steps
        counts.extend([0] * (shard + 1 - len(counts)))
        seen = meta.get("env_steps", 0)
        seen = seen if isinstance(seen, int) and seen >= 0 else counts[shard]
        self.counters.env_steps += seen - counts[shard] if seen >= counts[shard] else seen  # a restarted shard
        counts[shard] = seen
        returns = meta.get("episode_returns", [])
        self._episodes([float(r) for r in returns] if isinstance(returns, list) else [])

    def learn_from_sample(self, shard: int, arrays: dict[str, Any], interval: list[dict[str, float]]) -> None:
        c = self.counters
        started = time.perf_counter()
        stats, priorities = self.learner.update(arrays)
        c.updates += 1
        if self.cfg.replay.mode == "prioritized":
            update = {
                "slots": np.asarray(arrays["slots"]),
                "ids": np.asarray(arrays["ids"]),
                "priorities": priorities.astype(np.float64),
            }
            self.sampler.update_priorities(shard, update)
        interval.append(stats)
        assert isinstance(self.cfg.algo, DDPGConfig)
        if c.updates % self.cfg.algo.publish_interval == 0:
            c.version += 1
            self.publish()
        if c.updates % OFF_POLICY_ROW_UPDATES == 0:
            means = {k: float(np.mean([row[k] for row in interval])) for k in interval[0]}
            interval.clear()
            self._record(means, None, time.perf_counter() - started)
            if (c.updates // OFF_POLICY_ROW_UPDATES) % self.cfg.learner.checkpoint_interval == 0:
                self.checkpoint()

    def _run_off_policy(self, stop: StopFlag) -> None:
        """Sample, update at the replay ratio, send priorities home, publish every `publish_interval`."""
        samples: deque[tuple[int, dict[str, Any]]] = deque()
        keep = self.cfg.learner.prefetch * len(self.sampler.shards)
        interval: list[dict[str, float]] = []
        while not stop and self.counters.env_steps < self.cfg.total_env_steps:
            self.publisher.service()
            if samples and self.counters.updates < self.updates_allowed():
                self.learn_from_sample(*samples.popleft(), interval)
                continue
            got = self.sampler.next_batch(self.cfg.algo.batch_size, timeout_s=0.05)
            if got is None:
                continue
            shard, message = got
            self.note_progress(shard, message.meta)
            samples.append((shard, message.arrays))
            while len(samples) > keep:
                samples.popleft()  # a newer sample of the same buffer replaces it
            if self.counters.updates >= self.updates_allowed():
                time.sleep(IDLE_POLL_S)

    def _run_on_policy(self, stop: StopFlag) -> None:
        while not stop and self.counters.env_steps < self.cfg.total_env_steps:
            self.publisher.service()
            self.receive(timeout_s=0.05)
            if self.queued_transitions >= self.cfg.algo.batch_size:
                self.update(self.take_batch())

    def run(self, stop: StopFlag) -> bool:
        """Train until `total_env_steps` (True) or a stop signal (False)."""
        if self.counters.env_steps >= self.cfg.total_env_steps and (self.run_dir / "eval.json").exists():
            self.log.info("already finished at %d env steps (eval.json): not evaluating again", self.counters.env_steps)
            self.announce_done()
            return True
        self.publish()
        if type(self.cfg.algo).on_policy:
            self._run_on_policy(stop)
        else:
            self._run_off_policy(stop)
        if stop:
            self.checkpoint()
            return False
        self.checkpoint()
        self.finish()
        return True

    def finish(self) -> None:
        """Evaluate the deterministic policy, write eval.json, tell actors training is over."""
        policy = self.algo.make_policy(self.obs_space, self.act_space, algo_config(self.cfg), 0, 1)
        policy.load_params(self.learner.params())
        returns = evaluate(
            self.cfg.env.id, policy, self.cfg.learner.eval_episodes, self.cfg.seed + 1_000_003, self.cfg.env.kwargs
        )
        result = {
            "eval_return_mean": float(np.mean(returns)),
            "eval_return_std": float(np.std(returns)),
            "eval_episodes": len(returns),
            "env_steps": self.counters.env_steps,
            "eval_returns": [float(r) for r in returns],
        }
        (self.run_dir / "eval.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
        self.tensorboard.add_scalar("eval/return_mean", result["eval_return_mean"], self.counters.env_steps)
        self.log.info(
            "eval over %d episodes: %.1f +- %.1f", len(returns), result["eval_return_mean"], result["eval_return_std"]
        )
        self.announce_done()

    def announce_done(self) -> None:
        """Publish the final blob marked `done` and keep answering late ps subscriptions for a moment. It gets a
        version of its own: a ps replaces its blob only for a newer version, and an actor asks for one newer
        than it runs, so under the last update's version `done` would reach no actor that already has it."""
        self.counters.version += 1
        self.publish(done=True)
        deadline = time.monotonic() + DONE_LINGER_S
        while time.monotonic() < deadline:
            self.publisher.service()
            time.sleep(0.05)

    def close(self) -> None:
        self.metrics_file.close()
        self.tensorboard.close()
        self.publisher.close()
        self.sampler.close()
        self.ctx.term()
        self.metrics.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in the run folder")


def main(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    cfg = load_config()
    log = setup_logging("learner", 0)
    stop = StopFlag().install()
    learner = Learner(cfg, settings, resume=args.resume, log=log)
    port = learner.metrics.serve(settings.bind_host, settings.metrics_port)
    log.info(
        "learning %s on %s with %s (device %s), metrics :%s",
        cfg.algo.name,
        cfg.env.id,
        Path(settings.run_dir),
        learner.device,
        port,
    )
    try:
        finished = learner.run(stop)
        if finished and settings.hold_when_done:
            hold_until_stopped(stop, log, learner.publisher.service)
    finally:
        learner.close()
    log.info(
        "%s at %d env steps, %d updates",
        "finished" if finished else "stopped",
        learner.counters.env_steps,
        learner.counters.updates,
    )
    return 0
