"""The ports a role core talks to, one per path of the dataflow:

    experience out   actor -> replay        ActorPorts      actor.ActorSockets (ExperienceSender) | InProcessActorPorts
    parameters in    ps -> actor            ActorPorts      actor.ActorSockets (ParamClient)      | InProcessActorPorts
    batches in       replay -> learner      BatchesIn       channels.SampleClient                 | InProcessReplay
    parameters out   learner -> ps          ParamsOut       channels.ParamPublisher               | InProcessParams
    parameters in    ps -> evaluator        ParamsIn        channels.ParamClient                  | InProcessParams

The ZMQ ports are proto/channels.py's clients, which put proto/wire.py's typed content on the sockets; the
in-process ones here drive the replay's and the ps's own cores (`ReplayCore`, `PsCore`) in memory, so serial
mode and the tests run the very cores the processes run (the learner's process reads its batches through
`channels.BackgroundBatches`, a `SampleClient` on a thread of its own). An actor's ports take messages without
waiting and its driver is told what comes back (roles/actor.py `ActorPorts`). A port never raises for what a peer
sent: bad content is counted by reason (`on_error`) and dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from surreal.proto.codec import Message
from surreal.proto.wire import (
    BlobMeta,
    FifoReply,
    NotModified,
    Params,
    ParamsRequest,
    PriorityUpdate,
    SampleReply,
    SampleRequest,
    TransitionReply,
    encode_params,
)
from surreal.replay.shard import ReplayShard
from surreal.roles.ps import PsCore
from surreal.roles.replay import ReplayCore

if TYPE_CHECKING:
    from surreal.roles.actor import ActorDriver


class BatchesIn(Protocol):
    @property
    def shards(self) -> int: ...

    def next(self, batch_size: int, timeout_s: float) -> SampleReply | None:
        """The next reply holding data, or None after `timeout_s`."""
        ...

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None: ...

    @property
    def outstanding(self) -> int:
        """Sample requests out and not answered yet."""
        ...

    def stop_asking(self) -> None:
        """A stopping learner's first call: no more sample requests (its driver waits for those `outstanding`)."""
        ...

    def drain(self, timeout_s: float) -> list[SampleReply]:
        """A stopping learner's last call: ask no more, and return the replies the shards sent (those still on
        their way get up to `timeout_s`)."""
        ...


class ParamsOut(Protocol):
    def publish(self, blob: BlobMeta, arrays: dict[str, Any]) -> None: ...

    def service(self) -> object:
        """Called from the learner's loop: answer late subscribers, re-send the latest blob."""
        ...


class ParamsIn(Protocol):
    def fetch(
        self, version: int, incarnation: str, timeout_s: float, hold_s: float = 0.0, wake_version: int = 0
    ) -> Params | NotModified | None:
        """A blob that supersedes (`version`, `incarnation`), "not modified" (with what the ps holds), or None
        when no answer came in time. `hold_s`: wait up to that long for a newer blob than the one held, of
        `wake_version` or later (a long poll, `ParamsRequest`)."""
        ...


# -- in process -----------------------------------------------------------------------------------------

LEARNER = "learner"  # the in-process ports' one peer at the replay's core
ACTOR = "actor"  # ... and at the ps's core


def _never_refused(reason: str, peer: object) -> None:
    raise AssertionError(f"an in-process core refused its own driver's message ({reason}, {peer})")


