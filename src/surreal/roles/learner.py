"""`surreal role learner`: the single centralized learner.

    replay shards ──sample replies (prefetched)──► feed ──ready work──► update ──► params ──► ps
                                                                          └──► checkpoints, metrics.jsonl

`LearnerCore` is that loop without sockets (serial mode, `bench.learner` and the tests drive it on in-process
ports); `main` is the process shell: settings, sockets, /metrics, signals, and the end of training
(`finish`). The core never asks which algorithm or regime it runs: the experiment's flow-control
regime (runtime/regimes/) supplies a feed that says what a reply counts, when work is ready and what follows
an update, and each `step` takes a reply, runs the ready work and acts on the outcome (publish the
parameters, with the observation-normalizer statistics inside; write a metrics row; checkpoint when the
interval is reached or `checkpoint_interval_s` has passed); the cadences are the regime's. Checkpoints hold the
algorithm's state and the feeds' `Counters`, so `--resume` continues from the latest with the same counters. At
`total_env_steps` the shell evaluates and announces `done`; a learner resumed after it finished only announces `done`.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
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
from surreal.proto.wire import BlobMeta
from surreal.provenance import run_git_sha
from surreal.replay.shard import message_limits
from surreal.roles.common import EXIT_STOPPED, StopFlag, count_errors, hold_until_stopped, setup_logging
from surreal.roles.device import choose_device, update_seconds
from surreal.roles.evaluation import EVAL_FILE, evaluate_params
from surreal.roles.learner_group import (
    LeaderLearner,
    LearnerGroup,
    RankZeroOrders,
    group_device,
    make_rank_learner,
    place_from_env,
    replay_batches,
    run_follower,
)
from surreal.roles.loop import Alarm, Loop, ZmqLoop
from surreal.roles.ports import BatchesIn, ParamsOut
from surreal.runstore import LEARNER, open_mirror
from surreal.runtime.checkpoint import LearnerCheckpoints
from surreal.runtime.recorder import Recorder, WallTime, truncate_metrics
from surreal.runtime.regimes import Counters, Outcome, regime_of
from surreal.settings import Settings

RECEIVE_TIMEOUT_S = 0.05  # longest wait for a sample reply before the loop services the publisher again
IDLE_S = 0.005  # the shell's pause when a step did nothing (an off-policy learner ahead of its replay ratio)
DONE_LINGER_S = 1.0  # keep answering late-subscribing ps replicas with the final blob this long
DRAIN_S = 5.0  # on a stop, the longest wait for the replies to the sample requests still out
SERVICE_S = 0.05  # how often a finished learner answers late ps subscriptions with its `done` blob


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


class LearnerCore:
    """Replies into the regime's feed, the ready work run, its outcome acted on: parameters out, metrics rows,
    checkpoints. Its life around that (running, draining, finishing, done) is `LearnerDriver`'s."""

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

        def made() -> OnPolicyLearner | OffPolicyLearner:
            spaces, compile = (self.obs_space, self.act_space), cfg.learner.compile
            return algo_learner or self.algo.make_learner(*spaces, algo_config(cfg), self.device, compile=compile)

        self.algo_learner = made()
        self.checkpoints = LearnerCheckpoints(run_dir / "checkpoints", cfg.learner.keep_checkpoints, log, clock)
        self.policy_recorder = PolicyRecorder(cfg, self.obs_space, self.act_space, run_git_sha(run_dir))
        self.on_checkpoint: Callable[[], None] | None = None  # the shell's: mirror the run folder to its bucket
        c = self.counters = Counters()
        restored = self.checkpoints.restore(self.algo_learner.load_state_dict) if resume else None
        if restored is not None:
            c = self.counters = Counters(**restored.counters)
            log.info("resumed at update %d, %d env steps, version %d", c.updates, c.env_steps, c.version)
        elif resume:
            log.info("--resume: no checkpoint restores, starting fresh")
            self.algo_learner = made()  # a checkpoint that failed half-way may have loaded part of its state
        if resume:  # the run continues from the checkpoint: the rows written after it go (a warm-up's too)
            truncate_metrics(run_dir / METRICS_FILE, {"updates": c.updates, "env_steps": c.env_steps})
        self.restored_extra = restored.extra if restored else None  # the driver's state (serial mode's world)
        self.incarnation = uuid.uuid4().hex[:12]
        # Resumed: TensorBoard hides what an earlier incarnation wrote after this checkpoint, as metrics.jsonl drops it.
        self.recorder = Recorder(run_dir, metrics, purge_step=c.env_steps + 1 if restored else None)
        self.wall = WallTime(metrics)
        self.recorder.counters(c.env_steps, c.updates, c.stale_dropped)
        self.m_live = metrics.gauge("learner_live_actors", "actors heard from lately: what their shares follow")
        feed = regime_of(cfg).learner_feed  # the regime's half of the loop (runtime/regimes/)
        self.feed = feed(self.algo_learner, self.counters, batches.shards, batches.send_priorities)
        if restored is None:
            self.checkpoint()  # from the start: a learner killed before its first interval resumes, not restarts
        elif restored.feed:  # older checkpoints held no feed
            self.feed.load_state(restored.feed)

    @property
    def reached_total(self) -> bool:
        return self.counters.env_steps >= self.cfg.total_env_steps

    def step(self, timeout_s: float = RECEIVE_TIMEOUT_S) -> bool:
        """Take a sample reply (unless work is ready), run the work the feed has ready, act on the outcome.
        False: nothing happened, nor can at once (the driver pauses; serial mode's actors take their turn)."""
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
        self.recorder.skipped_updates(outcome.skipped, self.counters.updates, self.log)
        with self.wall.phase("io"):
            if outcome.publish:
                self.publish()
            if outcome.stats is not None:
                self._write_row({**self.counters.row(), **outcome.row_fields}, outcome.stats, outcome.update_s)
            overdue = self.clock() - self.checkpoints.saved_at >= self.cfg.learner.checkpoint_interval_s
            if outcome.checkpoint_interval or overdue:
                self.checkpoint()

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
        """Publish the final blob marked `done`, under a version of its own: no ps or actor that holds the last
        update's version would take it under that one."""
        self.counters.version += 1
        self.publish(done=True)

    def checkpoint(self) -> None:
        """The resume state, and beside it the policy artifact of the same parameters (`save_policy`)."""
        c = self.counters
        self.checkpoints.save(c.updates, self.algo_learner.state_dict(), asdict(c), self.feed.state())
        save_policy(self)
        if self.on_checkpoint is not None:
            self.on_checkpoint()

    def take_replies(self) -> None:
        """Stopping on a signal (a preemption, a drain): the replies the shards sent are taken as they come (their
        chunks would go with the process otherwise), for the checkpoint that ends it."""
        for reply in self.batches.drain(0.0):
            self.feed.take(reply)
        self._record_warmup()

    def close(self) -> None:
        self.recorder.close()


