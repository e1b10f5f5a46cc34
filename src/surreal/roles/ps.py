"""`surreal role ps`: a parameter server replica.

    learner ──params (SUB)──► latest blob ──"newer than v?" (ROUTER)──► actors

Holds the latest parameter message exactly as the learner framed it (weights and normalizer statistics
are opaque arrays here) and answers each actor with "not modified" or the blob, forwarding the stored
frames without copying them. Replicas are independent, so thousands of actors never touch the learner.

A blob replaces the held one when its version is higher, or when it comes from a new learner
incarnation (a learner resumed from a checkpoint restarts at the checkpoint's version); an actor gets the held
blob when, by the same rule (proto/wire.py `supersedes`), it would replace the one the actor runs. A request
that the held blob does not supersede and that carries `hold_ms` (an actor that flow control holds:
proto/wire.py `ParamsRequest`) is parked, up to `MAX_PARKED` of them, and answered with the next blob or "not
modified" when its hold is over, so waiting actors do not poll. Torch-free.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import time
from typing import Any

import zmq

from surreal.config import ExperimentConfig
from surreal.metrics import RoleMetrics
from surreal.proto.channels import accepting, frames_of, make_socket, param_subscriber
from surreal.proto.codec import Limits, ProtocolError, decode
from surreal.proto.wire import (
    ERROR,
    NOT_MODIFIED,
    PARAMS,
    PARAMS_REQUEST,
    ErrorReply,
    NotModified,
    ParamsRequest,
    decode_params,
    supersedes,
)
from surreal.roles.server import Server, endpoint, serve_main
from surreal.settings import Settings

REQUEST_BURST = 256  # actor requests answered per poll before newer parameters are taken in
MAX_PARKED = 65_536  # held requests; beyond this a request is answered at once


class ParamServer(Server):
    def __init__(
        self,
        ctx: zmq.Context,
        learner_addr: str,
        serve_bind: str,
        replica: int = 0,
        limits: Limits | None = None,
        metrics: RoleMetrics | None = None,
    ) -> None:
        super().__init__(metrics or RoleMetrics("ps", replica))
        limits = limits or Limits()
        self.limits = limits
        self.replica, self.learner_addr = replica, learner_addr
        self.params_limits = accepting(limits, frozenset({PARAMS}))
        self.request_limits = accepting(limits, frozenset({PARAMS_REQUEST}))
        self.listen(
            param_subscriber(ctx, learner_addr), self._on_params, None
        )  # unbounded: its queue is short (rcvhwm 4)
        router = make_socket(ctx, zmq.ROUTER, limits, sndhwm=256, rcvhwm=1024)
        router.bind(serve_bind)
        self.serve_requests(router, REQUEST_BURST)
        self.frames: list[zmq.Frame] | None = None
        self.version = -1
        self.incarnation = ""
        m = self.metrics
        self.m_version = m.gauge("ps_param_version", "version of the parameters held")
        self.m_requests = m.counter("ps_requests_total", "actor requests answered", ["answer"])
        self.m_updates = m.counter("ps_updates_total", "parameter blobs accepted from the learner")
        self.m_blob_bytes = m.gauge("ps_blob_bytes", "size of the held parameter blob")
        self.m_parked = m.gauge("ps_parked_requests", "requests held until a newer blob or their hold ends")
        # (deadline, arrival, identity, the (version, incarnation) the actor runs): a heap
        self.parked: list[tuple[float, int, bytes, tuple[int, str]]] = []
        self._arrivals = itertools.count()

    def poll_once(self, timeout_s: float) -> None:
        super().poll_once(min(timeout_s, self._until_next_deadline()))
        now = time.monotonic()
        while self.parked and self.parked[0][0] <= now:
            identity = heapq.heappop(self.parked)[2]
            self._answer(identity, self._not_modified(), NOT_MODIFIED)
        self.m_parked.set(len(self.parked))

    def _until_next_deadline(self) -> float:
        return max(0.0, self.parked[0][0] - time.monotonic()) if self.parked else 3600.0

    def _not_modified(self) -> list[Any]:
        return frames_of(NotModified(self.version, self.incarnation).to_message())

    def describe(self) -> str:
        return f"replica {self.replica} on {endpoint(self.router)}, learner {self.learner_addr}"

    def final_state(self) -> str:
        return f"at version {self.version}; {super().final_state()}"

    def _on_params(self, frames: list[zmq.Frame]) -> None:
        try:
            # Checked in full (sizes, dtypes, every metadata field) though only the version is used here:
            # actors get these frames as they are.
            blob = decode_params(decode(frames, self.params_limits)).blob
        except ProtocolError as exc:
            self.drop(exc.reason)
            return
        version, incarnation = blob.version, blob.incarnation
        if supersedes((version, incarnation), (self.version, self.incarnation)):
            self.frames, self.version, self.incarnation = frames, version, incarnation
            self.m_updates.inc()
            self.m_version.set(version)
            self.m_blob_bytes.set(sum(len(f) for f in frames))
            # Answered: those whose blob this one supersedes (all of them but behind a lagging replica).
            answered: list[tuple[float, int, bytes, tuple[int, str]]] = []
            waiting: list[tuple[float, int, bytes, tuple[int, str]]] = []
            for entry in self.parked:
                (answered if supersedes((version, incarnation), entry[3]) else waiting).append(entry)
            self.parked = waiting
            heapq.heapify(self.parked)
            for _, _, identity, _ in sorted(answered):
                self._answer(identity, frames, PARAMS)
            self.m_parked.set(len(self.parked))

    def on_request(self, identity: bytes, frames: list[zmq.Frame]) -> None:
        try:
            request = ParamsRequest.from_message(decode(frames, self.request_limits))
        except ProtocolError as exc:
            self.drop(exc.reason, identity)
            self._answer(identity, frames_of(ErrorReply(exc.reason).to_message()), ERROR)
            return
        if self.frames is None or not supersedes((self.version, self.incarnation), request.held):
            if request.hold_ms and len(self.parked) < MAX_PARKED:
                deadline = time.monotonic() + request.hold_ms / 1000
                heapq.heappush(self.parked, (deadline, next(self._arrivals), identity, request.held))
                return
            self._answer(identity, self._not_modified(), NOT_MODIFIED)
        else:
            self._answer(identity, self.frames, PARAMS)

    def _answer(self, identity: bytes, frames: list[Any], answer: str) -> None:
        """Reply, counting the answer in ps_requests_total (labelled with the reply's kind) once it was sent."""
        if self.reply_frames(identity, frames):
            self.m_requests.labels(answer=answer).inc()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # everything comes from SURREAL_* variables and the experiment config


def main(args: argparse.Namespace) -> int:
    del args

    def build(ctx: zmq.Context, settings: Settings, cfg: ExperimentConfig) -> ParamServer:
        return ParamServer(
            ctx,
            settings.connect(settings.learner_addr),
            settings.bind(settings.ps_port),
            replica=settings.index,
            limits=Limits(max_bytes=cfg.ps.max_message_bytes),
        )

    return serve_main("ps", build)
