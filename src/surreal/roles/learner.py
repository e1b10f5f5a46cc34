"""`surreal role learner`: the single centralized learner.

    replay shards ──sample replies (prefetched)──► feed ──ready work──► update ──► params ──► ps
                                                                          └──► checkpoints, metrics.jsonl

`LearnerCore` is that loop without sockets (serial mode, `bench.learner` and the tests drive it on in-process
ports); `main` is the process shell: settings, sockets, /metrics, signals, and the end of training
(`finish`). The core never asks which algorithm or regime it runs: the experiment's flow-control
regime (runtime/regimes/) supplies a feed that says what a reply counts, when work is ready and what follows
an update, and each `step` takes a reply, runs the ready work and acts on the outcome (publish the
parameters, with the observation-normalizer statistics inside; write a metrics row; checkpoint when the
interval is reached or `checkpoint_interval_s` has passed); the cadences are the regime's (on-policy: every
update publishes, `checkpoint_interval` counts updates; off-policy: every `publish_interval` gradient steps,
and `checkpoint_interval` counts metrics rows). Checkpoints hold the algorithm's state and the feeds'
`Counters`, so `--resume` continues from the latest with the same counters. At `total_env_steps` the shell
evaluates and announces `done`; a learner resumed after it finished only announces `done`.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from surreal.algos import get_algorithm
from surreal.algos.interface import OffPolicyLearner, OnPolicyLearner
from surreal.algos.replica import end_group_process
from surreal.config import ExperimentConfig, algo_config, config_from_env, save_config
from surreal.envs import env_spaces
from surreal.fileio import atomic_write_text
from surreal.metrics import RoleMetrics
from surreal.metricsfile import METRICS_FILE
from surreal.policy.artifact import FILE_NAME, POLICY_DIR, ArtifactError
from surreal.policy.build import PolicyRecorder, evaluation_section
from surreal.proto.channels import ParamPublisher
from surreal.proto.curve import REFUSED_HELP, REFUSED_METRIC, WireContext
from surreal.proto.wire import BlobMeta, GroupOrder
from surreal.provenance import run_git_sha
from surreal.replay.shard import message_limits
from surreal.roles.common import EXIT_STOPPED, StopFlag, count_errors, hold_until_stopped, setup_logging
from surreal.roles.device import choose_device, update_seconds
from surreal.roles.evaluation import EVAL_FILE, evaluate_params
from surreal.roles.learner_group import (
    LeaderLearner,
    LearnerGroup,
    group_device,
    make_rank_learner,
    place_from_env,
    replay_batches,
    run_follower,
)
from surreal.roles.ports import BatchesIn, ParamsOut
from surreal.runstore import LEARNER, open_mirror
from surreal.runtime.checkpoint import LearnerCheckpoints, Restored
from surreal.runtime.recorder import Recorder, WallTime, truncate_metrics
from surreal.runtime.regimes import Counters, Outcome, learner_feed, reply_layout
from surreal.settings import Settings

RECEIVE_TIMEOUT_S = 0.05  # longest wait for a sample reply before the loop services the publisher again
IDLE_S = 0.005  # the shell's pause when a step did nothing (an off-policy learner ahead of its replay ratio)
DONE_LINGER_S = 1.0  # keep answering late-subscribing ps replicas with the final blob this long
DRAIN_S = 5.0  # on a stop, the longest wait for the replies to the sample requests still out


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


class LearnerCore:
    """Replies into the regime's feed, the ready work run, its outcome acted on: parameters out, metrics rows,
    checkpoints."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        run_dir: Path,
        batches: BatchesIn,
        params_out: ParamsOut,
        metrics: RoleMetrics,
        resume: bool,
        log: logging.Logger,
        spaces: tuple[gym.Space, gym.Space] | None = None,
        algo_learner: OnPolicyLearner | OffPolicyLearner | None = None,
        clock: Callable[[], float] = time.monotonic,
        device: torch.device | None = None,
    ) -> None:
        """`spaces`: the env's observation and action spaces, where the caller has them (else an env is made);
        `algo_learner`: the algorithm's learner, where the caller made it (the simulator's scripted one, a learner
        group's rank 0); `clock`: what `checkpoint_interval_s` is timed on (the simulator's is virtual); `device`:
        where the caller put `algo_learner` (else chosen by `device`)."""
        self.cfg, self.run_dir, self.batches, self.params_out, self.log = cfg, run_dir, batches, params_out, log
        self.clock = clock
        run_dir.mkdir(parents=True, exist_ok=True)
        seed_everything(cfg.seed, cfg.deterministic)
        self.device = device or choose_device(cfg, lambda device: update_seconds(cfg, device), log)
        self.obs_space, self.act_space = spaces or env_spaces(cfg)
        self.algo = get_algorithm(cfg.algo.name)
        self.given_learner = algo_learner
        self.algo_learner = self._new_algo_learner()
        self.checkpoints = LearnerCheckpoints(run_dir / "checkpoints", cfg.learner.keep_checkpoints, log, clock)
        self.policy_recorder = PolicyRecorder(cfg, self.obs_space, self.act_space, run_git_sha(run_dir))
        self.on_checkpoint: Callable[[], None] | None = None  # the shell's: mirror the run folder to its bucket
        self.counters = Counters()
        restored = self._restore() if resume else None
        self.restored_extra = restored.extra if restored else None  # the driver's state (serial mode's world)
        self.incarnation = uuid.uuid4().hex[:12]
        # Resumed: TensorBoard hides what an earlier incarnation wrote after this checkpoint, as metrics.jsonl drops it.
        self.recorder = Recorder(run_dir, metrics, purge_step=self.counters.env_steps + 1 if restored else None)
        self.wall = WallTime(metrics)
        self.m_skipped = metrics.counter("learner_updates_skipped_total", "updates undone for going non-finite")
        self.skipped = 0
        self.recorder.counters(self.counters.env_steps, self.counters.updates, self.counters.stale_dropped)
        self.m_live = metrics.gauge("learner_live_actors", "actors heard from lately: what their shares follow")
        self.feed = learner_feed(cfg, self.algo_learner, self.counters, batches.shards, batches.send_priorities)
        if restored is None:
            self.checkpoint()  # from the start: a learner killed before its first interval resumes, not restarts
        elif restored.feed:  # older checkpoints held no feed
            self.feed.load_state(restored.feed)

    # -- the loop ------------------------------------------------------------------------------------

    @property
    def reached_total(self) -> bool:
        return self.counters.env_steps >= self.cfg.total_env_steps

    def step(self, timeout_s: float = RECEIVE_TIMEOUT_S) -> bool:
        """Take a sample reply (unless work is ready), run the work the feed has ready, act on the outcome.
        False: nothing happened, nor can at once (the shell pauses; serial mode steps the actors)."""
        with self.wall.phase("io"):
            self.params_out.service()
        if not self.feed.ready():
            with self.wall.phase("wait"):
                reply = self.batches.next(self.feed.sample_size, timeout_s)
            if reply is None:
                return False
            learn_now = self.feed.take(reply)
            self.recorder.m_queue.set(self.feed.queued)
            self._record_warmup()
            if not (learn_now and self.feed.ready()):
                return learn_now or self.feed.ready()
        with self.wall.phase("update"):
            outcome = self.feed.update()
        if outcome is not None:
            self._act_on(outcome)
        return True

    def _act_on(self, outcome: Outcome) -> None:
        """What follows an update: parameters out, a metrics row, a checkpoint, as the feed says (and the timer)."""
        self._note_skipped(outcome.skipped)
        with self.wall.phase("io"):
            if outcome.publish:
                self.publish()
            if outcome.stats is not None:
                self._record(outcome.stats, outcome.update_s, outcome.row_fields)
            overdue = self.clock() - self.checkpoints.saved_at >= self.cfg.learner.checkpoint_interval_s
            if outcome.checkpoint_interval or overdue:
                self.checkpoint()

    def _note_skipped(self, updates: int) -> None:
        """Count (and log, now and then) updates the algorithm undid because they went non-finite."""
        for _ in range(updates):
            self.m_skipped.inc()
            self.skipped += 1
            if self.skipped == 1 or self.skipped % 100 == 0:
                self.log.warning(
                    "update %d went non-finite and was skipped (%d so far)", self.counters.updates, self.skipped
                )

    def _record(self, stats: dict[str, float], update_s: float, row_fields: dict[str, Any]) -> None:
        self._write_row({**self.counters.row(), **row_fields}, stats, update_s)

    def _record_warmup(self) -> None:
        """The warm-up's rows (the feed's counters as episodes finished before the first update), so a run shows its
        first minute: no statistics, since nothing was learned yet."""
        with self.wall.phase("io"):
            for counters in self.feed.warmup_rows():
                self._write_row(counters, {}, None)

    def _write_row(self, row: dict[str, Any], stats: dict[str, float], update_s: float | None) -> None:
        if not self.cfg.deterministic:  # a deterministic run writes the same file twice: no wall times in it
            row["time"] = round(time.time(), 3)  # unix time: gaps between rows show stalls, across restarts too
            row["live_actors"] = self.live_actors()
            row.update(self.wall.take())
        self.recorder.row(row, stats, update_s)

    def publish(self, done: bool = False) -> None:
        c = self.counters
        budget = self.feed.env_step_budget()
        blob = BlobMeta(c.version, self.incarnation, done, c.env_steps, budget, self.live_actors())
        self.params_out.publish(blob, self.algo_learner.params())
        self.recorder.m_version.set(c.version)

    def live_actors(self) -> int | None:
        """The actors heard from lately, on the regime's clock; None: none yet, or shares are fixed."""
        actors = self.feed.live_actors()
        self.m_live.set(actors or 0)
        return actors

    def announce_done(self) -> None:
        """Publish the final blob marked `done`. It gets a version of its own: a ps replaces its blob only for a
        newer version, and an actor asks for one newer than it runs, so under the last update's version `done`
        would reach no actor that already has it."""
        self.counters.version += 1
        self.publish(done=True)

    # -- state ---------------------------------------------------------------------------------------

    def _new_algo_learner(self) -> OnPolicyLearner | OffPolicyLearner:
        if self.given_learner is not None:
            return self.given_learner
        return self.algo.make_learner(
            self.obs_space, self.act_space, algo_config(self.cfg), self.device, compile=self.cfg.learner.compile
        )

    def _restore(self) -> Restored | None:
        """Restore the newest checkpoint that restores; None: none does, start afresh."""
        restored = self.checkpoints.restore(self.algo_learner.load_state_dict)
        if restored is None:
            self.log.info("--resume: no checkpoint restores, starting fresh")
            # A checkpoint that failed half-way may have loaded part of its state: start from a new learner.
            self.algo_learner = self._new_algo_learner()
            truncate_metrics(self.run_dir / METRICS_FILE, {"updates": 0, "env_steps": 0})
            return None
        c = self.counters = Counters(**restored.counters)
        self.log.info("resumed at update %d, %d env steps, version %d", c.updates, c.env_steps, c.version)
        # The run continues from this checkpoint: the rows written after it go (a warm-up's have no update to tell).
        truncate_metrics(self.run_dir / METRICS_FILE, {"updates": c.updates, "env_steps": c.env_steps})
        return restored

    def checkpoint(self) -> None:
        """The resume state, and beside it the policy artifact of the same parameters (`save_policy`)."""
        c = self.counters
        self.checkpoints.save(c.updates, self.algo_learner.state_dict(), asdict(c), self.feed.state())
        self.save_policy()
        if self.on_checkpoint is not None:
            self.on_checkpoint()

    def save_policy(self, evaluation: dict[str, Any] | None = None) -> Path | None:
        """policy/policy.safetensors: the current parameters as a policy artifact (surreal/policy/artifact.py),
        with `evaluation` (the header's section) when they were just evaluated. Parameters holding NaN or an
        infinity are not written (a reader would refuse them): the log says so and the last finite artifact stays;
        None then."""
        c = self.counters
        try:
            return self.policy_recorder.save(
                self.run_dir / POLICY_DIR / FILE_NAME,
                self.algo_learner.params(),
                version=c.version,
                env_steps=c.env_steps,
                updates=c.updates,
                evaluation=evaluation,
            )
        except ArtifactError as exc:
            self.log.warning("policy artifact at update %d kept as it was: %s", c.updates, exc)
            return None

    def stop(self, drain_s: float = DRAIN_S) -> None:
        """Stopped by a signal (a preemption, a drain): the replies the shards already sent are taken (their chunks
        would go with the process otherwise), then a checkpoint holds everything taken."""
        for reply in self.batches.drain(drain_s):
            self.feed.take(reply)
        self._record_warmup()
        self.checkpoint()

    def close(self) -> None:
        self.recorder.close()


