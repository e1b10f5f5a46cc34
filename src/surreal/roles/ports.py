"""The four ports a role core talks to, one per path of the dataflow (proto/channels.py):

    experience out   actor -> replay        ExperienceOut   ZmqExperienceOut  | InProcessReplay
    batches in       replay -> learner      BatchesIn       ZmqBatchesIn      | InProcessReplay
    parameters out   learner -> ps          ParamsOut       ZmqParamsOut      | InProcessParams
    parameters in    ps -> actor            ParamsIn        ZmqParamsIn       | InProcessParams

The ZMQ ports put the typed content of proto/wire.py on the channels; the in-process ones hold a replay shard
and the latest blob in memory, so serial mode and the tests run the very cores the processes run. A port never
raises for what a peer sent: bad content is counted by reason (`on_error`) and dropped.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import zmq

from surreal.proto.channels import ErrorSink, ExperienceSender, ParamClient, ParamPublisher, SampleClient, ignore_error
from surreal.proto.codec import Limits, ProtocolError
from surreal.proto.wire import BlobMeta, Chunk, SampleReply, ShardReport, decode_fifo_reply, encode_chunk, supersedes
from surreal.replay.shard import ReplayShard

FETCH_TIMEOUT = "fetch_timeout"  # what ZmqParamsIn tells its error sink when no ps answered in time


@dataclass
class Params:
    """A parameter blob as an actor receives it."""

    blob: BlobMeta
    arrays: dict[str, Any]


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

    def service(self) -> None:
        """Called from the learner's loop: answer late subscribers, re-send the latest blob."""
        ...


class ParamsIn(Protocol):
    def fetch(self, version: int, incarnation: str, timeout_s: float, hold_s: float = 0.0) -> Params | None:
        """A blob that supersedes (`version`, `incarnation`), or None (not modified, or no answer in time).
        `hold_s`: wait up to that long for a newer blob than the one held (a long poll, `ParamClient`)."""
        ...


# -- over ZMQ -------------------------------------------------------------------------------------------


class ZmqExperienceOut:
    def __init__(self, ctx: zmq.Context, addresses: Sequence[str]) -> None:
        self.sender = ExperienceSender(ctx, addresses)

    def send(self, chunk: Chunk, incarnation: str, timeout_s: float) -> bool:
        meta, arrays = encode_chunk(chunk, incarnation)
        return self.sender.send(arrays, meta, timeout_s)

    def close(self, linger_s: float = 0.0) -> None:
        self.sender.close(linger_s)


class ZmqBatchesIn:
    def __init__(
        self,
        ctx: zmq.Context,
        addresses: Sequence[str],
        limits: Limits,
        prefetch: int,
        on_error: ErrorSink = ignore_error,
        max_steps_per_unit: int | None = None,
        ready_at: int | None = None,
    ) -> None:
        """`ready_at`: transitions a shard must hold to answer (SampleClient); None: the batch size asked for."""
        self.client = SampleClient(ctx, addresses, limits, prefetch, on_error=on_error, ready_at=ready_at)
        self.on_error = on_error
        self.max_steps_per_unit = max_steps_per_unit  # the algorithm's bound on a chunk's env steps

    @property
    def shards(self) -> int:
        return len(self.client.shards)

    def next(self, batch_size: int, timeout_s: float) -> SampleReply | None:
        got = self.client.next_batch(batch_size, timeout_s)
        if got is None:
            return None
        shard, message = got
        try:
            report = ShardReport.from_meta({**message.meta, "shard": shard})
            if "chunks" in message.meta:
                return SampleReply(report, decode_fifo_reply(message.arrays, message.meta, self.max_steps_per_unit))
            return SampleReply(report, [], message.arrays)
        except ProtocolError as exc:
            self.on_error(exc.reason)
            return None

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        self.client.update_priorities(shard, {"slots": slots, "ids": ids, "priorities": priorities})

    def close(self) -> None:
        self.client.close()


