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
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zmq

from surreal.algos import get_algorithm
from surreal.config import ExperimentConfig, algo_config
from surreal.envs import env_spaces
from surreal.metrics import RoleMetrics
from surreal.proto.channels import ParamClient, ParamFetch, accepting, frames_of, send
from surreal.proto.codec import Limits, Message, ProtocolError
from surreal.proto.wire import (
    INFERENCE_REQUESTS,
    NO_PARAMS,
    NO_VERSION,
    ErrorReply,
    InferReply,
    InferRequest,
    NotModified,
    Params,
    ParamsRequest,
    supersedes,
)
from surreal.roles.common import count_errors, param_client
from surreal.roles.loop import Alarm, Loop
from surreal.roles.server import Server, endpoint, serve_main
from surreal.settings import Settings

if TYPE_CHECKING:
    import torch

log = logging.getLogger("surreal.inference")

CATCH_UP_TIMEOUT_S = 0.5  # a fetch made because an actor runs newer parameters: short, the batch is waiting

Peer = Hashable  # a ROUTER identity, or the simulator's name for an actor
Act = Callable[[np.ndarray], tuple[np.ndarray, dict[str, np.ndarray]]]  # the policy's `act`: (env actions, record)


@dataclass
class Pending:
    peer: Peer
    request: InferRequest


class InferenceCore:
    """One worker's decisions without a socket, a clock or torch: requests batched until they hold `max_envs`
    observations or `max_wait_s` has passed since the batch's first; a due batch whose actors run newer parameters
    than the worker holds waits for the ps (asked at once, up to CATCH_UP_TIMEOUT_S); then `act` runs once over the
    batch and each peer gets its rows (`answer`), or `NO_PARAMS` before any parameters. While no batch waits the ps
    is asked every `poll_s`; a request out keeps `ParamFetch`'s timing (its deadline, asked again after a broken
    connection or when no replica took it). `ask` sends a request to a ps replica (False: none took it); `load`
    takes a blob the policy runs from then on. Times are the driver's clock, in seconds."""

    def __init__(
        self,
        act: Act,
        answer: Callable[[Peer, InferReply | ErrorReply], None],
        ask: Callable[[ParamsRequest], bool],
        load: Callable[[Params], None],
        max_envs: int,
        max_wait_s: float,
        poll_s: float,
        fetch_timeout_s: float,
    ) -> None:
        self.act, self.answer, self.ask, self.load = act, answer, ask, load
        self.max_envs, self.max_wait_s = max_envs, max_wait_s
        self.poll_s, self.fetch_timeout_s = poll_s, fetch_timeout_s
        self.version, self.incarnation = NO_VERSION, ""
        self.pending: list[Pending] = []
        self.pending_envs = 0
        self.first_at = 0.0  # when the batch's first request came
        self.fetch: ParamFetch | None = None
        self.next_poll = 0.0
        self.caught_up = False  # the due batch asked the ps for its actors' newer parameters already
        self.batches = self.fetch_timeouts = 0

    @classmethod
    def of(
        cls,
        cfg: ExperimentConfig,
        act: Act,
        answer: Callable[[Peer, InferReply | ErrorReply], None],
        ask: Callable[[ParamsRequest], bool],
        load: Callable[[Params], None],
    ) -> InferenceCore:
        i = cfg.inference
        return cls(
            act,
            answer,
            ask,
            load,
            i.max_batch_envs,
            i.max_wait_ms / 1000,
            i.param_poll_ms / 1000,
            cfg.actor.fetch_timeout_s,
        )

    # -- events -------------------------------------------------------------------------------------------

    def on_request(self, peer: Peer, request: InferRequest, now: float) -> None:
        if not self.pending:
            self.first_at = now
        self.pending.append(Pending(peer, request))
        self.pending_envs += len(request.obs)
        self.on_time(now)

    def on_reply(self, reply: Params | NotModified, now: float) -> None:
        """A ps's answer (to the request out, or a late one): a blob newer than the one held is loaded."""
        self.fetch = None
        if isinstance(reply, Params) and supersedes((reply.blob.version, reply.blob.incarnation), self.held):
            self.version, self.incarnation = reply.blob.version, reply.blob.incarnation
            self.load(reply)
        self.on_time(now)

    def disconnected(self, now: float) -> None:
        if self.fetch is not None:
            self.fetch.broken()
        self.on_time(now)

    def on_time(self, now: float) -> None:
        """Serve the batch if it is due (full, or its wait over) and its parameters are; ask the ps when due."""
        fetch = self.fetch
        if fetch is not None and now >= fetch.deadline:
            self.fetch, fetch = None, None
            self.fetch_timeouts += 1
        if fetch is not None:
            if fetch.retry_at is not None and now >= fetch.retry_at:
                fetch.retry()
            if fetch.send:
                fetch.asked(self.ask(fetch.request), now)
        if self.pending and (self.pending_envs >= self.max_envs or now >= self.first_at + self.max_wait_s):
            newest = max((p.request.version, p.request.incarnation) for p in self.pending)
            if self.fetch is None and not self.caught_up and newest[0] > NO_VERSION and supersedes(newest, self.held):
                self.caught_up = True  # an actor was allowed newer parameters than these: the batch waits for them
                self._ask(CATCH_UP_TIMEOUT_S, now)
            if self.fetch is None:
                self._serve()
        elif not self.pending and self.fetch is None and now >= self.next_poll:
            self._ask(self.fetch_timeout_s if self.version == NO_VERSION else CATCH_UP_TIMEOUT_S, now)
            self.next_poll = now + self.poll_s

    def next_event(self) -> float | None:
        """When `on_time` has work next."""
        if self.fetch is not None:
            return self.fetch.due
        return self.first_at + self.max_wait_s if self.pending else self.next_poll

    # -- rules ------------------------------------------------------------------------------------------

    @property
    def held(self) -> tuple[int, str]:
        return self.version, self.incarnation

    def _ask(self, timeout_s: float, now: float) -> None:
        self.fetch = ParamFetch.of(ParamsRequest(self.version, self.incarnation), timeout_s, now)
        self.fetch.asked(self.ask(self.fetch.request), now)

    def _serve(self) -> None:
        """One forward pass over every pending request's observations; each actor gets its rows."""
        batch, self.pending, self.pending_envs, self.caught_up = self.pending, [], 0, False
        if self.version == NO_VERSION:
            for p in batch:
                self.answer(p.peer, ErrorReply(NO_PARAMS))
            return
        env_actions, record = self.act(np.concatenate([p.request.obs for p in batch]))
        self.batches += 1
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
            self.answer(p.peer, reply)


