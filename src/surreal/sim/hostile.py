"""Hostile peers: messages the wire allows but no honest role sends, among the honest traffic.

- `HostileActor` sends every replay shard, before any honest actor has sent anything, a well-formed chunk of the
  wrong fields (a transition shard laid out by whichever chunk came first would then refuse every honest one; it is
  laid out by the experiment instead: `replay.layout`), then chunks holding NaN, chunks claiming more env steps than
  their steps can be, and chunks with the algorithm's fields missing (a FIFO stores them; the learner leaves them
  out of the reply it takes); it floods a ps with held requests (more than a peer may park) and asks for versions
  no learner made.
- `HostileLearnerPeer` asks a replay shard for batches it could never serve (a billion transitions, more than its
  capacity) and sends priorities for slots it never sampled; against a transition replay it also floods parked
  requests (more than a peer may park).
- `HostileParker` x `PARKERS`: each keeps `MAX_PENDING_PER_PEER` sample requests parked at every transition shard,
  of a batch the shard can never serve (its whole capacity), parking again as each expires: together they would
  fill every parking place, and the fair rule (roles/parking.py) must still give the learner its place.
- `HostileShard` sits among the learner's shards and answers its sample requests with replies whose fields are
  missing, of the wrong shape or dtype, or not finite.

Their chunks are marked (ledger.py `HOSTILE`), so the ledger sees one reach an update. Each acts every `every_s`
virtual seconds from `start_s` (after the honest actors' first chunks have set up the shards).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from surreal.config import ExperimentConfig
from surreal.proto.codec import Message
from surreal.proto.wire import (
    EMPTY_REPLY,
    ERROR,
    IDS,
    SAMPLE_REQUEST,
    SLOTS,
    WEIGHTS,
    Chunk,
    Fields,
    FifoReply,
    ParamsRequest,
    PriorityUpdate,
    SampleRequest,
    ShardReport,
    TransitionReply,
    encode_chunk,
    encode_sample_reply,
)
from surreal.roles.replay import MAX_PENDING, MAX_PENDING_PER_PEER
from surreal.sim.ledger import HOSTILE, tagged_field
from surreal.sim.world import Network, Node, World

START_S = 5.0
EVERY_S = 2.0
FLOOD = 40  # held requests sent at once: ten times what one peer may park at a ps
ANSWER_S = 0.5
PARKERS = MAX_PENDING // MAX_PENDING_PER_PEER  # hostile parkers that, each at its cap, fill a shard's parking


class HostilePeer(Node):
    """A peer that acts on a timer; replies to it are read by nobody."""

    def __init__(self, world: World, net: Network, name: str) -> None:
        super().__init__(world, net, name)
        self.acts = 0
        world.at(START_S, self._act)

    def _act(self) -> None:
        self.act(self.acts)
        self.acts += 1
        self.world.after(EVERY_S, self._act)

    def act(self, turn: int) -> None:
        raise NotImplementedError

    def receive(self, src: Node, message: Message) -> None:
        pass


def _hostile_arrays(fields: Fields, steps: int) -> dict[str, np.ndarray]:
    arrays = {name: np.full((steps, 1, *f.shape), f.low or 0, f.dtype) for name, f in fields.items()}
    arrays[tagged_field(arrays)][0, 0, 0] = HOSTILE
    return arrays


def _wrong_fields(fields: Fields, steps: int) -> dict[str, np.ndarray]:
    """A chunk every check on its own passes (finite, of one [T, K], plausible steps) whose fields are not the
    algorithm's: the tagged one a cell wider, and one more field."""
    arrays = _hostile_arrays(fields, steps)
    name = tagged_field(arrays)
    arrays[name] = np.concatenate([arrays[name], arrays[name][..., :1]], axis=-1)
    arrays["extra"] = np.zeros((steps, 1), np.float32)
    return arrays


class HostileActor(HostilePeer):
    def __init__(
        self, world: World, net: Network, shards: Sequence[Node], ps: Sequence[Node], fields: Fields, steps: int
    ) -> None:
        super().__init__(world, net, "hostile-actor")
        self.shards, self.ps, self.fields, self.steps = shards, ps, fields, steps
        world.at(0.0, self._first_chunks)  # before any honest actor's first chunk (they start over the first second)

    def _first_chunks(self) -> None:
        for shard in self.shards:
            self.send(shard, encode_chunk(Chunk(_wrong_fields(self.fields, self.steps), 0, 999_999), "x"))

    def act(self, turn: int) -> None:
        shard, ps = self.shards[turn % len(self.shards)], self.ps[turn % len(self.ps)]
        arrays = _hostile_arrays(self.fields, self.steps)
        kind = turn % 4
        if kind == 0:
            arrays[tagged_field(arrays)][0, 0, 1] = np.nan  # a diverging simulation's NaN
            self.send(shard, encode_chunk(Chunk(arrays, 0, 999_999), "x"))
        elif kind == 1:
            self.send(shard, encode_chunk(Chunk(arrays, 0, 999_999, steps=10**7), "x"))  # a whole run's steps
        elif kind == 2:
            missing = dict(list(arrays.items())[1:])
            self.send(shard, encode_chunk(Chunk(missing, 0, 999_999), "x"))
        else:
            for _ in range(FLOOD):
                self.send(ps, ParamsRequest(0, "x", hold_ms=60_000, wake_version=10**6).to_message())
            self.send(ps, ParamsRequest(2**52, "no-learner-made-it").to_message())


