"""`surreal role ps`: a parameter server replica.

    learner ──params (SUB)──► latest blob ──"newer than v?" (ROUTER)──► actors

Holds the latest parameter message exactly as the learner framed it (weights and normalizer statistics
are opaque arrays here) and answers each actor with "not modified" or the blob, forwarding the stored
frames without copying them. Replicas are independent, so thousands of actors never touch the learner.

A blob replaces the held one when its version is higher, or when it comes from a new learner
incarnation (a learner resumed from a checkpoint restarts at the checkpoint's version). Torch-free.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import zmq

from surreal.metrics import RoleMetrics
from surreal.proto.channels import (
    ERROR,
    NOT_MODIFIED,
    PARAMS,
    PARAMS_REQUEST,
    ParamSubscriber,
    make_socket,
    send,
)
from surreal.proto.codec import Limits, ProtocolError, decode, encode
from surreal.roles.common import StopFlag, load_config, setup_logging
from surreal.settings import Settings

REPLY_TIMEOUT_S = 1.0


class ParamServer:
    def __init__(
        self,
        ctx: zmq.Context,
        learner_addr: str,
        serve_bind: str,
        replica: int = 0,
        limits: Limits | None = None,
        metrics: RoleMetrics | None = None,
    ) -> None:
        limits = limits or Limits()
        self.limits = limits
        self.params_limits = Limits(limits.max_frames, limits.max_bytes, kinds=frozenset({PARAMS}))
        self.request_limits = Limits(limits.max_frames, limits.max_bytes, kinds=frozenset({PARAMS_REQUEST}))
        self.subscriber = ParamSubscriber(ctx, learner_addr, limits)
        self.router = make_socket(ctx, zmq.ROUTER, limits, sndhwm=256, rcvhwm=1024)
        self.router.bind(serve_bind)
        self.poller = zmq.Poller()
        self.poller.register(self.subscriber.sock, zmq.POLLIN)
        self.poller.register(self.router, zmq.POLLIN)
        self.frames: list[zmq.Frame] | None = None
        self.version = -1
        self.incarnation = ""
        self.metrics = metrics or RoleMetrics("ps", replica)
        m = self.metrics
        self.m_version = m.gauge("ps_param_version", "version of the parameters held")
        self.m_requests = m.counter("ps_requests_total", "actor requests answered", ["answer"])
        self.m_updates = m.counter("ps_updates_total", "parameter blobs accepted from the learner")
        self.m_bad = m.counter("messages_dropped_total", "malformed messages counted and dropped", ["reason"])
        self.m_blob_bytes = m.gauge("ps_blob_bytes", "size of the held parameter blob")
        self.bad_messages = 0

    def poll_once(self, timeout_s: float) -> None:
        events = dict(self.poller.poll(math.ceil(timeout_s * 1000)))
        if self.subscriber.sock in events:
            while True:
                try:
                    frames = self.subscriber.sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                self._on_params(frames)
        if self.router in events:
            for _ in range(256):
                try:
                    frames = self.router.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                self._on_request(frames)

    def run(self, stop: StopFlag) -> None:
        while not stop:
            self.poll_once(0.1)

    def close(self) -> None:
        self.subscriber.close()
        self.router.close(0)
        self.metrics.close()

    def _drop(self, reason: str) -> None:
        self.bad_messages += 1
        self.m_bad.labels(reason=reason).inc()

    def _on_params(self, frames: list[zmq.Frame]) -> None:
        try:
            # Checked in full (sizes, dtypes) though only the metadata is read: actors get these frames as-is.
            meta = decode(frames, self.params_limits).meta
        except ProtocolError as exc:
            self._drop(exc.reason)
            return
        version, incarnation = meta.get("version"), meta.get("incarnation", "")
        if not isinstance(version, int) or isinstance(version, bool) or not isinstance(incarnation, str):
            self._drop("bad_params_meta")
            return
        if version > self.version or incarnation != self.incarnation:
            self.frames, self.version, self.incarnation = frames, version, incarnation
            self.m_updates.inc()
            self.m_version.set(version)
            self.m_blob_bytes.set(sum(len(f) for f in frames))

    def _on_request(self, frames: list[zmq.Frame]) -> None:
        if len(frames) < 2:
            self._drop("no_envelope")
            return
        identity = frames[0].bytes
        try:
            message = decode(frames[1:], self.request_limits)
        except ProtocolError as exc:
            self._drop(exc.reason)
            self._reply(identity, encode(ERROR, {"reason": exc.reason}), "error")
            return
        have, incarnation = message.meta.get("version"), message.meta.get("incarnation")
        if not isinstance(have, int) or not isinstance(incarnation, str):
            self._drop("bad_request")
            self._reply(identity, encode(ERROR, {"reason": "bad_request"}), "error")
            return
        if self.frames is None or (have == self.version and incarnation == self.incarnation):
            meta: dict[str, Any] = {"version": self.version, "incarnation": self.incarnation}
            self._reply(identity, encode(NOT_MODIFIED, meta), "not_modified")
        else:
            self._reply(identity, self.frames, "params")

    def _reply(self, identity: bytes, frames: list[Any], answer: str) -> None:
        if send(self.router, [identity, *frames], REPLY_TIMEOUT_S):
            self.m_requests.labels(answer=answer).inc()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # everything comes from SURREAL_* variables and the experiment config


def main(args: argparse.Namespace) -> int:
    del args
    settings = Settings.from_env()
    cfg = load_config()
    log = setup_logging("ps", settings.index)
    stop = StopFlag().install()
    ctx = zmq.Context()
    server = ParamServer(
        ctx,
        settings.learner_addr,
        settings.bind(settings.ps_port),
        replica=settings.index,
        limits=Limits(max_bytes=cfg.ps.max_message_bytes),
    )
    port = server.metrics.serve(settings.bind_host, settings.metrics_port)
    log.info(
        "serving replica %d on :%d, learner %s, metrics :%s",
        settings.index,
        settings.ps_port,
        settings.learner_addr,
        port,
    )
    try:
        server.run(stop)
    finally:
        server.close()
        ctx.term()
    log.info("stopped at version %d; %d malformed messages dropped", server.version, server.bad_messages)
    return 0
