"""What the replay, ps and inference servers share: a loop over their sockets (roles/loop.py `ZmqLoop`, whose timers
they use too), counted drops, ROUTER replies, and the shell that runs one as a role.

A server registers each socket it reads with a handler and a burst bound: one poll drains up to that
many messages from a socket before the next socket gets its turn, so a flood on one (experience) cannot
starve another (sample requests). A malformed message is counted by reason in `messages_dropped_total`
and dropped; the loop keeps serving. A server binds its sockets with `bind`: with the experiment's keys they
speak CURVE (proto/curve.py), and each handshake one refuses (a peer without the keys) is counted by socket and
reason in `handshakes_refused_total`, read from the socket's monitor by this same loop. Torch-free, like the
servers built on it.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import zmq

from surreal.config import ExperimentConfig, config_from_env
from surreal.metrics import RoleMetrics
from surreal.proto.channels import bind_socket, frames_of, send
from surreal.proto.codec import Limits, Message, ProtocolError, decode
from surreal.proto.curve import REFUSED_HELP, REFUSED_METRIC, HandshakeWatch, WireContext
from surreal.proto.wire import ErrorReply
from surreal.roles.common import EXIT_STOPPED, StopFlag, setup_logging
from surreal.roles.loop import Handler, ZmqLoop
from surreal.runtime.limits import raise_open_files
from surreal.settings import Settings

log = logging.getLogger("surreal.server")

REPLY_TIMEOUT_S = 1.0  # a requester that does not take its reply by then loses it; the server moves on
POLL_S = 0.1  # how often `run` looks at the stop flag when nothing arrives

ErrorAnswer = Callable[[bytes, ErrorReply], None]


class Server:
    """A poll loop over registered (socket, handler, burst) entries, plus one ROUTER that takes requests
    and carries the replies. Subclasses register their sockets in `__init__` and implement `on_request`
    and `describe`."""

    router: zmq.Socket  # set by `serve_requests`

    def __init__(self, metrics: RoleMetrics) -> None:
        self.metrics = metrics
        self.m_bad = metrics.counter("messages_dropped_total", "malformed messages counted and dropped", ["reason"])
        self.bad_messages = 0
        self.logged_reasons: set[str] = set()
        self.m_refused = metrics.counter(REFUSED_METRIC, REFUSED_HELP, ["socket", "reason"])
        self.refused = 0
        self.logged_refusals: set[str] = set()
        self.loop = ZmqLoop()  # its sockets and timers (roles/loop.py)
        self._sockets: list[zmq.Socket] = []

    # -- registration ---------------------------------------------------------------------------------

    def listen(self, sock: zmq.Socket, handler: Handler, burst: int | None) -> None:
        """Hand each message arriving on `sock` to `handler`, at most `burst` per poll (None: until the
        socket is empty). Sockets are served in the order they were registered."""
        self.loop.listen(sock, handler, burst)
        self._sockets.append(sock)

    def bind(
        self,
        ctx: zmq.Context,
        kind: int,
        address: str,
        name: str,
        limits: Limits | None = None,
        sndhwm: int = 16,
        rcvhwm: int = 16,
    ) -> zmq.Socket:
        """A socket of this server bound to `address` (proto/channels.py `bind_socket`), whose refused handshakes
        are counted under `name`. Register it with `listen` or `serve_requests` as any other."""
        sock = bind_socket(ctx, kind, address, limits, sndhwm=sndhwm, rcvhwm=rcvhwm)
        watch = HandshakeWatch.of(sock, name)
        if watch is not None:
            self.listen(watch.monitor, lambda frames: self._on_handshake_event(watch, frames), None)
        return sock

    def serve_requests(
        self, router: zmq.Socket, burst: int, limits: Limits, answer_error: ErrorAnswer | None = None
    ) -> None:
        """Take requests on `router` and reply there: each reaches `on_request` without its envelope, decoded under
        `limits`; a malformed one is dropped and, with `answer_error`, answered with its reason (`decoded`)."""
        self.router, self.request_limits, self.answer_error = router, limits, answer_error
        self.listen(router, self._unwrap, burst)

    # -- the loop -------------------------------------------------------------------------------------

    def poll_once(self, timeout_s: float) -> None:
        """One turn of its loop: what arrived within `timeout_s` (or by the next timer) handled, due timers run."""
        self.loop.turn(timeout_s)

    def run(self, stop: StopFlag) -> None:
        while not stop:
            self.poll_once(POLL_S)

    def close(self) -> None:
        for sock in self._sockets:
            sock.close(0)
        self.metrics.close()

    # -- what handlers use ----------------------------------------------------------------------------

    def drop(self, reason: str, peer: Hashable | None = None) -> None:
        """Count a message refused for `reason`; the caller then forgets it. The first of each reason is
        logged with its peer (a ROUTER identity; a PUSH peer is anonymous), the rest only counted."""
        self.bad_messages += 1
        self.m_bad.labels(reason=reason).inc()
        if reason not in self.logged_reasons:
            self.logged_reasons.add(reason)
            who = f"peer {peer.hex()}" if isinstance(peer, bytes) and peer else "an anonymous peer"
            log.warning(
                "dropped a message from %s: %s (further ones are counted in messages_dropped_total)", who, reason
            )

    def _on_handshake_event(self, watch: HandshakeWatch, frames: list[zmq.Frame]) -> None:
        reason = watch.reason_of(frames)
        if reason is None:
            return
        self.refused += 1
        self.m_refused.labels(socket=watch.name, reason=reason).inc()
        if reason not in self.logged_refusals:
            self.logged_refusals.add(reason)
            log.warning(
                "refused a connection to %s (%s) at the handshake: %s (further ones are counted in "
                "handshakes_refused_total)",
                watch.name,
                watch.endpoint,
                reason,
            )

    def decoded(self, frames: list[zmq.Frame], limits: Limits, peer: bytes | None = None) -> Message | None:
        """`frames` decoded under `limits`, or None once a malformed message was counted and dropped; a requester
        `peer` is then answered with an `ErrorReply` when the server answers errors (`serve_requests`)."""
        try:
            return decode(frames, limits)
        except ProtocolError as exc:
            self.drop(exc.reason, peer)
            if peer is not None and self.answer_error is not None:
                self.answer_error(peer, ErrorReply(exc.reason))
            return None

    def reply(self, identity: bytes, message: Message) -> bool:
        """Frame and send one typed reply (proto/wire.py) to `identity`; False if it could not be sent within
        REPLY_TIMEOUT_S."""
        return self.reply_frames(identity, frames_of(message))

    def reply_frames(self, identity: bytes, frames: Sequence[Any]) -> bool:
        """Send already framed message parts to `identity` (the ps forwards a stored blob as it came)."""
        return send(self.router, [identity, *frames], REPLY_TIMEOUT_S)

    # -- what a subclass supplies ---------------------------------------------------------------------

    def on_request(self, identity: bytes, message: Message) -> None:
        """One request from `identity`, decoded under the limits given to `serve_requests`."""
        raise NotImplementedError

    def describe(self) -> str:
        """What the start-up log line says this server serves."""
        raise NotImplementedError

    def final_state(self) -> str:
        """What the shut-down log line reports; a server adds its own state in front."""
        refused = f", {self.refused} connections refused at the handshake" if self.refused else ""
        return f"{self.bad_messages} malformed messages dropped{refused}"

    def _unwrap(self, frames: list[zmq.Frame]) -> None:
        if len(frames) < 2:
            self.drop("no_envelope")
            return
        identity = frames[0].bytes
        message = self.decoded(frames[1:], self.request_limits, identity)
        if message is not None:
            self.on_request(identity, message)


def endpoint(sock: zmq.Socket) -> str:
    """The address `sock` was last bound or connected to, as ZMQ resolved it (the port of a `:0` bind)."""
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def serve_main(role: str, build: Callable[[zmq.Context, Settings, ExperimentConfig], Server]) -> int:
    """The shell of a server role: settings and config from the environment, logging, SIGTERM/SIGINT,
    /metrics, then `build(ctx, settings, cfg).run` until stopped, closing the sockets however it ends."""
    settings = Settings.from_env()
    cfg = config_from_env()
    log = setup_logging(role, settings.index)
    raise_open_files(log)  # one descriptor per connected actor
    stop = StopFlag().install()
    ctx = WireContext(settings.curve_keys)
    server = build(ctx, settings, cfg)
    port = server.metrics.serve(settings.bind_host, settings.metrics_port)
    wire = "CURVE" if ctx.keys is not None else "plaintext (no SURREAL_CURVE_DIR)"
    log.info("serving %s over %s, metrics :%s", server.describe(), wire, port)
    try:
        server.run(stop)
    finally:
        server.close()
        ctx.term()
    name = signal.Signals(stop.signal).name if stop.signal else "a signal"
    log.info("stopped by %s (a preemption, drain or shutdown): %s", name, server.final_state())
    return EXIT_STOPPED