def save_policy(core: LearnerCore, evaluation: dict[str, Any] | None = None) -> Path | None:
    """policy/policy.safetensors: the learner's current parameters as a policy artifact (surreal/policy/artifact.py),
    with `evaluation` (the header's section) when they were just evaluated. Parameters holding NaN or an infinity are
    not written (a reader would refuse them): the log says so and the last finite artifact stays; None then."""
    c, path, params = core.counters, core.run_dir / POLICY_DIR / FILE_NAME, core.algo_learner.params()
    counts = {"version": c.version, "env_steps": c.env_steps, "updates": c.updates}
    try:
        return core.policy_recorder.save(path, params, **counts, evaluation=evaluation)
    except ArtifactError as exc:
        core.log.warning("policy artifact at update %d kept as it was: %s", c.updates, exc)
        return None


# -- the learner's life: its core on a loop ----------------------------------------------------------------

RUNNING, DRAINING, DONE, STOPPED = "running", "draining", "done", "stopped"


def finished_before(core: LearnerCore) -> bool:
    """Resumed after training ended (eval.json written): announce `done` without evaluating again."""
    return core.reached_total and (core.run_dir / EVAL_FILE).exists()


def evaluate_final(core: LearnerCore) -> dict[str, Any]:
    """The end of training's evaluation: the deterministic policy on fresh seeds (roles/evaluation.py), eval.json,
    the final policy artifact with that score in its header; returns eval.json's content."""
    cfg, counters = core.cfg, core.counters
    policy = core.algo.make_policy(core.obs_space, core.act_space, algo_config(cfg), 0, 1)
    evaluation = evaluate_params(cfg, policy, core.algo_learner.params())
    result = evaluation.report(env_steps=counters.env_steps, updates=counters.updates)
    atomic_write_text(core.run_dir / EVAL_FILE, json.dumps(result, indent=2))
    save_policy(core, evaluation_section(result, cfg.seed, counters.env_steps))
    core.recorder.evaluation(result, counters.env_steps)
    mean, std = result["eval_return_mean"], result["eval_return_std"]
    core.log.info("eval over %d episodes: %.1f +- %.1f", result["eval_episodes"], mean, std)
    return result