class HostileLearnerPeer(HostilePeer):
    def __init__(self, world: World, net: Network, shards: list[Node]) -> None:
        super().__init__(world, net, "hostile-learner")
        self.shards = shards

    def act(self, turn: int) -> None:
        rng = self.world.rng
        for shard in self.shards:
            replay = getattr(shard, "shard", None)
            if replay is None:
                continue
            self.send(shard, SampleRequest(10**9, ready_at=1).to_message())  # ready at once, never servable
            self.send(shard, SampleRequest(replay.capacity + 1).to_message())  # more than it can ever hold
            slots = np.asarray([rng.randrange(replay.capacity) for _ in range(64)], np.int64)
            ids = np.asarray([rng.randrange(2**40) for _ in range(64)], np.uint64)
            self.send(shard, PriorityUpdate(slots, ids, np.full(64, 1e6)).to_message())  # slots it never saw
            if replay.mode != "fifo":  # a FIFO would hand it honest chunks: peers are not authenticated here
                for _ in range(20):  # parked until the shard is full: more than a peer may park
                    self.send(shard, SampleRequest(replay.capacity).to_message())


class HostileParker(Node):
    """Keeps `MAX_PENDING_PER_PEER` requests that can never be served parked at every transition shard: at `START_S`,
    then one more each time a shard answers one with an empty reply (its deadline passed). An error reply (evicted,
    or refused) is not answered with another: it parks again at its next turn, every `EVERY_S`."""

    def __init__(self, world: World, net: Network, index: int, shards: Sequence[Node]) -> None:
        super().__init__(world, net, f"hostile-parker-{index}")
        self.shards = [shard for shard in shards if getattr(shard, "shard", None) is not None]
        self.refused = 0  # its requests a shard answered with an error (evicted, or past its cap)
        world.at(START_S, self._turn)

    def _request(self, shard: Node) -> None:
        self.send(shard, SampleRequest(shard.shard.capacity).to_message())  # type: ignore[attr-defined]

    def _turn(self) -> None:
        for shard in self.shards:
            if shard.shard.mode != "fifo":  # type: ignore[attr-defined]  # a FIFO would hand it honest chunks
                for _ in range(MAX_PENDING_PER_PEER):
                    self._request(shard)
        self.world.after(EVERY_S * 5, self._turn)

    def receive(self, src: Node, message: Message) -> None:
        if message.kind == EMPTY_REPLY and src in self.shards:
            self._request(src)
        elif message.kind == ERROR:
            self.refused += 1


class HostileShard(Node):
    """Answers every sample request, ANSWER_S later (a real shard's pace: at once, it would only spin the learner's
    port), with a reply the learner must refuse, reporting no env steps."""

    def __init__(self, world: World, net: Network, index: int, cfg: ExperimentConfig, fields: Fields) -> None:
        super().__init__(world, net, f"hostile-shard-{index}")
        self.index, self.cfg, self.fields = index, cfg, fields
        self.answered = 0

    def receive(self, src: Node, message: Message) -> None:
        if message.kind == SAMPLE_REQUEST:
            self.world.after(ANSWER_S, self.answer, src, message)

    def answer(self, src: Node, message: Message) -> None:
        self.answered += 1
        report = ShardReport(self.index, 0)
        if self.cfg.replay.mode == "fifo":  # a shard of the run's kind: chunks, or sampled transitions
            arrays = _hostile_arrays(self.fields, 64)
            name = tagged_field(arrays)
            broken: dict[str, Any] = [
                dict(list(arrays.items())[1:]),
                {**arrays, name: arrays[name][..., :1]},
                {**arrays, name: arrays[name].astype(np.float64)},
            ][self.answered % 3]
            self.send(src, encode_sample_reply(FifoReply(report, [Chunk(broken, 0, 999_999)])))
            return
        n = SampleRequest.from_message(message).batch_size
        good = {name: np.full((n, *f.shape), f.low or 0, f.dtype) for name, f in self.fields.items()}
        good[SLOTS], good[IDS] = np.arange(n, dtype=np.int64), np.arange(n, dtype=np.uint64)
        if self.cfg.replay.mode == "prioritized":
            good[WEIGHTS] = np.ones(n, np.float32)
        first = next(iter(self.fields))
        broken = [
            {k: v for k, v in good.items() if k != first},
            {**good, first: good[first][: n - 1]},
            {**good, first: np.full_like(good[first], np.nan, dtype=np.float32)},
        ][self.answered % 3]
        self.send(src, encode_sample_reply(TransitionReply(report, broken)))