# -- the end of training: a last checkpoint, the deterministic policy evaluated on fresh seeds (roles/evaluation.py),
# eval.json, the final policy artifact with that score in its header, and a final blob marked `done` (actors stop on
# it). The shell (`learn`) and serial mode (run/serial.py) call it; the core itself only learns.


def finished_before(core: LearnerCore) -> bool:
    """Resumed after training ended (eval.json written): announce `done` without evaluating again."""
    return core.reached_total and (core.run_dir / EVAL_FILE).exists()


def finish(core: LearnerCore) -> dict[str, Any]:
    """Checkpoint, evaluate the deterministic policy, write eval.json, tell actors training is over; returns
    eval.json's content."""
    core.checkpoint()
    cfg, counters = core.cfg, core.counters
    policy = core.algo.make_policy(core.obs_space, core.act_space, algo_config(cfg), 0, 1)
    evaluation = evaluate_params(cfg, policy, core.algo_learner.params())
    result = evaluation.report(env_steps=counters.env_steps, updates=counters.updates)
    atomic_write_text(core.run_dir / EVAL_FILE, json.dumps(result, indent=2))
    core.save_policy(evaluation_section(result, cfg.seed, counters.env_steps))
    core.recorder.evaluation(result, counters.env_steps)
    mean, std = result["eval_return_mean"], result["eval_return_std"]
    core.log.info("eval over %d episodes: %.1f +- %.1f", result["eval_episodes"], mean, std)
    core.announce_done()
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in the run folder")


