"""`surreal role learner`: the single centralized learner.

    replay shards ──sample replies (prefetched)──► batch ──update──► params ──► ps
                                                                └──► checkpoints, metrics.jsonl

`LearnerCore` is that loop without sockets (serial mode, `bench.learner` and the tests drive it on in-process
ports); `main` is the process shell: settings, sockets, /metrics, signals. On-policy algorithms learn from
whole chunks, `batch_size` units per update, dropping chunks the staleness bound refuses; off-policy ones
from samples of `learner.minibatches_per_sample` minibatches, one gradient step each, as many as the replay
ratio allows (a sample may be stepped through over several calls), sending each sample's priorities back to
its shard in one message (runtime/flow.py holds both rules). Parameters (with the
observation-normalizer statistics inside) are published after every update (off-policy: every
`publish_interval`); checkpoints every `checkpoint_interval` updates (off-policy: metrics rows) and at the
end; `--resume` continues from the latest with the same counters. At `total_env_steps` it evaluates the
deterministic policy, writes eval.json and publishes a final blob marked `done` (actors stop on it). A
learner resumed after it finished does not evaluate again: it announces `done`.
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
from typing import Any, cast

import numpy as np
import torch
import zmq

from surreal.algos import OffPolicyLearner, OnPolicyLearner, get_algorithm
from surreal.config import ExperimentConfig, algo_config
from surreal.envs import env_steps_bound, make_env
from surreal.fileio import atomic_write_text
from surreal.metrics import RoleMetrics
from surreal.metricsfile import METRICS_FILE
from surreal.proto.codec import Limits
from surreal.proto.wire import BlobMeta, Chunk
from surreal.roles.common import StopFlag, hold_until_stopped, load_config, setup_logging
from surreal.roles.device import choose_device, update_seconds
from surreal.roles.ports import BackgroundBatches, BatchesIn, ParamsOut, SampleReply, ZmqBatchesIn, ZmqParamsOut
from surreal.runtime.checkpoint import CheckpointStore
from surreal.runtime.flow import ShardEnvSteps, live_actors, replay_ratio_limiter, sample_size, staleness_bound
from surreal.runtime.recorder import Recorder, WallTime, truncate_metrics
from surreal.runtime.rollout import evaluate
from surreal.settings import Settings

RECENT_EPISODES = 20
OFF_POLICY_ROW_UPDATES = 250  # off-policy: gradient steps per metrics row (and per checkpoint_interval unit)
RECEIVE_TIMEOUT_S = 0.05  # longest wait for a sample reply before the loop services the publisher again
IDLE_S = 0.005  # the shell's pause when a step did nothing (an off-policy learner ahead of its replay ratio)
DONE_LINGER_S = 1.0  # keep answering late-subscribing ps replicas with the final blob this long
EVAL_SEED_OFFSET = 1_000_003  # evaluation episodes start from seeds no training env used


@dataclass
class Sample:
    """An off-policy sample reply being stepped through: `minibatches` of `size` transitions, `used` of them
    so far, and the priorities they earned (sent home together when the sample is retired)."""

    shard: int
    arrays: dict[str, Any]
    size: int
    minibatches: int
    used: int = 0
    priorities: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def of(cls, reply: SampleReply, batch_size: int) -> Sample:
        """A reply of k * batch_size transitions is k minibatches; a shorter one is one minibatch."""
        arrays = cast(dict[str, Any], reply.transitions)
        transitions = len(arrays["rewards"])
        size = min(batch_size, transitions)
        return cls(reply.report.shard, arrays, size, transitions // size)

    def next(self, steps: int) -> dict[str, Any]:
        """The next `steps` minibatches' transitions, marked used."""
        start, self.used = self.used * self.size, self.used + steps
        return {k: np.asarray(v)[start : self.used * self.size] for k, v in self.arrays.items()}


@dataclass
class Counters:
    """What a resumed learner must continue from (all checkpointed)."""

    env_steps: int = 0
    updates: int = 0
    version: int = 0
    episodes: int = 0
    stale_dropped: int = 0
    recent_returns: list[float] = field(default_factory=list)
    recent_successes: list[bool] = field(default_factory=list)  # envs reporting `is_success` only
    shard_env_steps: list[int] = field(default_factory=list)  # off-policy: each replay shard's count seen last


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


