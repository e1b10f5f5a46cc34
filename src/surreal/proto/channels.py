"""The four paths of the dataflow over ZMQ: one class per side of each socket, typed content in and out.

    actor  --experience (PUSH -> PULL, round-robin over shards)-->  replay
    learner <-sample / priorities (DEALER <-> ROUTER, pipelined)--> replay
    learner --params (XPUB -> SUB, late joiners get the latest)-->  ps
    actor  <-"newer than v?" (DEALER <-> ROUTER, optionally held)--> ps
    actor  <-observations / actions (DEALER <-> ROUTER, failover)--> inference worker (topology.inference=central)

The client classes here are the ZMQ implementations of the ports a role core talks to (roles/ports.py):
`ExperienceSender` (experience out), `SampleClient` (batches in; `BackgroundBatches` runs one on a thread of its
own), `ParamPublisher` (parameters out), `ParamClient` (parameters in). Each encodes and decodes with
proto/wire.py's encoders and decoders, owns its sockets and states its failure behaviour: every wait has a
timeout, every queue a high-water mark, peers that go away are reconnected to by ZMQ, and requests lost with a
dead peer are re-issued. A client never raises for what a peer sent: bad content is counted by reason
(`on_error`) and dropped. Servers (the roles) own the bind side, with the socket helpers here.

Every socket between roles is made by `bind_socket` (servers) or `connect_socket` (clients): with a `WireContext`
that holds the experiment's keys (proto/curve.py) they speak CURVE, and a peer without the keys is refused at the
handshake; with a plain `zmq.Context` (or no keys), plaintext.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import zmq

from surreal.proto.codec import Limits, Message, ProtocolError, decode, encode
from surreal.proto.curve import HandshakeWatch, secure_client, secure_server
from surreal.proto.wire import (
    INFERENCE_REPLIES,
    PARAMS,
    PARAMS_REPLIES,
    SAMPLE_REPLIES,
    BlobMeta,
    Chunk,
    EmptyReply,
    FifoReply,
    InferReply,
    InferRequest,
    NotModified,
    Params,
    ParamsRequest,
    PriorityUpdate,
    ReplyLayout,
    SampleReply,
    SampleRequest,
    decode_params_reply,
    decode_sample_reply,
    encode_chunk,
    encode_params,
)

ErrorSink = Callable[[str], None]  # a client's count of replies it dropped, by reason (the role exports it)
FETCH_TIMEOUT = "fetch_timeout"  # what ParamClient tells its error sink when no ps answered in time
INFERENCE_TIMEOUT = "inference_timeout"  # what InferenceClient tells its error sink when a worker did not answer
NOT_READY = "inference_not_ready"  # ... when a worker answered that it holds no parameters yet
NOT_READY_PAUSE_S = 0.05  # before asking a worker that holds no parameters again


def ignore_error(reason: str) -> None:
    del reason


RefusalSink = Callable[[str, str], None]  # a server's count of handshakes it refused, by socket name and reason


def ignore_refusal(socket: str, reason: str) -> None:
    del socket, reason


RECONNECT_IVL_MS = 100
SEND_POLL_S = 0.05  # `send`'s wait for room between tries
STOP_POLL_S = 0.05  # how often a stoppable wait (`ParamClient` with `stopped`) looks at the stop flag
RECONNECT_IVL_MAX_MS = 2000
PUBLISH_HWM = 4  # blobs the learner's PUB queues per ps (a newer one supersedes them)
SUBSCRIBE_HWM = 4  # blobs a ps's SUB queues (`param_subscriber`)
REPUBLISH_S = 1.0  # how often the learner sends its latest blob again (`ParamPublisher`)
EXPERIENCE_HWM = 4  # chunks an actor's PUSH queues per shard (`ExperienceSender`)
LOST_AFTER_S = 5.0  # a shard that answered nothing this long while asked lost the requests (`ShardRequests`)


def frames_of(message: Message) -> list[Any]:
    """The frames of a typed message (proto/codec.py's envelope)."""
    return encode(message.kind, message.meta, message.arrays)


def accepting(limits: Limits, kinds: frozenset[str]) -> Limits:
    """`limits`' frame and byte bounds for a socket that takes only `kinds`: a message of another kind
    is refused by `decode` before its arrays are looked at."""
    return replace(limits, kinds=kinds)


def make_socket(
    ctx: zmq.Context, kind: int, limits: Limits | None = None, sndhwm: int = 16, rcvhwm: int = 16
) -> zmq.Socket:
    """A socket with the options every Surreal socket shares: no linger on close, bounded queues,
    quick bounded reconnects.

    `limits` sets ZMQ_MAXMSGSIZE, so libzmq refuses an oversized frame before it is buffered and
    disconnects the peer that sent it. Pass it only for a *bound* server socket: a connecting socket cut
    off that way is not reconnected by libzmq, so clients (which talk to their own servers) check sizes in
    `decode` instead."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, sndhwm)
    sock.setsockopt(zmq.RCVHWM, rcvhwm)
    sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
    if limits is not None:
        sock.setsockopt(zmq.MAXMSGSIZE, limits.max_bytes)
    return sock


def bind_socket(
    ctx: zmq.Context, kind: int, address: str, limits: Limits | None = None, sndhwm: int = 16, rcvhwm: int = 16
) -> zmq.Socket:
    """A server's socket: `make_socket`'s options (`limits` included), a CURVE server when `ctx` holds the keys
    (proto/curve.py), bound to `address`."""
    sock = make_socket(ctx, kind, limits, sndhwm=sndhwm, rcvhwm=rcvhwm)
    secure_server(ctx, sock)
    sock.bind(address)
    return sock


def client_socket(
    ctx: zmq.Context, kind: int, sndhwm: int = 16, rcvhwm: int = 16, immediate: bool = False
) -> zmq.Socket:
    """A client's socket, not yet connected: `make_socket`'s options, a CURVE client when `ctx` holds the keys.
    `immediate`: ZMQ_IMMEDIATE, messages queue only on connections whose handshake completed. For a client that
    watches its connections (a monitor made before it connects, so that no event is missed); else `connect_socket`."""
    sock = make_socket(ctx, kind, sndhwm=sndhwm, rcvhwm=rcvhwm)
    if immediate:
        sock.setsockopt(zmq.IMMEDIATE, 1)
    secure_client(ctx, sock)
    return sock


def connect_socket(
    ctx: zmq.Context,
    kind: int,
    addresses: Sequence[str],
    sndhwm: int = 16,
    rcvhwm: int = 16,
    immediate: bool = False,
) -> zmq.Socket:
    """`client_socket` connected to every address."""
    sock = client_socket(ctx, kind, sndhwm=sndhwm, rcvhwm=rcvhwm, immediate=immediate)
    for address in addresses:
        sock.connect(address)
    return sock


def send(sock: zmq.Socket, frames: Sequence[Any], timeout_s: float) -> bool:
    """Send one multipart message without copying array frames; False if the socket stayed full
    (high-water mark reached or no connected peer) for `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            sock.poll(math.ceil(min(remaining, SEND_POLL_S) * 1000), zmq.POLLOUT)


def recv_frames(sock: zmq.Socket, timeout_s: float) -> list[zmq.Frame] | None:
    """Receive one multipart message as zero-copy frames, or None after `timeout_s`."""
    if sock.poll(math.ceil(max(timeout_s, 0.0) * 1000), zmq.POLLIN) == 0:
        return None
    return sock.recv_multipart(copy=False)


# ----------------------------------------------------------------------------------------------------
# Experience: actor PUSH -> replay PULL


class ExperienceSender:
    """Actor side. One PUSH socket connected to every replay shard: ZMQ spreads messages round-robin
    over the shards that are connected and not full (ZMQ_IMMEDIATE keeps messages off shards that are
    down). `send` returning False is backpressure: every shard is full or unreachable."""

    def __init__(self, ctx: zmq.Context, addresses: Sequence[str], hwm: int = EXPERIENCE_HWM) -> None:
        self.sock = connect_socket(ctx, zmq.PUSH, addresses, sndhwm=hwm, immediate=True)

    def send(self, chunk: Chunk, incarnation: str, timeout_s: float) -> bool:
        """Ship one chunk made with learner `incarnation`'s parameters; False: backpressure for `timeout_s`."""
        return self.offer(encode_chunk(chunk, incarnation), timeout_s)

    def offer(self, message: Message, timeout_s: float = 0.0) -> bool:
        """Ship one experience message; False: backpressure for `timeout_s` (0: no room now)."""
        return send(self.sock, frames_of(message), timeout_s)

    def close(self, linger_s: float = 0.0) -> None:
        """`linger_s` > 0: messages still queued get that long to reach a shard (a preempted actor's last
        chunks); 0 drops them."""
        self.sock.close(int(linger_s * 1000))


# ----------------------------------------------------------------------------------------------------
# Sampling: learner DEALER <-> replay ROUTER


@dataclass
class ShardRequests:
    """The sample requests a learner keeps out at one shard, without the socket (the simulator keeps the same
    books): `prefetch` deep, and all presumed lost once the shard answered nothing for `lost_after_s` while some
    were out (it restarted with them), so they are asked again."""

    prefetch: int
    lost_after_s: float
    inflight: int = 0
    last_sent: float = 0.0
    last_reply: float = 0.0

    def wanted(self, now: float) -> int:
        """How many requests to send now."""
        if self.inflight and now - max(self.last_reply, self.last_sent) > self.lost_after_s:
            self.inflight = 0  # the shard went away with our requests
        return self.prefetch - self.inflight

    def sent(self, now: float) -> None:
        self.inflight += 1
        self.last_sent = now

    def replied(self, now: float) -> None:
        self.inflight = max(self.inflight - 1, 0)
        self.last_reply = now

    def disconnected(self) -> None:
        """The connection to the shard broke: the requests out went with it (a restarted shard holds none)."""
        self.inflight = 0


def reply_with_data(
    message: Message,
    shard: int,
    on_error: ErrorSink,
    max_steps_per_unit: int | None = None,
    layout: ReplyLayout | None = None,
) -> SampleReply | None:
    """A shard's reply as the learner takes it: decoded and checked (`decode_sample_reply`, the hop's one check),
    malformed and error replies counted by reason and dropped, empty ones (progress only) and FIFO replies left
    with no chunk skipped; None for all of those."""
    try:
        reply = decode_sample_reply(message, shard, max_steps_per_unit, layout)
    except ProtocolError as exc:
        on_error(exc.reason)
        return None
    if isinstance(reply, FifoReply):
        for reason in reply.refused:  # chunks left out of a reply whose others are kept
            on_error(reason)
        return reply if reply.chunks else None
    return None if isinstance(reply, EmptyReply) else reply


class SampleClient:
    """Learner side. One DEALER per shard (priority updates must go back to the shard that owns the
    slot), each kept `prefetch` requests deep so a batch is already waiting when the learner asks.

    A replay answers every request within its defer window (with data, or empty), so a shard that has
    answered nothing for `lost_after_s` while requests were out is presumed restarted: its in-flight
    count is reset and the requests re-issued (`ShardRequests`); a connection that breaks (the shard's process
    ended, seen by a monitor socket) does that at once, so a restarted shard is asked again as soon as it is back,
    not after `lost_after_s` in which its chunks go stale. Replies are data whatever request they answer, so a
    late reply is used, never dropped."""

    def __init__(
        self,
        ctx: zmq.Context,
        addresses: Sequence[str],
        limits: Limits,
        prefetch: int = 2,
        lost_after_s: float = LOST_AFTER_S,
        on_error: ErrorSink = ignore_error,
        ready_at: int | None = None,
        max_steps_per_unit: int | None = None,
        layout: ReplyLayout | None = None,
        episodes: bool = True,
    ) -> None:
        """`ready_at`: ask the shards to answer once they hold this many transitions (`SampleRequest`);
        `max_steps_per_unit`: the algorithm's bound on a chunk's env steps (`decode_chunk`); `layout`: what a
        transition reply must hold (`decode_sample_reply`); `episodes`: whether replies hand over the finished
        episodes (False: a learner group's rank after the first, `SampleRequest`)."""
        self.ready_at = ready_at
        self.episodes = episodes
        self.max_steps_per_unit = max_steps_per_unit
        self.layout = layout
        self.limits = accepting(limits, SAMPLE_REPLIES)
        self._shards: list[tuple[zmq.Socket, ShardRequests]] = []
        self._monitors: dict[zmq.Socket, ShardRequests] = {}
        self.poller = zmq.Poller()
        for address in addresses:
            sock = client_socket(ctx, zmq.DEALER, immediate=True)
            books = ShardRequests(prefetch, lost_after_s)
            monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            self._monitors[monitor] = books
            self.poller.register(monitor, zmq.POLLIN)
            sock.connect(address)
            self._shards.append((sock, books))
            self.poller.register(sock, zmq.POLLIN)
        self.on_error = on_error

    @property
    def shards(self) -> int:
        return len(self._shards)

    @property
    def outstanding(self) -> int:
        """Requests sent and not answered yet (none once presumed lost)."""
        return sum(books.inflight for _, books in self._shards)

    def _top_up(self, batch_size: int) -> None:
        now = time.monotonic()
        request = frames_of(SampleRequest(int(batch_size), self.ready_at, self.episodes).to_message())
        for sock, books in self._shards:
            for _ in range(books.wanted(now)):
                if not send(sock, request, 0.0):
                    break  # shard not connected right now; try again on the next call
                books.sent(now)

    def next(self, batch_size: int, timeout_s: float, ask: bool = True) -> SampleReply | None:
        """The next reply holding data from any shard, or None after `timeout_s` (`reply_with_data` says what is
        skipped). `ask`: keep every shard `prefetch` requests deep first (a draining learner asks no more)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if ask:
                self._top_up(batch_size)
            remaining = deadline - time.monotonic()
            ready = dict(self.poller.poll(math.ceil(remaining * 1000) if remaining > 0 else 0))
            for monitor, books in self._monitors.items():
                if monitor in ready:
                    monitor.recv_multipart()  # the one event it reports: a disconnect
                    books.disconnected()
            for index, (sock, books) in enumerate(self._shards):
                if sock not in ready:
                    continue
                frames = sock.recv_multipart(copy=False)
                books.replied(time.monotonic())
                try:
                    message = decode(frames, self.limits)
                except ProtocolError as exc:
                    self.on_error(exc.reason)
                    continue
                reply = reply_with_data(message, index, self.on_error, self.max_steps_per_unit, self.layout)
                if reply is not None:
                    return reply
            if time.monotonic() >= deadline:
                return None

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        """Fire-and-forget: new priorities for slots of `shard` (lost if its socket stays full for 1 s)."""
        send(self._shards[shard][0], frames_of(PriorityUpdate(slots, ids, priorities).to_message()), 1.0)

    def close(self) -> None:
        for sock, _ in self._shards:
            sock.disable_monitor()
            sock.close(0)
        for monitor in self._monitors:
            monitor.close(0)


class BackgroundBatches:
    """A `BatchesIn` whose receiving and decoding run on a thread of their own, so the next batch arrives while
    the learner updates. The thread owns the ZMQ port (sockets are not shared between threads): priority
    updates reach it through a queue, and it keeps at most `depth` replies waiting (then it stops asking the
    shards, which hold the data: backpressure, not an unbounded queue). What a peer sends is counted and dropped
    by the port; an exception that still ends the thread (the process itself broken) is raised again by `next`,
    so the learner ends with it instead of waiting for batches that will never come."""

    def __init__(self, make_port: Callable[[], SampleClient], shards: int, batch_size: int, depth: int) -> None:
        self.shards = shards
        self.batch_size = batch_size
        self._replies: queue.Queue[SampleReply] = queue.Queue(maxsize=depth)
        self._priorities: queue.SimpleQueue[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._draining = threading.Event()  # ask no more; the thread sets `_drained` once nothing is out
        self._drained = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(make_port,), name="batches-in", daemon=True)
        self._thread.start()

    def _run(self, make_port: Callable[[], SampleClient]) -> None:
        try:
            self._serve(make_port())
        except BaseException as exc:  # re-raised on the learner's thread by `next`
            self._failure = exc
            raise

    def _serve(self, port: SampleClient) -> None:
        try:
            while not self._stop.is_set():
                while not self._priorities.empty():
                    port.send_priorities(*self._priorities.get())
                draining = self._draining.is_set()
                reply = port.next(self.batch_size, timeout_s=0.05, ask=not draining)
                if draining and reply is None and not port.outstanding:
                    self._drained.set()
                while reply is not None and not self._stop.is_set():
                    try:
                        self._replies.put(reply, timeout=0.05)
                        reply = None
                    except queue.Full:
                        continue
        finally:
            port.close()

    def next(self, batch_size: int, timeout_s: float) -> SampleReply | None:
        del batch_size  # fixed when the thread started: a learner asks for one batch size
        if self._failure is not None:
            raise RuntimeError("the thread receiving sample replies failed") from self._failure
        try:
            return self._replies.get(timeout=timeout_s) if timeout_s > 0 else self._replies.get_nowait()
        except queue.Empty:
            return None

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        self._priorities.put((shard, slots, ids, priorities))

    @property
    def outstanding(self) -> int:
        """1 while requests may be out (the thread does not say how many), 0 once asking stopped and every reply
        came (it is queued for `next` or `drain`) or the thread ended."""
        return int(self._thread.is_alive() and not self._drained.is_set())

    def stop_asking(self) -> None:
        self._draining.set()

    def drain(self, timeout_s: float) -> list[SampleReply]:
        """Ask the shards no more, wait up to `timeout_s` for the replies to the requests still out, and return
        every reply not taken yet: a stopping learner checkpoints their data instead of losing it."""
        self._draining.set()
        deadline = time.monotonic() + timeout_s
        taken: list[SampleReply] = []
        while self._thread.is_alive() and time.monotonic() < deadline:
            if self._drained.wait(0.01) and self._replies.empty():
                break
            while not self._replies.empty():
                taken.append(self._replies.get_nowait())
        while not self._replies.empty():
            taken.append(self._replies.get_nowait())
        return taken

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# ----------------------------------------------------------------------------------------------------
# Parameters in: learner XPUB -> ps SUB


class ParamPublisher:
    """Learner side. XPUB with verbose subscriptions: every (re)subscribing ps announces itself, and the
    publisher answers by re-sending the latest blob, so a ps that joins late (or restarts) is current at
    once instead of waiting for the next update. PUB drops a message for a subscriber whose queue is full,
    so the latest blob is also re-sent every REPUBLISH_S (the ps ignores a version it already holds):
    the last blob of a run, marked done, must not be lost. `service()` is called from the learner's loop; it also
    tells `on_refused` of the handshakes the socket refused (peers without the keys: proto/curve.py)."""

    def __init__(self, ctx: zmq.Context, bind: str, on_refused: RefusalSink = ignore_refusal) -> None:
        self.sock = bind_socket(ctx, zmq.XPUB, bind, sndhwm=PUBLISH_HWM)
        self.sock.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.watch = HandshakeWatch.of(self.sock, PARAMS)  # its refusals name it by the kind it carries
        self.on_refused = on_refused
        self.latest: list[Any] | None = None
        self._sent_at = 0.0

    def publish(self, blob: BlobMeta, arrays: dict[str, Any]) -> None:
        self.latest = frames_of(encode_params(Params(blob, arrays)))
        self._send_latest()

    def _send_latest(self) -> None:
        if self.latest is not None:
            send(self.sock, self.latest, 0.0)  # PUB never blocks
            self._sent_at = time.monotonic()

    def service(self) -> int:
        """Answer new subscriptions (and the republish timer) with the latest blob; returns how many
        subscriptions arrived."""
        joined = 0
        while self.sock.poll(0, zmq.POLLIN):
            event = self.sock.recv()
            if event[:1] == b"\x01":
                joined += 1
        if joined or time.monotonic() - self._sent_at >= REPUBLISH_S:
            self._send_latest()
        if self.watch is not None:
            for reason in self.watch.reasons():
                self.on_refused(self.watch.name, reason)
        return joined

    def close(self) -> None:
        self.sock.close(0)
        if self.watch is not None:
            self.watch.close()


def param_subscriber(ctx: zmq.Context, address: str) -> zmq.Socket:
    """ps side: SUB to the learner, keeping only a few blobs queued (a newer one supersedes them)."""
    sock = connect_socket(ctx, zmq.SUB, [address], rcvhwm=SUBSCRIBE_HWM)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    return sock


# ----------------------------------------------------------------------------------------------------
# Parameters out: actor DEALER <-> ps ROUTER


@dataclass
class ParamFetch:
    """One "newer than v?" request out at the ps replicas, without the socket (an actor's core keeps the same books,
    roles/actor.py): it is over at `deadline` (the timeout plus its hold), and its request must go (again) while
    `send` says so: at first, after a replica's connection broke (the request may have gone with it: `broken`), and
    `SEND_POLL_S` after no replica took it (none connected: `asked(False)`)."""

    request: ParamsRequest
    deadline: float
    send: bool = True
    retry_at: float | None = None

    @classmethod
    def of(cls, request: ParamsRequest, timeout_s: float, now: float) -> ParamFetch:
        return cls(request, now + timeout_s + request.hold_ms / 1000)

    def asked(self, ok: bool, now: float) -> None:
        """The request went (`ok`), or no replica could take it now."""
        self.send, self.retry_at = False, None if ok else now + SEND_POLL_S

    def broken(self) -> None:
        self.send = True

    def retry(self) -> None:
        """`retry_at` came: the request goes again."""
        self.send, self.retry_at = True, None

    @property
    def due(self) -> float:
        """When the next thing happens to it: the retry, or its end."""
        return self.deadline if self.retry_at is None else min(self.deadline, self.retry_at)


class ParamClient:
    """Actor side. One DEALER connected to every ps replica (requests spread round-robin). `fetch` asks
    "anything newer than (version, incarnation)?" (proto/wire.py `supersedes`) and waits up to `timeout_s`; a
    reply that arrives after its request timed out is still a valid answer and is taken by the next `fetch`.

    With `hold_s` the request is a long poll: a ps holding nothing newer answers when a newer blob arrives or
    `hold_s` has passed, whichever is first (the wait grows by `hold_s`); with `wake_version` as well, only a blob
    of that version or later answers before the hold ends (proto/wire.py `ParamsRequest`). An actor held by flow
    control asks this way, so a thousand waiting actors cost the ps one request each per hold or per version
    that frees them, not one every few milliseconds; a ps that predates holds answers at once. A
    replica's connection that breaks while a request waits (a monitor socket sees it) may have taken the request
    with it: it is sent again at once, to the replicas still up, rather than waited for until the timeout.

    `stopped`: the process's stop flag (a role's SIGTERM). A signal does not end a ZMQ poll (pyzmq polls again for
    the time left), and a held request waits up to its hold (30 s at most) plus `timeout_s`: with `stopped` the
    wait is polled in slices of `STOP_POLL_S` and ends, answered by nothing, as soon as it says so."""

    def __init__(
        self,
        ctx: zmq.Context,
        addresses: Sequence[str],
        limits: Limits,
        on_error: ErrorSink = ignore_error,
        stopped: Callable[[], bool] | None = None,
    ) -> None:
        self.stopped = stopped
        self.limits = accepting(limits, PARAMS_REPLIES)
        self.sock = client_socket(ctx, zmq.DEALER, immediate=True)
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        for address in addresses:
            self.sock.connect(address)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.poller.register(self.monitor, zmq.POLLIN)
        self.on_error = on_error

    def disconnects(self) -> int:
        """How many replica connections broke since the last call (the monitor's events, taken)."""
        events = 0
        while self.monitor.poll(0):
            self.monitor.recv_multipart()
            events += 1
        return events

    def fetch(
        self, version: int, incarnation: str, timeout_s: float, hold_s: float = 0.0, wake_version: int = 0
    ) -> Params | NotModified | None:
        """A blob that supersedes (`version`, `incarnation`), the ps's "not modified" (saying what it holds), or
        None when no answer came in time (counted as FETCH_TIMEOUT) or the process stops (not counted)."""
        hold_ms = math.ceil(hold_s * 1000) if hold_s > 0 else 0
        request = ParamsRequest(int(version), incarnation, hold_ms, wake_version)
        fetch, frames = ParamFetch.of(request, timeout_s, time.monotonic()), frames_of(request.to_message())
        self.disconnects()  # those before this request took none of it
        stopping = self.stopped or (lambda: False)
        while (now := time.monotonic()) < fetch.deadline and not stopping():
            if fetch.retry_at is not None and now >= fetch.retry_at:
                fetch.retry()
            if fetch.send:
                fetch.asked(send(self.sock, frames, 0.0), now)
            wait_s = max(0.0, fetch.due - time.monotonic())
            ready = dict(self.poller.poll(math.ceil(min(wait_s, STOP_POLL_S if self.stopped else wait_s) * 1000)))
            if self.monitor in ready and self.disconnects():
                fetch.broken()  # perhaps lost with that replica: asked again of the others
            if self.sock in ready and (reply := self.decode(self.sock.recv_multipart(copy=False))) is not None:
                return reply
        if not stopping():
            self.on_error(FETCH_TIMEOUT)
        return None

    def decode(self, frames: Sequence[Any]) -> Params | NotModified | None:
        """A ps's reply, or None (counted by reason) for a malformed one or an error reply."""
        try:
            return decode_params_reply(decode(frames, self.limits))
        except ProtocolError as exc:
            self.on_error(exc.reason)
            return None

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(0)
        self.sock.close(0)


# ----------------------------------------------------------------------------------------------------
# Central inference: actor DEALER <-> inference worker ROUTER


@dataclass
class InferenceTurns:
    """Which inference worker an actor asks, under which request id, without the sockets (the simulator's actors
    keep the same books): actor i starts at worker i mod N and stays there while it answers; a request with no reply
    within its timeout goes to the next worker (round robin) under a new id, so a late reply to the old one is
    dropped; a worker that holds no parameters yet is asked again after NOT_READY_PAUSE_S."""

    workers: int
    turn: int
    request_id: int = 0
    failovers: int = 0

    @classmethod
    def of(cls, actor: int, workers: int) -> InferenceTurns:
        return cls(workers, actor % workers)

    def next_request(self) -> int:
        self.request_id += 1
        return self.request_id

    def failed(self) -> None:
        """No reply in time: the next worker's turn."""
        self.turn = (self.turn + 1) % self.workers
        self.failovers += 1


class InferenceClient:
    """Actor side of `topology.inference=central`. One DEALER per inference worker (ZMQ_IMMEDIATE: nothing queues
    for a worker that is down), so the actor chooses where each request goes: actor i starts at worker i mod N and
    stays there while it answers; a worker that gives no reply within `timeout_s` is left for the next one (round
    robin), and the request is asked again there under a new id (a late reply to the old id is dropped). A worker
    without parameters yet answers `NO_PARAMS`: asked again after a pause. `act` returns only a reply of the request's
    shape, or None once `stopped()` says the actor is stopping and a try failed: no step is taken without actions."""

    def __init__(
        self,
        ctx: zmq.Context,
        addresses: Sequence[str],
        actor: int,
        timeout_s: float,
        on_error: ErrorSink = ignore_error,
    ) -> None:
        if not addresses:
            raise ValueError("central inference needs at least one inference worker address")
        self.limits = accepting(Limits(), INFERENCE_REPLIES)
        self.socks = [connect_socket(ctx, zmq.DEALER, [a], sndhwm=4, rcvhwm=4, immediate=True) for a in addresses]
        self.actor, self.timeout_s, self.on_error = actor, timeout_s, on_error
        self.turns = InferenceTurns.of(actor, len(addresses))

    @property
    def failovers(self) -> int:
        return self.turns.failovers

    def act(
        self, obs: np.ndarray, version: int, incarnation: str, stopped: Callable[[], bool] = lambda: False
    ) -> InferReply | None:
        while True:
            reply = self._try(obs, version, incarnation)
            if reply is not None:
                return reply
            if stopped():
                return None

    def _try(self, obs: np.ndarray, version: int, incarnation: str) -> InferReply | None:
        """One request to the current worker; None (and the next worker's turn, unless it was only not ready)."""
        request_id = self.turns.next_request()
        request = InferRequest(self.actor, request_id, version, incarnation, obs)
        sock = self.socks[self.turns.turn]
        deadline = time.monotonic() + self.timeout_s
        if send(sock, frames_of(request.to_message()), self.timeout_s):
            while (remaining := deadline - time.monotonic()) > 0:
                frames = recv_frames(sock, remaining)
                if frames is None:
                    break
                try:
                    reply = InferReply.from_message(decode(frames, self.limits), len(obs))
                except ProtocolError as exc:
                    if exc.reason == "error_reply":  # the worker holds no parameters yet
                        self.on_error(NOT_READY)
                        time.sleep(NOT_READY_PAUSE_S)
                        return None
                    self.on_error(exc.reason)
                    continue
                if reply.request == request_id:
                    return reply
        self.on_error(INFERENCE_TIMEOUT)
        self.turns.failed()
        return None

    def close(self) -> None:
        for sock in self.socks:
            sock.close(0)
