"""`surreal role ps`: a parameter server replica.

    learner ──params (SUB)──► latest blob ──"newer than v?" (ROUTER)──► actors

`PsCore` is the replica's decisions without a socket or a clock: events in (a blob from the learner, an actor's
request, the time), answers out (`answer(peer, reply)`), and when it next needs the time (`next_event`). The ZMQ
shell `ParamServer` only translates: frames in, the held blob's frames forwarded as they came (no copy), replies out;
serial mode (roles/ports.py `InProcessParams`) and the simulator (surreal/sim/) drive the same core.

A blob replaces the held one when its version is higher, or when it comes from a new learner incarnation (a learner
resumed from a checkpoint restarts at the checkpoint's version); an actor gets the held blob when, by the same rule
(proto/wire.py `supersedes`), it would replace the one the actor runs. A request that carries `hold_ms` (an actor that
flow control holds: proto/wire.py `ParamsRequest`) and that the held blob does not answer (it does not supersede the
actor's, or is below the request's `wake_version`) is parked, up to `MAX_PARKED` of them and `MAX_PARKED_PER_PEER` from
one peer, so waiting actors do not poll; with every place taken, a peer holding fewer than another still gets one, that
other's newest request being answered as one the ps cannot hold (roles/parking.py). A parked request is answered by the
first blob that wakes it, or when its hold is over by "not modified" with the version held (so the actor knows how far
the learner got). With `wake_version`, a version is sent to the actors it frees, not to every waiting one: at 1,024
actors sharing a batch of 32 chunks, 32 blobs a version instead of 1,024. When the learner goes quiet (no blob for
`QUIET_FACTOR` of its usual intervals) every parked request the held blob supersedes gets it, whatever its wake version:
a learner that waits for data must not wait for the holds to end. Torch-free.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import zmq

from surreal.config import ExperimentConfig
from surreal.metrics import RoleMetrics
from surreal.proto.channels import accepting, frames_of, param_subscriber
from surreal.proto.codec import Limits, Message, ProtocolError
from surreal.proto.wire import (
    ERROR,
    NO_VERSION,
    NOT_MODIFIED,
    PARAMS,
    PARAMS_REQUEST,
    ErrorReply,
    NotModified,
    ParamsRequest,
    decode_params,
    supersedes,
)
from surreal.roles.parking import FairParking
from surreal.roles.server import Server, endpoint, serve_main
from surreal.settings import Settings

REQUEST_BURST = 256  # actor requests answered per poll before newer parameters are taken in
MAX_PARKED = 65_536  # held requests; beyond this a request is answered at once
# Held requests one peer may have parked. An actor has one in flight, two after a fetch timed out while its first
# was held; a peer flooding holds is answered at once past this, so it cannot fill the park and make every honest
# actor poll.
MAX_PARKED_PER_PEER = 4
QUIET_FACTOR = 3.0  # the learner is quiet after this many of its usual intervals between blobs ...
QUIET_MIN_S = 0.5  # ... and never sooner
INTERVAL_WEIGHT = 0.2  # of the newest interval in the moving average

Blob = TypeVar("Blob")  # the held blob as its driver keeps it: ZMQ frames, or a `Params`
Peer = Hashable  # a ROUTER identity, or the driver's name for an actor
# A parked request: (deadline, arrival, peer, the request), heap-ordered by deadline.
Parked = tuple[float, int, Peer, ParamsRequest]


class PsCore(Generic[Blob]):
    """One replica's decisions: the blob held, each request answered now or parked until a blob wakes it or its
    hold ends, and the quiet-learner sweep. `answer(peer, reply)` sends the held blob, a `NotModified` or an
    `ErrorReply`; `drop(reason, peer)` counts what was refused. Times are the driver's clock, in seconds."""

    def __init__(
        self,
        answer: Callable[[Peer, Blob | NotModified | ErrorReply], None],
        drop: Callable[[str, Peer | None], None],
    ) -> None:
        self.answer, self.drop = answer, drop
        self.blob: Blob | None = None
        self.version, self.incarnation = NO_VERSION, ""
        # A heap by deadline. An evicted request stays in it, marked in `_evicted` by its arrival number, until it
        # reaches the top, a blob sweeps the heap, or the marked ones outnumber the rest: eviction costs O(1) however
        # many are parked.
        self.parked: list[Parked] = []
        self._evicted: set[int] = set()
        self.parking: FairParking[Peer] = FairParking(MAX_PARKED, MAX_PARKED_PER_PEER)
        self._parked_of: dict[Peer, list[Parked]] = {}  # each peer's parked requests, oldest first
        self._arrivals = itertools.count()
        self.blobs_accepted = 0
        self.last_blob_at = 0.0
        self.blob_interval_s = 0.0  # a moving average of the time between the learner's blobs
        self.quiet_swept = 0  # blobs accepted when the parked requests were last answered for a quiet learner

    # -- events ---------------------------------------------------------------------------------------

    def on_blob(self, message: Message, blob: Blob, now: float) -> bool:
        """The learner's parameter message (`blob` is how the driver keeps it); True if it replaced the held one.
        Checked in full (sizes, dtypes, every metadata field) though only the version is used here: actors get
        it as it came."""
        try:
            meta = decode_params(message).blob
        except ProtocolError as exc:
            self.drop(exc.reason, None)
            return False
        if not supersedes((meta.version, meta.incarnation), (self.version, self.incarnation)):
            return False
        if self.blob is not None:
            self.blob_interval_s += INTERVAL_WEIGHT * (now - self.last_blob_at - self.blob_interval_s)
        self.blob, self.version, self.incarnation = blob, meta.version, meta.incarnation
        self.last_blob_at = now
        self.blobs_accepted += 1
        self._wake_parked(quiet=False)  # a blob just came
        return True

    def on_request(self, peer: Peer, message: Message, now: float) -> None:
        try:
            request = ParamsRequest.from_message(message)
        except ProtocolError as exc:
            self.drop(exc.reason, peer)
            self.answer(peer, ErrorReply(exc.reason))
            return
        superseded = supersedes((self.version, self.incarnation), request.held)
        newer = self.blob if superseded else None  # what is held, if the actor should have it
        if newer is not None and (not request.hold_ms or self._answers(request, self._quiet(now))):
            self.answer(peer, newer)
            return
        park, evict = self.parking.admit(peer) if request.hold_ms else (False, None)
        if not park:
            self._answer_unheld(peer, request)  # no room to park it
            return
        if evict is not None:  # every place taken: the peer holding the most gives up its newest
            evicted = self._parked_of[evict][-1]
            self._evicted.add(evicted[1])
            self._unpark(evicted)
            self._answer_unheld(evict, evicted[3])
        entry = (now + request.hold_ms / 1000, next(self._arrivals), peer, request)
        heapq.heappush(self.parked, entry)
        self._parked_of.setdefault(peer, []).append(entry)
        self.parking.add(peer)
        if len(self._evicted) > self.parking.total:  # compaction: the marked outnumber the live
            self.parked = [entry for entry in self.parked if entry[1] not in self._evicted]
            heapq.heapify(self.parked)
            self._evicted.clear()

    @property
    def held(self) -> int:
        """Requests parked now (evicted ones not counted)."""
        return self.parking.total

    @property
    def parked_by_peer(self) -> dict[Peer, int]:
        """Requests parked now, by peer."""
        return self.parking.counts

    def _answer_unheld(self, peer: Peer, request: ParamsRequest) -> None:
        """What a request the ps cannot hold gets: the held blob if the actor should have it, else "not modified"."""
        if self.blob is not None and supersedes((self.version, self.incarnation), request.held):
            self.answer(peer, self.blob)
        else:
            self.answer(peer, self._not_modified())

    def on_time(self, now: float) -> None:
        """Answer for a learner that went quiet, and the requests whose hold is over."""
        if self.held and self.quiet_swept != self.blobs_accepted and self._quiet(now):
            self.quiet_swept = self.blobs_accepted
            self._wake_parked(quiet=True)  # every actor behind the held blob gets it
        self._drop_evicted()
        while self.parked and self.parked[0][0] <= now:
            entry = heapq.heappop(self.parked)
            self._unpark(entry)
            self.answer(entry[2], self._not_modified())
            self._drop_evicted()

    def next_event(self) -> float | None:
        """When `on_time` has work: the next hold's end or, while requests are parked, when the learner would
        count as quiet; None while nothing is parked."""
        self._drop_evicted()
        if not self.parked:
            return None
        at = self.parked[0][0]
        if self.blob is not None and self.quiet_swept != self.blobs_accepted:
            at = min(at, self.last_blob_at + self._quiet_after_s())
        return at

    # -- rules ----------------------------------------------------------------------------------------

    def _quiet(self, now: float) -> bool:
        """No blob from the learner for QUIET_FACTOR of its usual intervals (QUIET_MIN_S at least)."""
        return self.blob is not None and now >= self.last_blob_at + self._quiet_after_s()

    def _quiet_after_s(self) -> float:
        return max(QUIET_MIN_S, QUIET_FACTOR * self.blob_interval_s)

    def _not_modified(self) -> NotModified:
        return NotModified(self.version, self.incarnation)

    def _wake_parked(self, quiet: bool) -> None:
        """Answer the parked requests the held blob answers (`_answers`) with it, in the order they came."""
        answered: list[Parked] = []
        waiting: list[Parked] = []
        for entry in self.parked:
            if entry[1] not in self._evicted:
                (answered if self._answers(entry[3], quiet) else waiting).append(entry)
        self._evicted.clear()  # the sweep leaves them out
        self.parked = waiting
        heapq.heapify(self.parked)
        if not answered:
            return
        assert self.blob is not None
        for entry in sorted(answered, key=lambda entry: entry[:2]):
            self._unpark(entry)
            self.answer(entry[2], self.blob)

    def _drop_evicted(self) -> None:
        """Pop the evicted requests off the heap's top (the next live one is then at its top)."""
        while self.parked and self.parked[0][1] in self._evicted:
            self._evicted.discard(heapq.heappop(self.parked)[1])

    def _unpark(self, entry: Parked) -> None:
        """`entry` leaves its place: answered, expired or evicted (an evicted one is also marked in `_evicted`)."""
        peer = entry[2]
        mine = self._parked_of[peer]
        mine.remove(entry)
        if not mine:
            del self._parked_of[peer]
        self.parking.remove(peer)

    def _answers(self, request: ParamsRequest, quiet: bool) -> bool:
        """Whether the held blob answers a held request: it supersedes what the actor runs and reaches its wake
        version, or the learner is `quiet` (a blob below an actor's wake version may still free it: one that
        says the learner learned from everything, with actors gone, `runtime/regimes/replay_ratio.py`)."""
        held = (self.version, self.incarnation)
        return supersedes(held, request.held) and (quiet or request.wakes(*held))


