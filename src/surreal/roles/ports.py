"""The four ports a role core talks to, one per path of the dataflow:

    experience out   actor -> replay        ExperienceOut   channels.ExperienceSender | InProcessReplay
    batches in       replay -> learner      BatchesIn       channels.SampleClient     | InProcessReplay
    parameters out   learner -> ps          ParamsOut       channels.ParamPublisher   | InProcessParams
    parameters in    ps -> actor            ParamsIn        channels.ParamClient      | InProcessParams

The ZMQ ports are proto/channels.py's clients, which put proto/wire.py's typed content on the sockets; the
in-process ones here hold a replay shard and the latest blob in memory, so serial mode and the tests run the
very cores the processes run (the learner's process reads its batches through `channels.BackgroundBatches`, a
`SampleClient` on a thread of its own). A port never raises for what a peer sent: bad content is counted by
reason (`on_error`) and dropped.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from surreal.proto.wire import (
    NO_VERSION,
    BlobMeta,
    Chunk,
    NotModified,
    Params,
    SampleReply,
    SampleRequest,
    encode_chunk,
    supersedes,
)
from surreal.replay.shard import ReplayShard


class ExperienceOut(Protocol):
    def send(self, chunk: Chunk, incarnation: str, timeout_s: float) -> bool:
        """Ship one chunk; False: backpressure (every shard full or unreachable) for `timeout_s`."""
        ...


class BatchesIn(Protocol):
    @property
    def shards(self) -> int: ...

    def next(self, batch_size: int, timeout_s: float) -> SampleReply | None:
        """The next reply holding data, or None after `timeout_s`."""
        ...

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None: ...


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


class InProcessReplay:
    """Experience out and batches in over one replay shard in memory (never full: the shard evicts). A chunk
    is validated once, by the shard (`decode_chunk`); replies are the shard's typed ones, not checked again.
    `ready_at`: as for `SampleClient`."""

    shards = 1

    def __init__(self, shard: ReplayShard, ready_at: int | None = None) -> None:
        self.shard = shard
        self.ready_at = ready_at

    def send(self, chunk: Chunk, incarnation: str, timeout_s: float = 0.0) -> bool:
        del timeout_s
        self.shard.add(encode_chunk(chunk, incarnation))
        return True

    def next(self, batch_size: int, timeout_s: float = 0.0) -> SampleReply | None:
        del timeout_s
        if not self.shard.ready(SampleRequest(batch_size, self.ready_at).threshold):
            return None
        return self.shard.sample(batch_size)

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        del shard
        self.shard.update_priorities(slots, ids, priorities)


def _copied(arrays: dict[str, Any]) -> dict[str, Any]:
    return {k: _copied(v) if isinstance(v, dict) else np.array(v, copy=True) for k, v in arrays.items()}


class InProcessParams:
    """Parameters out and in: a ps in memory, holding the latest blob by the ps's rule (`supersedes`)."""

    def __init__(self) -> None:
        self.latest: Params | None = None

    def publish(self, blob: BlobMeta, arrays: dict[str, Any]) -> None:
        """Holds a copy, as a ps holds the bytes it received: a learner's arrays may be views of its live
        weights (CPU tensors' `.numpy()`), which would otherwise reach actors that fetch later as they are
        then, not as published."""
        held = self.latest
        if held is None or supersedes((blob.version, blob.incarnation), (held.blob.version, held.blob.incarnation)):
            self.latest = Params(blob, _copied(arrays))

    def service(self) -> None:
        pass  # nobody subscribes late in one process

    def fetch(
        self, version: int, incarnation: str, timeout_s: float = 0.0, hold_s: float = 0.0, wake_version: int = 0
    ) -> Params | NotModified:
        """The latest blob if it supersedes the actor's, whatever `wake_version` says: one thread, so nothing newer
        can arrive while it waits (a ps whose learner is quiet answers the same)."""
        del timeout_s, hold_s, wake_version
        latest = self.latest
        if latest is None:
            return NotModified(NO_VERSION, "")
        if not supersedes((latest.blob.version, latest.blob.incarnation), (version, incarnation)):
            return NotModified(latest.blob.version, latest.blob.incarnation)
        return latest