def main(args: argparse.Namespace) -> int:
    """The learner role; a member of a learner group (any rank) leaves through `end_group_process`."""
    code = learn(args)
    return end_group_process(code) if LearnerGroup.joined else code


def learn(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    cfg = config_from_env()
    place = place_from_env(cfg)  # learner.replicas > 1: this process's rank (roles/learner_group.py)
    log = setup_logging("learner", place.rank if place else 0)
    stop = StopFlag().install()  # ranks 1..K-1 ignore it: rank 0 checkpoints and orders them to stop
    torch.set_num_threads(cfg.learner.torch_threads)
    if place is not None and place.rank > 0:  # a rank after the first: /metrics (a pod's probes), then the group
        follower_metrics = RoleMetrics("learner", place.rank)
        follower_metrics.serve(settings.bind_host, settings.metrics_port)
        try:
            code = run_follower(cfg, place, settings, log, follower_metrics)
            if code == 0 and settings.hold_when_done:  # a pod: restarted, it would wait for a group that is over
                hold_until_stopped(stop, log)
            return code
        finally:
            follower_metrics.close()
    metrics = RoleMetrics("learner", 0)
    m_refused = metrics.counter(REFUSED_METRIC, REFUSED_HELP, ["socket", "reason"])
    ctx = WireContext(settings.curve_keys)
    limits = message_limits(cfg.replay)
    spaces = env_spaces(cfg)
    layout = reply_layout(cfg, get_algorithm(cfg.algo.name).chunk_fields(*spaces, algo_config(cfg)))
    batches = replay_batches(cfg, ctx, settings.sample_addrs, layout, count_errors(metrics))
    params_out = ParamPublisher(
        ctx,
        settings.bind(settings.params_pub_port),
        on_refused=lambda socket, reason: m_refused.labels(socket=socket, reason=reason).inc(),
    )
    # With a bucket (SURREAL_RUN_URI) the run folder is its cache: what a resumed learner lacks comes from there first.
    mirror = open_mirror(settings.run_uri, settings.run_dir, LEARNER, metrics)
    if mirror is not None:
        settings.run_dir.mkdir(parents=True, exist_ok=True)
        if args.resume:
            mirror.pull()
        config_file = settings.run_dir / "config.yaml"
        if settings.config_path is None or settings.config_path.resolve() != config_file.resolve():
            save_config(cfg, config_file)  # a pod's run folder: the experiment it runs now (the ConfigMap's)
    group, leader, device = None, None, None
    if place is not None:  # rank 0 of a group: its learner orders every update to the other ranks first
        device = group_device(cfg, place)
        group = LearnerGroup(place, device, cfg.learner.group_timeout_s, limits)
        log.info("rank 0 of a learner group of %d at %s:%d", place.size, place.master_addr, place.master_port)
        leader = LeaderLearner(make_rank_learner(cfg, spaces, device, group), group, cfg)
    core = LearnerCore(
        cfg, settings.run_dir, batches, params_out, metrics, args.resume, log, spaces, leader, device=device
    )
    if group is not None:
        group.share_state(core.algo_learner)  # the group starts from rank 0's checkpoint (or fresh state)
    if mirror is not None:
        core.on_checkpoint = mirror.push_soon
        mirror.push_soon()  # the checkpoint a fresh learner starts with
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
        if finished_before(core):
            log.info("already finished at %d env steps (eval.json): not evaluating again", core.counters.env_steps)
            if group is not None:
                group.send(GroupOrder("finish"))
            core.announce_done()
        else:
            core.publish()
            while not stop and not core.reached_total:
                stepped = core.step()
                if group is not None:
                    group.heartbeat()
                if not stepped:
                    time.sleep(IDLE_S)
            if stop:
                started = time.monotonic()
                core.stop()
                if group is not None:
                    group.send(GroupOrder("stop"))
                name = signal.Signals(stop.signal).name if stop.signal else "a signal"
                log.info(
                    "stopped by %s (a preemption, drain or shutdown): checkpoint at update %d written in %.2f s",
                    name,
                    core.counters.updates,
                    time.monotonic() - started,
                )
            else:
                if group is not None:  # the other ranks are done before rank 0 evaluates
                    group.send(GroupOrder("finish"))
                finish(core)
        finished = not stop
        if mirror is not None:  # the last checkpoint, eval.json and the final policy, before anything waits
            mirror.close()
        if finished:
            deadline = time.monotonic() + DONE_LINGER_S  # late-subscribing ps replicas still get `done`
            while time.monotonic() < deadline:
                params_out.service()
                time.sleep(0.05)
            if settings.hold_when_done:
                hold_until_stopped(stop, log, params_out.service)
    finally:
        if group is not None:
            group.close()
        core.close()
        batches.close()
        params_out.close()
        ctx.term()
        metrics.close()
    c = core.counters
    log.info("%s at %d env steps, %d updates", "finished" if finished else "stopped", c.env_steps, c.updates)
    return 0 if finished else EXIT_STOPPED
