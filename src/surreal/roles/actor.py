"""`surreal role actor`: steps K environments with the latest policy and pushes experience.

    ps ──params──► policy ──► K envs ──chunk (tagged with the param version)──► replay shards

`ActorCore` is that loop without sockets (serial mode and the tests drive it on in-process ports); `main` is
the process shell: settings, sockets, /metrics, signals. Stateless: everything an actor holds is rebuilt
from the ps on start, so a killed actor is simply started again. On SIGTERM (a spot node's preemption
notice, `kubectl delete pod`) it finishes the chunk it is stepping, gives a chunk that backpressure refused
one more try, lets its queued chunks reach the replay for up to `FLUSH_S` and exits: a chunk's steps plus
about 3 s, well inside the chart's grace period. Backpressure blocks it (a full or
unreachable replay stops the stepping rather than growing a queue), and the flow-control rule of the
algorithm's regime (runtime/regimes/) holds it to what the learner can use; while held, it asks the ps with a
long poll for the version that frees it (the throttle's `wait`: the ps answers when that blob arrives or the
hold ends), so a thousand waiting actors neither flood the ps nor each download every version.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, fields
from typing import Any

import torch

from surreal.algos import get_algorithm
from surreal.config import ExperimentConfig, algo_config
from surreal.envs import make_vec_env
from surreal.envstate import load_vec_env_state, vec_env_state
from surreal.metrics import RoleMetrics
from surreal.proto.channels import FETCH_TIMEOUT, ExperienceSender, ParamClient
from surreal.proto.codec import Limits
from surreal.proto.curve import WireContext
from surreal.proto.wire import BlobMeta, Chunk, NotModified, Params
from surreal.roles.common import StopFlag, hold_until_stopped, load_config, setup_logging
from surreal.roles.ports import ExperienceOut, ParamsIn
from surreal.runtime.regimes import actor_throttle
from surreal.settings import Settings

SEND_TIMEOUT_S = 1.0
FLUSH_S = 2.0  # on SIGTERM: how long queued chunks may take to reach the replay
IDLE_S = 0.01  # pause before asking the ps again when it had nothing newer
ENV_SEED_STRIDE = 10_007  # far enough apart that actors' env seeds never overlap


class ActorCore:
    """One actor: parameters in, policy on K envs, chunks out, held by the flow-control throttle."""

    def __init__(
        self, cfg: ExperimentConfig, index: int, experience: ExperienceOut, params: ParamsIn, metrics: RoleMetrics
    ) -> None:
        self.cfg = cfg
        self.index = index
        self.experience = experience
        self.params = params
        algo = get_algorithm(cfg.algo.name)
        env_seed = cfg.seed + ENV_SEED_STRIDE * (index + 1)
        self.envs = make_vec_env(cfg.env.id, cfg.topology.envs_per_actor, env_seed, cfg.env.kwargs)
        spaces = self.envs.single_observation_space, self.envs.single_action_space
        self.policy = algo.make_policy(*spaces, algo_config(cfg), index, cfg.topology.actors)
        self.collector = algo.make_collector(self.envs, self.policy, algo_config(cfg), index, cfg.actor.chunk_steps)
        self.throttle = actor_throttle(cfg, actor=index)
        self.version, self.incarnation, self.done = -1, "", False
        self.loaded: Params | None = None  # the blob the policy runs
        self.chunks_sent = 0
        self.unsent: Chunk | None = None  # a chunk backpressure refused, sent before anything else
        self.m_steps = metrics.counter("actor_env_steps_total", "environment steps taken")
        self.m_episodes = metrics.counter("actor_episodes_total", "episodes finished")
        self.m_return = metrics.gauge("actor_episode_return", "return of the last finished episode")
        self.m_version = metrics.gauge("actor_param_version", "parameter version the policy runs")
        self.m_blocked = metrics.counter("actor_send_blocked_total", "send attempts refused by backpressure")

    def step(self) -> bool:
        """Ship one chunk if the throttle allows, else ask the ps for newer parameters. False: neither a chunk
        went out nor newer parameters came in (the shell pauses before the next step)."""
        if self.unsent is None:
            if self.version < 0 or self.throttle.must_wait(self.version):
                wait = self.throttle.wait(self.version)  # nothing to do until newer parameters come: a long poll
                return self.fetch(wait.hold_s, wait.wake_version)
            self.unsent = self.collector.collect(self.version)
        if not self.experience.send(self.unsent, self.incarnation, SEND_TIMEOUT_S):
            self.m_blocked.inc()
            return False
        chunk, self.unsent = self.unsent, None
        self.chunks_sent += 1
        self.throttle.on_sent(chunk.env_steps)
        self.m_steps.inc(chunk.env_steps)
        self.m_episodes.inc(len(chunk.episode_returns))
        if chunk.episode_returns:
            self.m_return.set(chunk.episode_returns[-1])
        if self.chunks_sent % self.cfg.actor.param_fetch_interval == 0:
            self.fetch()
        return True

    def flush(self) -> bool:
        """On the way out: one more try for a chunk backpressure refused. True: nothing is left unsent."""
        if self.unsent is not None and self.experience.send(self.unsent, self.incarnation, SEND_TIMEOUT_S):
            self.unsent = None
            self.chunks_sent += 1
        return self.unsent is None

    def fetch(self, hold_s: float = 0.0, wake_version: int = 0) -> bool:
        """Load newer parameters if the ps has them (or, with `hold_s`, gets them within that long, of
        `wake_version` or later); a "not modified" tells the throttle how far the learner got."""
        reply = self.params.fetch(self.version, self.incarnation, self.cfg.actor.fetch_timeout_s, hold_s, wake_version)
        if isinstance(reply, NotModified):
            self.throttle.on_heard(reply.version, reply.incarnation)
            return False
        if reply is None:
            return False
        self.load(reply)
        return True

    def load(self, params: Params) -> None:
        self.policy.load_params(params.arrays)
        self.loaded = params
        self.version, self.incarnation, self.done = params.blob.version, params.blob.incarnation, params.blob.done
        self.throttle.on_params(params.blob)
        self.m_version.set(self.version)

    def state(self) -> dict[str, Any]:
        """Everything the next step continues from (NumPy arrays, numbers, containers), for an exact resume in
        serial mode; a process actor needs none of it (it is rebuilt from the ps)."""
        unsent = None if self.unsent is None else {f.name: getattr(self.unsent, f.name) for f in fields(Chunk)}
        loaded = None if self.loaded is None else {"blob": asdict(self.loaded.blob), "arrays": self.loaded.arrays}
        return {
            "envs": vec_env_state(self.envs),
            "collector": self.collector.state(),
            "throttle": self.throttle.state(),
            "loaded": loaded,
            "chunks_sent": self.chunks_sent,
            "unsent": unsent,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        if state["loaded"] is not None:
            self.load(Params(BlobMeta(**state["loaded"]["blob"]), state["loaded"]["arrays"]))
        self.throttle.load_state(state["throttle"])  # after `load`, which tells the throttle of the blob
        load_vec_env_state(self.envs, state["envs"])
        self.collector.load_state(state["collector"])
        self.chunks_sent = state["chunks_sent"]
        self.unsent = None if state["unsent"] is None else Chunk(**state["unsent"])

    def close(self) -> None:
        self.envs.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # everything comes from SURREAL_* variables and the experiment config


def main(args: argparse.Namespace) -> int:
    del args
    settings = Settings.from_env()
    cfg = load_config()
    log = setup_logging("actor", settings.index)
    stop = StopFlag().install()
    torch.set_num_threads(cfg.actor.torch_threads)
    metrics = RoleMetrics("actor", settings.index)
    m_fetch_fail = metrics.counter("actor_param_fetch_timeouts_total", "parameter fetches that timed out")
    m_bad = metrics.counter("messages_dropped_total", "malformed replies counted and dropped", ["reason"])

    def on_error(reason: str) -> None:
        (m_fetch_fail if reason == FETCH_TIMEOUT else m_bad.labels(reason=reason)).inc()

    ctx = WireContext(settings.curve_keys)
    experience = ExperienceSender(ctx, settings.experience_addrs)
    ps_addrs = [settings.connect(a) for a in settings.ps_addrs]
    params = ParamClient(ctx, ps_addrs, Limits(max_bytes=cfg.ps.max_message_bytes), on_error)
    core = ActorCore(cfg, settings.index, experience, params, metrics)
    metrics.serve(settings.bind_host, settings.metrics_port)
    log.info(
        "running %s on %d x %s; parameters from %s",
        cfg.algo.name,
        cfg.topology.envs_per_actor,
        cfg.env.id,
        ",".join(ps_addrs),
    )
    try:
        while not stop and not core.done:
            if not core.step():
                time.sleep(IDLE_S)
        if stop and not core.flush():
            log.info("stopping: the replay took no more chunks in %.0f s; one chunk lost", SEND_TIMEOUT_S)
        if core.done and settings.hold_when_done:
            hold_until_stopped(stop, log)
    finally:
        experience.close(FLUSH_S if stop else 0.0)
        params.close()
        ctx.term()
        core.close()
        metrics.close()
    done = " (training done)" if core.done else ""
    log.info("stopped after %d chunks at version %d%s", core.chunks_sent, core.version, done)
    return 0
