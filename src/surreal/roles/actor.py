"""`surreal role actor`: steps K environments with the latest policy and pushes experience.

    ps ──params──► policy ──► K envs ──chunk (tagged with the param version)──► replay shards

Stateless: everything it holds is rebuilt from the ps on start, so a killed actor is simply started
again. Backpressure blocks it (a full or unreachable replay stops the stepping rather than growing a
queue). In deterministic mode it sends one learner batch and then waits for the next parameter version,
so the data each update sees does not depend on timing.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import zmq

from surreal.algos import get_algorithm
from surreal.config import algo_config
from surreal.envs import make_vec_env
from surreal.metrics import RoleMetrics
from surreal.proto.channels import ExperienceSender, ParamClient
from surreal.proto.codec import Limits
from surreal.roles.common import StopFlag, hold_until_stopped, load_config, setup_logging
from surreal.settings import Settings

SEND_TIMEOUT_S = 1.0
ENV_SEED_STRIDE = 10_007  # far enough apart that actors' env seeds never overlap


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # everything comes from SURREAL_* variables and the experiment config


def main(args: argparse.Namespace) -> int:
    del args
    settings = Settings.from_env()
    cfg = load_config()
    index = settings.index
    log = setup_logging("actor", index)
    stop = StopFlag().install()
    torch.set_num_threads(cfg.actor.torch_threads)

    algo = get_algorithm(cfg.algo.name)
    env_seed = cfg.seed + ENV_SEED_STRIDE * (index + 1)
    envs = make_vec_env(cfg.env.id, cfg.topology.envs_per_actor, env_seed, cfg.env.kwargs)
    policy = algo.make_policy(
        envs.single_observation_space, envs.single_action_space, algo_config(cfg), index, cfg.topology.actors
    )
    collector = algo.make_collector(envs, policy, algo_config(cfg), index, cfg.actor.chunk_steps)
    on_policy = type(cfg.algo).on_policy
    # On-policy: this actor's share of a learner batch, in chunks; deterministic runs (and ES, whose results
    # from an older theta are useless) go in lock-step.
    share = math.ceil(cfg.algo.batch_size / (cfg.topology.actors * collector.chunk_size))
    rollout_ahead = 1 if cfg.deterministic or algo.LOCKSTEP else cfg.actor.rollout_ahead

    metrics = RoleMetrics("actor", index)
    m_steps = metrics.counter("actor_env_steps_total", "environment steps taken")
    m_episodes = metrics.counter("actor_episodes_total", "episodes finished")
    m_return = metrics.gauge("actor_episode_return", "return of the last finished episode")
    m_version = metrics.gauge("actor_param_version", "parameter version the policy runs")
    m_blocked = metrics.counter("actor_send_blocked_total", "send attempts refused by backpressure")
    m_fetch_fail = metrics.counter("actor_param_fetch_timeouts_total", "parameter fetches that timed out")
    metrics.serve(settings.bind_host, settings.metrics_port)

    ctx = zmq.Context()
    limits = Limits(max_bytes=cfg.ps.max_message_bytes)
    sender = ExperienceSender(ctx, [r.experience for r in settings.replay])
    params = ParamClient(ctx, settings.ps_addrs, limits)
    version, incarnation, done = -1, "", False
    allowance = math.inf  # off-policy: env steps this actor may take before it needs a newer blob

    def fetch(wait_for_new: bool) -> None:
        """Load newer parameters if the ps has them; with `wait_for_new`, keep asking until it does."""
        nonlocal version, incarnation, done, allowance
        while not stop:
            reply = params.fetch(version, incarnation, cfg.actor.fetch_timeout_s)
            if reply is None:
                m_fetch_fail.inc()
            elif reply.message is not None:
                policy.load_params(reply.message.arrays)
                version, incarnation = reply.version, reply.incarnation
                meta = reply.message.meta
                done = bool(meta.get("done", False))
                if "env_step_budget" in meta:  # the learner's share of the budget left, split over the actors
                    allowance = (int(meta["env_step_budget"]) - int(meta.get("env_steps", 0))) / cfg.topology.actors
                m_version.set(version)
                return
            if not wait_for_new:
                return
            time.sleep(0.01 if reply is not None else 0.0)

    log.info("waiting for parameters from %s", ",".join(settings.ps_addrs))
    fetch(wait_for_new=True)
    log.info("running %s on %d x %s from version %d", cfg.algo.name, cfg.topology.envs_per_actor, cfg.env.id, version)
    # Cumulative throttle: by version base + n the learner has used n batches, so this actor may have sent
    # (n + rollout_ahead) shares. A new learner incarnation (resumed at a lower version) restarts the count.
    chunks, base_version, since_base, base_incarnation = 0, version, 0, incarnation
    try:
        while not stop and not done:
            chunk = collector.collect(version)
            meta = {
                "version": chunk.version,
                "incarnation": incarnation,
                "actor": index,
                "episode_returns": chunk.episode_returns,
                "episode_lengths": chunk.episode_lengths,
                "env_steps": chunk.env_steps,
            }
            while not stop and not sender.send(chunk.arrays, meta, SEND_TIMEOUT_S):
                m_blocked.inc()
            m_steps.inc(chunk.env_steps)
            m_episodes.inc(len(chunk.episode_returns))
            if chunk.episode_returns:
                m_return.set(chunk.episode_returns[-1])
            chunks += 1
            since_base += 1
            allowance -= chunk.env_steps
            if on_policy and rollout_ahead and since_base >= (version - base_version + rollout_ahead) * share:
                fetch(wait_for_new=True)  # one new version lets this actor send one more share
            elif not on_policy and allowance <= 0:
                while not stop and not done and allowance <= 0:
                    fetch(wait_for_new=True)  # ahead of the replay ratio: wait until the learner has caught up
            elif chunks % cfg.actor.param_fetch_interval == 0:
                fetch(wait_for_new=False)
            if incarnation != base_incarnation:
                base_version, since_base, base_incarnation = version, 0, incarnation
        if done and settings.hold_when_done:
            hold_until_stopped(stop, log)
    finally:
        sender.close()
        params.close()
        ctx.term()
        envs.close()
        metrics.close()
    log.info("stopped after %d chunks at version %d%s", chunks, version, " (training done)" if done else "")
    return 0