class BackgroundBatches:
    """A `BatchesIn` whose receiving and decoding run on a thread of their own, so the next batch arrives while
    the learner updates. The thread owns the ZMQ port (sockets are not shared between threads): priority
    updates reach it through a queue, and it keeps at most `depth` replies waiting (then it stops asking the
    shards, which hold the data: backpressure, not an unbounded queue)."""

    def __init__(self, make_port: Callable[[], ZmqBatchesIn], shards: int, batch_size: int, depth: int) -> None:
        self.shards = shards
        self.batch_size = batch_size
        self._replies: queue.Queue[SampleReply] = queue.Queue(maxsize=depth)
        self._priorities: queue.SimpleQueue[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(make_port,), name="batches-in", daemon=True)
        self._thread.start()

    def _run(self, make_port: Callable[[], ZmqBatchesIn]) -> None:
        port = make_port()
        try:
            while not self._stop.is_set():
                while not self._priorities.empty():
                    port.send_priorities(*self._priorities.get())
                reply = port.next(self.batch_size, timeout_s=0.05)
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
        try:
            return self._replies.get(timeout=timeout_s) if timeout_s > 0 else self._replies.get_nowait()
        except queue.Empty:
            return None

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        self._priorities.put((shard, slots, ids, priorities))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class ZmqParamsOut:
    def __init__(self, ctx: zmq.Context, bind: str) -> None:
        self.publisher = ParamPublisher(ctx, bind)

    def publish(self, blob: BlobMeta, arrays: dict[str, Any]) -> None:
        self.publisher.publish(blob.version, blob.to_meta(), arrays)

    def service(self) -> None:
        self.publisher.service()

    def close(self) -> None:
        self.publisher.close()


class ZmqParamsIn:
    def __init__(
        self, ctx: zmq.Context, addresses: Sequence[str], limits: Limits, on_error: ErrorSink = ignore_error
    ) -> None:
        self.client = ParamClient(ctx, addresses, limits, on_error=on_error)
        self.on_error = on_error

    def fetch(self, version: int, incarnation: str, timeout_s: float, hold_s: float = 0.0) -> Params | None:
        reply = self.client.fetch(version, incarnation, timeout_s, hold_s)
        if reply is None:
            self.on_error(FETCH_TIMEOUT)
            return None
        if reply.message is None:
            return None
        try:
            return Params(BlobMeta.from_meta(reply.message.meta), reply.message.arrays)
        except ProtocolError as exc:
            self.on_error(exc.reason)
            return None

    def close(self) -> None:
        self.client.close()


# -- in process -----------------------------------------------------------------------------------------


class InProcessReplay:
    """Experience out and batches in over one replay shard in memory (never full: the shard evicts).
    `ready_at`: as for `ZmqBatchesIn`."""

    shards = 1

    def __init__(self, shard: ReplayShard, ready_at: int | None = None) -> None:
        self.shard = shard
        self.ready_at = ready_at

    def send(self, chunk: Chunk, incarnation: str, timeout_s: float = 0.0) -> bool:
        del timeout_s
        meta, arrays = encode_chunk(chunk, incarnation)
        self.shard.add(arrays, meta)
        return True

    def next(self, batch_size: int, timeout_s: float = 0.0) -> SampleReply | None:
        del timeout_s
        if not self.shard.ready(min(batch_size, self.ready_at or batch_size)):
            return None
        arrays, meta = self.shard.sample(batch_size)
        report = ShardReport.from_meta(meta)
        if "chunks" in meta:
            return SampleReply(report, decode_fifo_reply(arrays, meta))
        return SampleReply(report, [], arrays)

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

    def fetch(self, version: int, incarnation: str, timeout_s: float = 0.0, hold_s: float = 0.0) -> Params | None:
        del timeout_s, hold_s  # one thread: nothing newer can arrive while it waits
        latest = self.latest
        if latest is None or not supersedes((latest.blob.version, latest.blob.incarnation), (version, incarnation)):
            return None
        return latest