class ParamServer(Server):
    """The ZMQ shell: the learner's SUB and the actors' ROUTER into a `PsCore`, its answers out."""

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
        self.replica, self.learner_addr = replica, learner_addr
        self.params_limits = accepting(limits, frozenset({PARAMS}))
        self.listen(param_subscriber(ctx, learner_addr), self._on_params, None)  # unbounded: its queue is short
        router = self.bind(ctx, zmq.ROUTER, serve_bind, "ps", limits, sndhwm=256, rcvhwm=1024)
        self.serve_requests(router, REQUEST_BURST, accepting(limits, frozenset({PARAMS_REQUEST})), self._answer)
        self.core: PsCore[list[zmq.Frame]] = PsCore(self._answer, self.drop)
        m = self.metrics
        self.m_version = m.gauge("ps_param_version", "version of the parameters held")
        self.m_requests = m.counter("ps_requests_total", "actor requests answered", ["answer"])
        self.m_updates = m.counter("ps_updates_total", "parameter blobs accepted from the learner")
        self.m_blob_bytes = m.gauge("ps_blob_bytes", "size of the held parameter blob")
        self.m_parked = m.gauge("ps_parked_requests", "requests held until a newer blob or their hold ends")

    def poll_once(self, timeout_s: float) -> None:
        at = self.core.next_event()
        super().poll_once(timeout_s if at is None else max(0.0, min(timeout_s, at - time.monotonic())))
        self.core.on_time(time.monotonic())
        self.m_parked.set(self.core.held)

    def describe(self) -> str:
        return f"replica {self.replica} on {endpoint(self.router)}, learner {self.learner_addr}"

    def final_state(self) -> str:
        return f"at version {self.core.version}; {super().final_state()}"

    def _on_params(self, frames: list[zmq.Frame]) -> None:
        message = self.decoded(frames, self.params_limits)
        if message is not None and self.core.on_blob(message, frames, time.monotonic()):
            self.m_updates.inc()
            self.m_version.set(self.core.version)
            self.m_blob_bytes.set(sum(len(f) for f in frames))
            self.m_parked.set(self.core.held)

    def on_request(self, identity: bytes, message: Message) -> None:
        self.core.on_request(identity, message, time.monotonic())

    def _answer(self, peer: Peer, reply: list[zmq.Frame] | NotModified | ErrorReply) -> None:
        """Reply, counting the answer in ps_requests_total (labelled with the reply's kind) once it was sent."""
        assert isinstance(peer, bytes)
        if isinstance(reply, NotModified | ErrorReply):
            frames, kind = frames_of(reply.to_message()), NOT_MODIFIED if isinstance(reply, NotModified) else ERROR
        else:
            frames, kind = reply, PARAMS
        if self.reply_frames(peer, frames):
            self.m_requests.labels(answer=kind).inc()


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