class LearnerDriver:
    """`LearnerCore`'s life on a loop (roles/loop.py), written once for the process, serial mode and the simulator:

    running    a step whenever work may be ready (asked `stopping()` before each); none ready: `idle_s`, or
               until `wake` (a reply came); with `step_turns`, each step a turn of its own (the simulator, whose
               updates cost virtual time)
    draining   on a stop: no more sample requests, the replies still out taken as they come (up to DRAIN_S), then
               a checkpoint holds them and the group is told `stop`: STOPPED
    finishing  at `total_env_steps`: the group told `finish`, a checkpoint, `evaluate` (where there is one), the
               `done` blob; resumed after that (eval.json written) only the `done` blob
    done       the parameters port serviced every `service_s` (late ps replicas get `done`) for `linger_s`
               (inf: until `stopping()`), then `over`

    `on_step(stepped)` follows each step (a group's heartbeat, serial mode's evaluator, the simulator's ledger);
    `on_end(finished)` comes as it stops or finishes, before any linger (the shell closes its run-folder mirror)."""

    def __init__(
        self,
        core: LearnerCore,
        loop: Loop,
        *,
        receive_timeout_s: float = 0.0,
        idle_s: float = IDLE_S,
        step_turns: bool = False,
        stopping: Callable[[], bool] = lambda: False,
        evaluate: Callable[[LearnerCore], dict[str, Any]] | None = evaluate_final,
        followers: RankZeroOrders | None = None,
        linger_s: float = 0.0,
        service_s: float = SERVICE_S,
        on_step: Callable[[bool], None] = lambda stepped: None,
        on_end: Callable[[bool], None] = lambda finished: None,
    ) -> None:
        self.core, self.loop, self.stopping, self.followers = core, loop, stopping, followers
        self.receive_timeout_s, self.idle_s, self.step_turns = receive_timeout_s, idle_s, step_turns
        self.evaluate, self.linger_s, self.service_s = evaluate, linger_s, service_s
        self.on_step, self.on_end = on_step, on_end
        self.state, self.asked_to_stop = RUNNING, False
        self.steps = 0  # steps that did something (serial mode's stall check)
        self.result: dict[str, Any] | None = None  # eval.json's content, once finished
        self.over = False
        self.until = 0.0  # the end of the drain, or of the linger
        self.alarm = Alarm(loop, self.kick)

    def start(self, publish: bool = True) -> None:
        """`publish`: the parameters go out first (not where a restored world's ps holds them already)."""
        if self.evaluate is not None and finished_before(self.core):
            self.core.log.info(
                "already finished at %d env steps (eval.json): not evaluating again", self.core.counters.env_steps
            )
            self.result = json.loads((self.core.run_dir / EVAL_FILE).read_text(encoding="utf-8"))
            self._finished(evaluated=True)
        elif publish:
            self.core.publish()
        self.alarm.set(self.loop.now())

    def stop(self) -> None:
        """Stopped from outside (a simulated SIGTERM): no more sample requests; once the step in progress ends,
        drain, checkpoint, end."""
        if self.state == RUNNING:
            self.core.batches.stop_asking()
            self.asked_to_stop = True
            self.alarm.set(self.loop.now())

    def wake(self) -> None:
        """Something came (a sample reply): look again now."""
        if self.state in (RUNNING, DRAINING):
            self.alarm.set(self.loop.now())

    def kick(self) -> None:
        core = self.core
        while self.state == RUNNING:
            if core.reached_total:
                self._finished(evaluated=False)
            elif self.asked_to_stop or self.stopping():
                self._drain()
            elif not self._step():
                return
        now = self.loop.now()
        if self.state == DRAINING:
            waiting = core.batches.outstanding and now < self.until  # read first: what came before is queued
            core.take_replies()
            if waiting:
                self.alarm.set(min(self.until, now + self.idle_s))  # a reply or the deadline ends it
                return
            core.checkpoint()
            self.state, self.over = STOPPED, True
            if self.followers is not None:
                self.followers.stop()
            self.on_end(False)
        elif self.state == DONE:
            core.params_out.service()
            if now >= self.until or (self.linger_s == math.inf and self.stopping()):
                self.over = True
            else:
                self.alarm.set(now + self.service_s)

    def _step(self) -> bool:
        """One step; False: the loop comes back (none was ready: after `idle_s` or a reply; or each is a turn)."""
        stepped = self.core.step(self.receive_timeout_s)
        if self.followers is not None:
            self.followers.heartbeat()
        self.on_step(stepped)
        if not stepped:
            self.alarm.set(self.loop.now() + self.idle_s)
            return False
        self.steps += 1
        if self.step_turns:
            self.alarm.set(self.loop.now())
            return False
        return True

    def _drain(self) -> None:
        self.state, self.until = DRAINING, self.loop.now() + DRAIN_S
        self.core.batches.stop_asking()

    def _finished(self, evaluated: bool) -> None:
        if self.followers is not None:  # the other ranks are done before rank 0 evaluates
            self.followers.finish()
        if not evaluated:
            self.core.checkpoint()
            if self.evaluate is not None:
                self.result = self.evaluate(self.core)
        self.core.announce_done()
        self.state, self.until = DONE, self.loop.now() + self.linger_s
        self.on_end(True)


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
    layout = regime_of(cfg).reply_layout(get_algorithm(cfg.algo.name).chunk_fields(*spaces, algo_config(cfg)))
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
        leader = LeaderLearner(make_rank_learner(cfg, spaces, device, group), group, regime_of(cfg))
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
    loop = ZmqLoop()  # timers only: the sample replies come through BackgroundBatches' queue

    def ended(finished: bool) -> None:
        if mirror is not None:  # the last checkpoint, eval.json and the final policy, before anything waits
            mirror.close()
        if not finished:
            name = signal.Signals(stop.signal).name if stop.signal else "a signal"
            took_s = loop.now() - driver.until + DRAIN_S
            log.info(
                "stopped by %s (a preemption, drain or shutdown): checkpoint at update %d written in %.2f s",
                *(name, core.counters.updates, took_s),
            )
        elif settings.hold_when_done:
            log.info("training done: holding until stopped (SURREAL_HOLD_WHEN_DONE=1)")

    linger_s = math.inf if settings.hold_when_done else DONE_LINGER_S  # late-subscribing ps replicas get `done`
    driver = LearnerDriver(
        core, loop, receive_timeout_s=RECEIVE_TIMEOUT_S, stopping=lambda: bool(stop), followers=group,
        linger_s=linger_s, on_end=ended,
    )  # fmt: skip
    try:
        driver.start()
        loop.run(lambda: driver.over)
    finally:
        if group is not None:
            group.close()
        core.close()
        batches.close()
        params_out.close()
        ctx.term()
        metrics.close()
    finished = driver.state == DONE
    c = core.counters
    log.info("%s at %d env steps, %d updates", "finished" if finished else "stopped", c.env_steps, c.updates)
    return 0 if finished else EXIT_STOPPED