class InferenceDriver:
    """`InferenceCore` on a loop (roles/loop.py): what its host hands it, and its next event on an `Alarm`. The
    ZMQ shell and the simulator's worker run this same driver."""

    def __init__(self, core: InferenceCore, loop: Loop) -> None:
        self.core, self.loop = core, loop
        self.alarm = Alarm(loop, self._on_time)

    def start(self) -> None:
        self._on_time()

    def on_request(self, peer: Peer, request: InferRequest) -> None:
        self.core.on_request(peer, request, self.loop.now())
        self.alarm.set(self.core.next_event())

    def on_reply(self, reply: Params | NotModified) -> None:
        self.core.on_reply(reply, self.loop.now())
        self.alarm.set(self.core.next_event())

    def on_disconnect(self) -> None:
        self.core.disconnected(self.loop.now())
        self.alarm.set(self.core.next_event())

    def _on_time(self) -> None:
        self.core.on_time(self.loop.now())
        self.alarm.set(self.core.next_event())


def worker_device(setting: str) -> torch.device:
    """`inference.device`: auto is the GPU where torch sees one (one batched pass for many actors is what a GPU
    is for), else the CPU."""
    import torch

    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


class InferenceServer(Server):
    """The ZMQ shell: a ROUTER of observation requests and a `ParamClient`'s DEALER to the ps, both on the server's
    loop, into an `InferenceDriver`; the policy is what `make_policy` builds for the algorithm (its `act(obs)` gives
    the env actions and the per-step record)."""

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
        self.limits = accepting(Limits(), INFERENCE_REQUESTS)
        m = self.metrics
        self.m_requests = m.counter("inference_requests_total", "observation requests answered with actions")
        self.m_batches = m.counter("inference_batches_total", "forward passes run")
        self.m_envs = m.counter("inference_envs_total", "observations acted on")
        self.m_refused = m.counter("inference_refused_total", "requests answered no_params (no parameters yet)")
        self.m_version = m.gauge("inference_param_version", "parameter version the worker's policy runs")
        router = self.bind(ctx, zmq.ROUTER, bind_address, "inference", self.limits, sndhwm=1024, rcvhwm=1024)
        self.serve_requests(router, 1024, self.limits)
        self.core = InferenceCore.of(cfg, self._act, self._answer, self._ask, self._load)
        self.driver = InferenceDriver(self.core, self.loop)
        self.loop.listen(params.sock, self._on_params)
        self.loop.listen(params.monitor, lambda frames: self.driver.on_disconnect())
        self.driver.start()

    @property
    def batches(self) -> int:
        return self.core.batches

    def describe(self) -> str:
        return f"{self.cfg.algo.name} inference for {self.cfg.env.id} on {endpoint(self.router)} ({self.device})"

    def final_state(self) -> str:
        return f"{self.core.batches} batches at version {self.core.version}; " + super().final_state()

    def on_request(self, identity: bytes, message: Message) -> None:
        try:
            request = InferRequest.from_message(message, self.obs_dim)
        except ProtocolError as exc:
            self.drop(exc.reason, identity)
            return
        self.driver.on_request(identity, request)

    def _on_params(self, frames: list[zmq.Frame]) -> None:
        reply = self.params.decode(frames)
        if reply is not None:
            self.driver.on_reply(reply)

    def _ask(self, request: ParamsRequest) -> bool:
        self.params.disconnects()  # those before this request took none of it
        return send(self.params.sock, frames_of(request.to_message()), 0.0)

    def _load(self, params: Params) -> None:
        self.policy.load_params(params.arrays)
        self.m_version.set(params.blob.version)

    def _act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        self.m_batches.inc()
        self.m_envs.inc(len(obs))
        return self.policy.act(obs)

    def _answer(self, peer: Peer, reply: InferReply | ErrorReply) -> None:
        assert isinstance(peer, bytes)
        self.reply(peer, reply.to_message())
        (self.m_refused if isinstance(reply, ErrorReply) else self.m_requests).inc()

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
        params = param_client(ctx, settings, cfg, count_errors(metrics, *dropped))
        address = settings.bind(settings.inference_port)
        return InferenceServer(ctx, cfg, address, params, settings.index, metrics)

    return serve_main("inference", build)