class InProcessReplay:
    """Experience out and batches in over the replay role's own core (roles/replay.py `ReplayCore`) on one shard in
    memory, never full (the shard evicts). The learner keeps one request at the core, answered by the first `next`
    at which the shard can answer it; no time passes in one thread, so it waits for data, never for its deadline.
    `ready_at`: as for `SampleClient`."""

    shards = 1

    def __init__(self, shard: ReplayShard, ready_at: int | None = None) -> None:
        self.shard = shard
        self.ready_at = ready_at
        self.core = ReplayCore(shard, self._answered, _never_refused)
        self.asked = False
        self.reply: SampleReply | None = None

    def offer(self, message: Message) -> bool:
        """An actor's experience message, stored at once (the shard evicts: never full)."""
        self.core.on_experience(message)
        return True

    def next(self, batch_size: int, timeout_s: float = 0.0) -> SampleReply | None:
        del timeout_s
        if not self.asked:
            self.core.on_request(LEARNER, SampleRequest(batch_size, self.ready_at).to_message(), 0.0)
            self.asked = True
        self.core.serve(0.0)
        reply, self.reply = self.reply, None
        return reply

    def _answered(self, peer: object, reply: object) -> None:
        assert isinstance(reply, FifoReply | TransitionReply), reply  # no deadline passes, nothing is refused
        self.asked, self.reply = False, reply

    outstanding = 0  # `next` hands a reply over the moment the core answers: none is ever on its way

    def stop_asking(self) -> None:
        pass

    def drain(self, timeout_s: float = 0.0) -> list[SampleReply]:
        del timeout_s
        return []

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        del shard
        self.core.on_request(LEARNER, PriorityUpdate(slots, ids, priorities).to_message(), 0.0)


def _copied(arrays: dict[str, Any]) -> dict[str, Any]:
    return {k: _copied(v) if isinstance(v, dict) else np.array(v, copy=True) for k, v in arrays.items()}


class InProcessParams:
    """Parameters out and in over the ps role's own core (roles/ps.py `PsCore`) in memory. One thread: a hold could
    only end at the learner's next step, which cannot come while an actor waits, so a fetch asks without one and
    the core answers at once (the held blob if it supersedes the actor's, whatever `wake_version` says; a ps whose
    learner is quiet answers the same)."""

    def __init__(self) -> None:
        self.core: PsCore[Params] = PsCore(self._answered, _never_refused)
        self.reply: Params | NotModified | None = None

    @property
    def latest(self) -> Params | None:
        return self.core.blob

    def publish(self, blob: BlobMeta, arrays: dict[str, Any]) -> None:
        """Holds a copy, as a ps holds the bytes it received: a learner's arrays may be views of its live
        weights (CPU tensors' `.numpy()`), which would otherwise reach actors that fetch later as they are
        then, not as published."""
        params = Params(blob, _copied(arrays))
        self.core.on_blob(encode_params(params), params, 0.0)

    def service(self) -> None:
        pass  # nobody subscribes late in one process

    def fetch(
        self, version: int, incarnation: str, timeout_s: float = 0.0, hold_s: float = 0.0, wake_version: int = 0
    ) -> Params | NotModified:
        del timeout_s, hold_s, wake_version
        self.core.on_request(ACTOR, ParamsRequest(version, incarnation).to_message(), 0.0)
        reply, self.reply = self.reply, None
        assert reply is not None, "a request without a hold is answered at once"
        return reply

    def _answered(self, peer: object, reply: object) -> None:
        assert isinstance(reply, Params | NotModified), reply
        self.reply = reply


class InProcessActorPorts:
    """An actor's ports in one process: chunks into an `InProcessReplay`, requests answered at once by an
    `InProcessParams` (without their hold: one thread), the answer handed to the driver (`attach`) there and then."""

    def __init__(self, replay: InProcessReplay, params: InProcessParams) -> None:
        self.replay, self.params = replay, params
        self.on_reply: Callable[[Params | NotModified], None] | None = None

    def attach(self, driver: ActorDriver) -> ActorDriver:
        self.on_reply = driver.on_reply
        return driver

    def send_chunk(self, message: Message) -> bool:
        return self.replay.offer(message)

    def ask_ps(self, message: Message) -> bool:
        request = ParamsRequest.from_message(message)
        reply = self.params.fetch(request.version, request.incarnation)
        if self.on_reply is not None:
            self.on_reply(reply)
        return True

    def watch_room(self) -> None:
        pass  # never refused