class LearnerCore:
    """Batches in, the algorithm's update, parameters out; counters, checkpoints, metrics and evaluation."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        run_dir: Path,
        batches: BatchesIn,
        params_out: ParamsOut,
        metrics: RoleMetrics,
        resume: bool,
        log: logging.Logger,
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.batches = batches
        self.params_out = params_out
        self.log = log
        run_dir.mkdir(parents=True, exist_ok=True)
        seed_everything(cfg.seed, cfg.deterministic)
        self.device = choose_device(cfg, lambda device: update_seconds(cfg, device), log)
        probe = make_env(cfg.env.id, cfg.seed, cfg.env.kwargs)
        self.obs_space, self.act_space = probe.observation_space, probe.action_space
        probe.close()
        self.algo = get_algorithm(cfg.algo.name)
        self.algo_learner = self._new_algo_learner()
        self.checkpoints = CheckpointStore(run_dir / "checkpoints", cfg.learner.keep_checkpoints)
        self.counters = Counters()
        self.checkpointed_at = time.monotonic()
        if not (resume and self._restore()):
            self.checkpoint()  # from the start: a learner killed before its first interval resumes, not restarts
        self.incarnation = uuid.uuid4().hex[:12]
        self.recorder = Recorder(run_dir, metrics)
        self.wall = WallTime(metrics)
        self.m_skipped = metrics.counter("learner_updates_skipped_total", "updates undone for going non-finite")
        self.skipped = 0
        self.recorder.counters(self.counters.env_steps, self.counters.updates, self.counters.stale_dropped)
        self.sample_size = sample_size(cfg)
        self.live = live_actors(cfg)
        self.m_live = metrics.gauge("learner_live_actors", "actors heard from lately: what their shares follow")
        if cfg.algo.on_policy:
            self.staleness = staleness_bound(cfg)
            self.queue: deque[Chunk] = deque()
            self.queued_units = 0
        else:
            self.limiter = replay_ratio_limiter(cfg)
            self.shard_steps = ShardEnvSteps(self.counters.shard_env_steps)
            self.samples: deque[Sample] = deque()
            self.interval: list[dict[str, float]] = []  # statistics of the updates since the last row

    # -- the loop ------------------------------------------------------------------------------------

    @property
    def reached_total(self) -> bool:
        return self.counters.env_steps >= self.cfg.total_env_steps

    def step(self, timeout_s: float = RECEIVE_TIMEOUT_S) -> bool:
        """Take a sample reply and update when the flow-control rule allows. False: nothing happened."""
        with self.wall.phase("io"):
            self.params_out.service()
        return self._step_chunks(timeout_s) if self.cfg.algo.on_policy else self._step_transitions(timeout_s)

    def _next_reply(self, timeout_s: float) -> SampleReply | None:
        with self.wall.phase("wait"):
            return self.batches.next(self.sample_size, timeout_s)

    def _step_chunks(self, timeout_s: float) -> bool:
        """On-policy: queue whole chunks; update once a batch's worth is queued."""
        reply = self._next_reply(timeout_s)
        if reply is not None:
            for chunk in reply.chunks:
                if self.live is not None:
                    self.live.heard(chunk.actor, self.counters.version)
                self.queue.append(chunk)
                self.queued_units += chunk.size
                self.counters.env_steps += chunk.env_steps
                self._episodes(chunk.episode_returns, chunk.episode_successes)
            self.recorder.m_queue.set(self.queued_units)
        if self.queued_units >= self.cfg.algo.batch_size:
            self._update_chunks(self._take_batch())
            return True
        return reply is not None

    def _step_transitions(self, timeout_s: float) -> bool:
        """Off-policy: gradient steps on the sampled minibatches, as many as the replay ratio allows."""
        allowed = self.limiter.updates_allowed(self.counters.env_steps) - self.counters.updates
        if self.samples and allowed > 0:
            self._update_transitions(self.samples[0], allowed)
            return True
        reply = self._next_reply(timeout_s)
        if reply is None or reply.transitions is None:
            return False
        self._count_reply(reply)
        self.samples.append(Sample.of(reply, self.cfg.algo.batch_size))
        while len(self.samples) > self.cfg.learner.prefetch * self.batches.shards:
            self._retire(self.samples.popleft())  # a newer sample of the same buffer replaces it
        return self.counters.updates < self.limiter.updates_allowed(self.counters.env_steps)

    def _count_reply(self, reply: SampleReply) -> None:
        """A transition reply's env-step count and finished episodes (off-policy learners see no chunks)."""
        self.counters.env_steps += self.shard_steps.observe(reply.report.shard, reply.report.env_steps)
        self._episodes(reply.report.episode_returns, reply.report.episode_successes)
        if self.live is not None:
            for actor in reply.report.actors:
                self.live.heard(actor, self.counters.env_steps)

    def _episodes(self, returns: list[float], successes: list[bool]) -> None:
        self.counters.episodes += len(returns)
        self.counters.recent_returns = (self.counters.recent_returns + returns)[-RECENT_EPISODES:]
        self.counters.recent_successes = (self.counters.recent_successes + successes)[-RECENT_EPISODES:]

    def _take_batch(self) -> list[Chunk]:
        """Whole chunks, oldest first, until `batch_size` units; the rest waits for the next update."""
        batch, total = [], 0
        while self.queue and total < self.cfg.algo.batch_size:
            chunk = self.queue.popleft()
            batch.append(chunk)
            total += chunk.size
        self.queued_units -= total
        return batch

    def _update_chunks(self, batch: list[Chunk]) -> None:
        c = self.counters
        kept, dropped = self.staleness.split(batch, c.version)
        c.stale_dropped += dropped
        if not kept:
            return
        started = time.perf_counter()
        # Learning-rate annealing counts the steps used before this batch, as CleanRL does.
        used_before = c.env_steps - sum(chunk.env_steps for chunk in (*self.queue, *batch))
        fraction_done = min(1.0, used_before / self.cfg.total_env_steps)
        with self.wall.phase("update"):
            stats = cast(OnPolicyLearner, self.algo_learner).update(kept, fraction_done)
        update_s = time.perf_counter() - started
        self._note_skipped(stats)
        lag_mean = float(np.mean([max(0, c.version - chunk.version) for chunk in batch]))
        c.updates += 1
        c.version += 1
        with self.wall.phase("io"):
            self.publish()
            self._record(stats, update_s, lag_mean)
            if self._checkpoint_due(c.updates % self.cfg.learner.checkpoint_interval == 0):
                self.checkpoint()

    def _update_transitions(self, sample: Sample, allowed: int) -> None:
        """Up to `allowed` gradient steps on the sample's next minibatches, in one call of the algorithm."""
        c = self.counters
        steps = min(allowed, sample.minibatches - sample.used)
        started = time.perf_counter()
        with self.wall.phase("update"):
            step_stats, priorities = cast(OffPolicyLearner, self.algo_learner).update(sample.next(steps), steps)
        update_s = (time.perf_counter() - started) / steps
        before = c.updates
        c.updates += steps
        for stats in step_stats:
            if not self._note_skipped(stats):
                self.interval.append(stats)
        sample.priorities.append(priorities)
        with self.wall.phase("io"):
            if sample.used == sample.minibatches:
                self._retire(self.samples.popleft())
            crossed = lambda every: c.updates // every > before // every
            if crossed(self.limiter.publish_interval):
                c.version += 1
                self.publish()
            if crossed(OFF_POLICY_ROW_UPDATES) and self.interval:
                means = {k: float(np.mean([row[k] for row in self.interval])) for k in self.interval[0]}
                self.interval.clear()
                self._record(means, update_s)
            if self._checkpoint_due(crossed(OFF_POLICY_ROW_UPDATES * self.cfg.learner.checkpoint_interval)):
                self.checkpoint()

    def _retire(self, sample: Sample) -> None:
        """A sample the learner is done with: the priorities of the minibatches it stepped on go home to their
        shard in one message (none for skipped steps, whose priorities are NaN)."""
        if self.cfg.replay.mode != "prioritized" or not sample.priorities:
            return
        priorities = np.concatenate(sample.priorities)
        slots, ids = (np.asarray(sample.arrays[k])[: len(priorities)] for k in ("slots", "ids"))
        keep = np.isfinite(priorities)
        if keep.any():
            self.batches.send_priorities(sample.shard, slots[keep], ids[keep], priorities[keep])

    def _note_skipped(self, stats: dict[str, float]) -> bool:
        """Count (and log, now and then) an update the algorithm undid because it went non-finite."""
        if not stats.get("nonfinite_skipped"):
            return False
        self.m_skipped.inc()
        self.skipped += 1
        if self.skipped == 1 or self.skipped % 100 == 0:
            self.log.warning(
                "update %d went non-finite and was skipped (%d so far)", self.counters.updates, self.skipped
            )
        return True

    def _record(self, stats: dict[str, float], update_s: float, lag_mean: float | None = None) -> None:
        c = self.counters
        row: dict[str, Any] = {
            "env_steps": c.env_steps,
            "updates": c.updates,
            "version": c.version,
            "episodes": c.episodes,
            "train_return_mean": float(np.mean(c.recent_returns)) if c.recent_returns else None,
            "stale_dropped": c.stale_dropped,
        }
        if c.recent_successes:  # only for envs reporting `is_success`
            row["train_success_rate"] = float(np.mean(c.recent_successes))
        if lag_mean is not None:
            row["version_lag_mean"] = lag_mean
        if not self.cfg.deterministic:  # a deterministic run writes the same file twice: no wall times in it
            row["time"] = round(time.time(), 3)  # unix time: gaps between rows show stalls, across restarts too
            row["live_actors"] = self.live_actors()
            row.update(self.wall.take())
        self.recorder.row(row, stats, update_s)

    def publish(self, done: bool = False) -> None:
        c = self.counters
        budget = None if self.cfg.algo.on_policy else self.limiter.budget(c.updates)
        blob = BlobMeta(c.version, self.incarnation, done, c.env_steps, budget, self.live_actors())
        self.params_out.publish(blob, self.algo_learner.params())
        self.recorder.m_version.set(c.version)

    def live_actors(self) -> int | None:
        """The actors heard from lately (runtime/flow.py `LiveActors`); None: none yet, or shares are fixed."""
        if self.live is None:
            return None
        actors = self.live.count(self.counters.version if self.cfg.algo.on_policy else self.counters.env_steps)
        self.m_live.set(actors or 0)
        return actors

    # -- state ---------------------------------------------------------------------------------------

    def _new_algo_learner(self) -> OnPolicyLearner | OffPolicyLearner:
        return self.algo.make_learner(
            self.obs_space, self.act_space, algo_config(self.cfg), self.device, compile=self.cfg.learner.compile
        )

    def _restore(self) -> bool:
        """The newest checkpoint that restores (damaged ones are set aside); False: none, start afresh."""

        def apply(state: dict[str, Any]) -> None:
            counters = Counters(**state["counters"])
            self.algo_learner.load_state_dict(state["learner"])
            self.counters = counters

        if self.checkpoints.restore(apply, self.log) is None:
            self.log.info("--resume: no checkpoint restores, starting fresh")
            # A checkpoint that failed half-way may have loaded part of its state: start from a new learner.
            self.algo_learner = self._new_algo_learner()
            truncate_metrics(self.run_dir / METRICS_FILE, 0)
            return False
        c = self.counters
        self.log.info("resumed at update %d, %d env steps, version %d", c.updates, c.env_steps, c.version)
        truncate_metrics(self.run_dir / METRICS_FILE, c.updates)  # the run continues from this checkpoint
        return True

    def checkpoint(self) -> None:
        # The algorithm's state carries its own torch RNG; the learner draws no other random numbers.
        state = {"learner": self.algo_learner.state_dict(), "counters": asdict(self.counters)}
        self.checkpoints.save(self.counters.updates, state)
        self.checkpointed_at = time.monotonic()

    def _checkpoint_due(self, interval_reached: bool) -> bool:
        """Every `checkpoint_interval` (updates, or metrics rows off-policy) and every `checkpoint_interval_s`."""
        overdue = time.monotonic() - self.checkpointed_at >= self.cfg.learner.checkpoint_interval_s
        return interval_reached or overdue

    @property
    def finished_before(self) -> bool:
        """Resumed after training ended (eval.json written): announce `done` without evaluating again."""
        return self.reached_total and (self.run_dir / "eval.json").exists()

    def finish(self) -> dict[str, Any]:
        """Evaluate the deterministic policy, write eval.json, tell actors training is over."""
        self.checkpoint()
        policy = self.algo.make_policy(self.obs_space, self.act_space, algo_config(self.cfg), 0, 1)
        policy.load_params(self.algo_learner.params())
        cfg = self.cfg
        evaluation = evaluate(
            cfg.env.id, policy, cfg.learner.eval_episodes, cfg.seed + EVAL_SEED_OFFSET, cfg.env.kwargs
        )
        returns = evaluation.returns
        return_mean = float(np.mean(returns))
        result: dict[str, Any] = {
            "eval_return_mean": return_mean,
            "eval_return_std": float(np.std(returns)),
            "eval_episodes": len(returns),
            "env_steps": self.counters.env_steps,
            "updates": self.counters.updates,
            "eval_returns": [float(r) for r in returns],
        }
        if evaluation.successes:  # only for envs reporting `is_success`
            result["eval_success_rate"] = float(np.mean(evaluation.successes))
            result["eval_successes"] = evaluation.successes
        atomic_write_text(self.run_dir / "eval.json", json.dumps(result, indent=2))
        self.recorder.evaluation(return_mean, self.counters.env_steps)
        self.log.info("eval over %d episodes: %.1f +- %.1f", len(returns), return_mean, np.std(returns))
        self.announce_done()
        return result

    def announce_done(self) -> None:
        """Publish the final blob marked `done`. It gets a version of its own: a ps replaces its blob only for a
        newer version, and an actor asks for one newer than it runs, so under the last update's version `done`
        would reach no actor that already has it."""
        self.counters.version += 1
        self.publish(done=True)

    def close(self) -> None:
        self.recorder.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in the run folder")


