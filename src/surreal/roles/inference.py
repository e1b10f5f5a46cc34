"""`surreal role inference`: an inference worker of `topology.inference=central` (SRL's policy workers, SEED RL).

    actors ──observations (DEALER -> ROUTER)──► batch (max_batch_envs or max_wait_ms) ──► policy ──► actions
    ps ──params──► policy                         (one forward pass for every actor in the batch)

Actors in central mode keep only their envs: each step they send their K observations (`InferRequest`) and wait for
the actions and what their chunk records per step (`InferReply`: for PPO the sampled actions and log-probabilities,
exactly what `PPOPolicy.act` returns to a per-actor actor). The worker gathers requests until they hold
`inference.max_batch_envs` observations or `inference.max_wait_ms` has passed since the batch's first one, runs the
same policy code an actor runs once over their concatenation, and answers each actor with its rows. Parameters come
from the ps as an actor's do (`ParamClient`), every `inference.param_poll_ms` and at once when a request says its
actor runs a newer version than the worker holds, so a chunk's steps are made with what the actor's flow control
allowed. Before its first parameters it answers `NO_PARAMS` and the actor asks again.

Stateless like an actor: a worker that is lost is started again and fetches the latest parameters; its actors'
requests time out and go to another worker (roles/actor.py `InferenceClient`), so no chunk is built without actions.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import zmq

from surreal.algos import get_algorithm
from surreal.config import ExperimentConfig, algo_config
from surreal.envs import env_spaces
from surreal.metrics import RoleMetrics
from surreal.proto.channels import ParamClient, accepting
from surreal.proto.codec import Limits, Message, ProtocolError
from surreal.proto.wire import (
    INFERENCE_REQUESTS,
    NO_PARAMS,
    NO_VERSION,
    ErrorReply,
    InferReply,
    InferRequest,
    Params,
    supersedes,
)
from surreal.roles.common import StopFlag, count_errors, param_client
from surreal.roles.server import POLL_S, Server, endpoint, serve_main
from surreal.settings import Settings

if TYPE_CHECKING:
    import torch

log = logging.getLogger("surreal.inference")

CATCH_UP_TIMEOUT_S = 0.5  # a fetch made because an actor runs newer parameters: short, the batch is waiting


@dataclass
class Pending:
    identity: bytes
    request: InferRequest


def worker_device(setting: str) -> torch.device:
    """`inference.device`: auto is the GPU where torch sees one (one batched pass for many actors is what a GPU
    is for), else the CPU."""
    import torch

    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


class InferenceServer(Server):
    """A ROUTER of observation requests, batched under a deadline, and a `ParamClient` for the policy's weights.
    `policy` is what `make_policy` builds for the algorithm: its `act(obs)` gives (env actions, per-step record)."""

    def __init__(
        self,
        ctx: zmq.Context,
        cfg: ExperimentConfig,
        bind_address: str,
        params: ParamClient,
        index: int = 0,
        metrics: RoleMetrics | None = None,
    ) -> None:
        super().__init__(metrics or RoleMetrics("inference", index))
        self.cfg, self.params, self.index = cfg, params, index
        algo = get_algorithm(cfg.algo.name)
        obs_space, act_space = env_spaces(cfg)
        self.obs_dim = int(np.prod(obs_space.shape or (1,)))
        # Its own sampling stream, apart from every actor's (actor indices are 0..actors-1).
        self.policy = algo.make_policy(obs_space, act_space, algo_config(cfg), cfg.topology.actors + index)
        from surreal.algos.ppo.policy import PPOPolicy

        if not isinstance(self.policy, PPOPolicy):  # config/schema.py lets central mode serve PPO's policy alone
            raise ValueError(f"central inference serves PPO's policy, not {type(self.policy).__name__}")
        self.device = worker_device(cfg.inference.device)
        self.policy.to(self.device)
        self.version, self.incarnation = NO_VERSION, ""
        self.limits = accepting(Limits(), INFERENCE_REQUESTS)
        self.max_envs = cfg.inference.max_batch_envs
        self.max_wait_s = cfg.inference.max_wait_ms / 1000
        self.poll_s = cfg.inference.param_poll_ms / 1000
        self.pending: list[Pending] = []
        self.pending_envs = 0
        self.first_at = 0.0  # when the batch's first request came
        self.next_poll = 0.0
        self.batches = 0
        m = self.metrics
        self.m_requests = m.counter("inference_requests_total", "observation requests answered with actions")
        self.m_batches = m.counter("inference_batches_total", "forward passes run")
        self.m_envs = m.counter("inference_envs_total", "observations acted on")
        self.m_refused = m.counter("inference_refused_total", "requests answered no_params (no parameters yet)")
        self.m_version = m.gauge("inference_param_version", "parameter version the worker's policy runs")
        router = self.bind(ctx, zmq.ROUTER, bind_address, "inference", self.limits, sndhwm=1024, rcvhwm=1024)
        self.serve_requests(router, 1024, self.limits)

    def describe(self) -> str:
        return f"{self.cfg.algo.name} inference for {self.cfg.env.id} on {endpoint(self.router)} ({self.device})"

    def final_state(self) -> str:
        return f"{self.batches} batches at version {self.version}; " + super().final_state()

    def on_request(self, identity: bytes, message: Message) -> None:
        try:
            request = InferRequest.from_message(message, self.obs_dim)
        except ProtocolError as exc:
            self.drop(exc.reason, identity)
            return
        if not self.pending:
            self.first_at = time.monotonic()
        self.pending.append(Pending(identity, request))
        self.pending_envs += len(request.obs)

    def fetch(self, timeout_s: float) -> None:
        """Ask the ps for anything newer than the policy runs; load it."""
        reply = self.params.fetch(self.version, self.incarnation, timeout_s)
        if isinstance(reply, Params):
            self.policy.load_params(reply.arrays)
            self.version, self.incarnation = reply.blob.version, reply.blob.incarnation
            self.m_version.set(self.version)

    def serve_batch(self) -> None:
        """One forward pass over every pending request's observations; each actor gets its rows."""
        batch, self.pending, self.pending_envs = self.pending, [], 0
        newest = max(((p.request.version, p.request.incarnation) for p in batch), default=(NO_VERSION, ""))
        if newest[0] > NO_VERSION and supersedes(newest, (self.version, self.incarnation)):
            self.fetch(CATCH_UP_TIMEOUT_S)  # an actor was allowed newer parameters than these
        if self.version == NO_VERSION:
            for p in batch:
                self.m_refused.inc()
                self.reply(p.identity, ErrorReply(NO_PARAMS).to_message())
            return
        obs = np.concatenate([p.request.obs for p in batch])
        env_actions, record = self.policy.act(obs)
        self.batches += 1
        self.m_batches.inc()
        self.m_envs.inc(len(obs))
        start = 0
        for p in batch:
            rows = slice(start, start + len(p.request.obs))
            start = rows.stop
            reply = InferReply(
                p.request.request,
                self.version,
                self.incarnation,
                np.ascontiguousarray(env_actions[rows]),
                {k: np.ascontiguousarray(v[rows]) for k, v in record.items()},
            )
            self.reply(p.identity, reply.to_message())
            self.m_requests.inc()

    def step(self, now: float) -> None:
        """Serve the batch if it is full or its deadline passed; poll the ps when due."""
        if self.pending and (self.pending_envs >= self.max_envs or now - self.first_at >= self.max_wait_s):
            self.serve_batch()
        if now >= self.next_poll and not self.pending:
            self.fetch(self.cfg.actor.fetch_timeout_s if self.version == NO_VERSION else CATCH_UP_TIMEOUT_S)
            self.next_poll = time.monotonic() + self.poll_s

    def run(self, stop: StopFlag) -> None:
        while not stop:
            now = time.monotonic()
            if self.pending:
                wait = max(0.0, self.first_at + self.max_wait_s - now)
            else:
                wait = min(POLL_S, max(0.0, self.next_poll - now))
            self.poll_once(wait if self.pending_envs < self.max_envs else 0.0)
            self.step(time.monotonic())

    def close(self) -> None:
        self.params.close()
        super().close()


def main(args: argparse.Namespace) -> int:
    import torch

    del args

    def build(ctx: zmq.Context, settings: Settings, cfg: ExperimentConfig) -> InferenceServer:
        torch.set_num_threads(cfg.inference.torch_threads)
        metrics = RoleMetrics("inference", settings.index)
        dropped = ("param_replies_dropped_total", "malformed ps replies counted and dropped")
        on_error = count_errors(metrics, *dropped, timeouts="inference_param_fetch_timeouts_total")
        params = param_client(ctx, settings, cfg, on_error)
        address = settings.bind(settings.inference_port)
        return InferenceServer(ctx, cfg, address, params, settings.index, metrics)

    return serve_main("inference", build)