def main(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    cfg = load_config()
    log = setup_logging("learner", 0)
    stop = StopFlag().install()
    torch.set_num_threads(cfg.learner.torch_threads)
    metrics = RoleMetrics("learner", 0)
    m_bad = metrics.counter("messages_dropped_total", "malformed replies counted and dropped", ["reason"])
    ctx = zmq.Context()
    limits = Limits(max_frames=cfg.replay.max_frames, max_bytes=cfg.replay.max_message_bytes)
    on_error = lambda reason: m_bad.labels(reason=reason).inc()
    addresses = settings.sample_addrs
    max_steps_per_unit = env_steps_bound(cfg)
    batches = BackgroundBatches(
        lambda: ZmqBatchesIn(
            ctx, addresses, limits, cfg.learner.prefetch, on_error, max_steps_per_unit, ready_at=cfg.algo.batch_size
        ),
        shards=len(addresses),
        batch_size=sample_size(cfg),
        depth=cfg.learner.prefetch * len(addresses),
    )
    params_out = ZmqParamsOut(ctx, settings.bind(settings.params_pub_port))
    core = LearnerCore(cfg, settings.run_dir, batches, params_out, metrics, args.resume, log)
    port = metrics.serve(settings.bind_host, settings.metrics_port)
    log.info(
        "learning %s on %s in %s (device %s), metrics :%s",
        cfg.algo.name,
        cfg.env.id,
        settings.run_dir,
        core.device,
        port,
    )
    finished = False
    try:
        if core.finished_before:
            log.info("already finished at %d env steps (eval.json): not evaluating again", core.counters.env_steps)
            core.announce_done()
        else:
            core.publish()
            while not stop and not core.reached_total:
                if not core.step():
                    time.sleep(IDLE_S)
            if stop:
                core.checkpoint()
            else:
                core.finish()
        finished = not stop
        if finished:
            deadline = time.monotonic() + DONE_LINGER_S  # late-subscribing ps replicas still get `done`
            while time.monotonic() < deadline:
                params_out.service()
                time.sleep(0.05)
            if settings.hold_when_done:
                hold_until_stopped(stop, log, params_out.service)
    finally:
        core.close()
        batches.close()
        params_out.close()
        ctx.term()
        metrics.close()
    c = core.counters
    log.info("%s at %d env steps, %d updates", "finished" if finished else "stopped", c.env_steps, c.updates)
    return 0
