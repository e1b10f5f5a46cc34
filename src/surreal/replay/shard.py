"""One replay shard without its sockets: validated chunks in, sample replies out.

The replay role (`roles/replay.py`) puts this behind its PULL and ROUTER sockets; serial mode calls it
directly (`roles/ports.py`), so both keep the same books: the env steps received (what an off-policy learner's
replay ratio counts) and, for transition replays, the episodes finished and the actors heard from since the
previous reply (an off-policy learner never sees chunks, so this is how the training-return curve and the
live-actor count of flow control reach it). Torch-free.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from surreal.config.schema import ReplayConfig
from surreal.proto.codec import Limits, Message
from surreal.proto.wire import (
    MAX_REPORTED_ACTORS,
    EmptyReply,
    Fields,
    FifoReply,
    SampleRequest,
    ShardReport,
    TransitionReply,
    chunk_from_meta,
    chunk_meta,
    decode_chunk,
    fields_of,
)
from surreal.replay.buffers import DEFAULT_CAPACITY_BYTES, DEFAULT_REPLY, FifoReplay, TransitionReplay, make_replay
from surreal.replay.snapfile import ShardState
from surreal.replay.snapshot import capture, restore

MAX_FORWARDED_EPISODES = 1000  # finished episodes held for the next reply; older ones are only on the actors' metrics


def message_limits(config: ReplayConfig) -> Limits:
    """What a replay's sockets and its learner accept (`max_frames`, `max_message_bytes`): every reply is packed to
    pass the learner's decode with these."""
    return Limits(max_frames=config.max_frames, max_bytes=config.max_message_bytes)


class ReplayShard:
    def __init__(
        self,
        mode: str,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eps: float = 1e-6,
        seed: int = 0,
        shard: int = 0,
        capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
        reply: Limits = DEFAULT_REPLY,
        max_steps_per_unit: int | None = None,
        layout: Fields | None = None,
    ) -> None:
        """`reply`: the learner's limits, which every reply keeps to (replay/buffers.py);
        `max_steps_per_unit`: the algorithm's bound on the env steps a chunk may claim (`decode_chunk`);
        `layout`: a transition shard's declared fields (`replay.layout`), laid out now."""
        self.shard, self.mode, self.capacity = shard, mode, capacity
        self.max_steps_per_unit = max_steps_per_unit
        self.replay = make_replay(
            mode, capacity, alpha, beta, priority_eps, seed + 7919 * shard, capacity_bytes, reply, layout
        )
        self.forward_episodes = mode != "fifo"
        self.env_steps_in = 0
        self.finished_returns: deque[float] = deque(maxlen=MAX_FORWARDED_EPISODES)
        self.finished_lengths: deque[int] = deque(maxlen=MAX_FORWARDED_EPISODES)
        # One per finished episode while every chunk reports success; a chunk without breaks the pairing and
        # the next report then carries none (an env reports success for all its episodes or for none).
        self.finished_successes: deque[bool] = deque(maxlen=MAX_FORWARDED_EPISODES)
        self.actors_heard: set[int] = set()

    @classmethod
    def of(cls, config: ReplayConfig, seed: int, shard: int = 0, max_steps_per_unit: int | None = None) -> ReplayShard:
        """Shard `shard` as `config` describes it (mode, capacity in transitions and bytes, priority exponents, a
        transition shard's declared `layout`), its replies packed to `message_limits(config)`: what the replay role,
        serial mode and the simulator all build."""
        return cls(
            *(config.mode, config.capacity, config.alpha, config.beta, config.priority_eps, seed, shard),
            capacity_bytes=config.capacity_bytes,
            reply=message_limits(config),
            max_steps_per_unit=max_steps_per_unit,
            layout=None if config.layout is None else fields_of(config.layout),
        )

    def add(self, message: Message) -> int:
        """Store one experience message's chunk, validated here (the one check on this hop); returns its
        transitions (T*K). Raises `ProtocolError` (bad content, or a chunk no reply could carry) or ValueError
        (a chunk this storage cannot hold); nothing is stored or counted then."""
        chunk = decode_chunk(message, self.max_steps_per_unit)
        n = chunk.size
        self.replay.add_chunk(chunk.arrays, chunk_meta(chunk, chunk.incarnation), n)
        self.env_steps_in += chunk.env_steps
        if self.forward_episodes:
            self.finished_returns.extend(chunk.episode_returns)
            self.finished_lengths.extend(chunk.episode_lengths)
            self.finished_successes.extend(chunk.episode_successes)
            if len(self.actors_heard) < MAX_REPORTED_ACTORS:
                self.actors_heard.add(chunk.actor)
        return n

    def ready(self, batch_size: int) -> bool:
        return self.replay.ready(batch_size)

    def refusal(self, request: SampleRequest) -> str | None:
        """Why this shard could never answer `request` with data, as the reason its error reply carries; None
        when it can. Asked when a request arrives (it is refused at once, never parked) and again just before
        it is served (a transition replay without a declared layout knows its reply's size only once data came).

        A transition replay draws `batch_size` with replacement, so the batch may exceed what it holds, but the
        reply must pass the learner's byte limit: the gather, the index arrays and the reply are all sized by
        it. A FIFO reply carries at most the whole FIFO: a bigger batch is no request an honest learner makes
        (the config holds `algo.batch_size` to the capacity)."""
        if request.threshold > self.capacity:
            return "over_capacity"  # the data it waits for can never be held
        if isinstance(self.replay, FifoReplay):
            return "over_capacity" if request.batch_size > self.capacity else None
        if request.batch_size > self.replay.max_batch():
            return "reply_too_large"
        return None

    def sample(self, batch_size: int, episodes: bool = True) -> FifoReply | TransitionReply:
        """A reply holding data (call `ready` first) and the shard's progress: whole chunks (a FIFO, at most
        `batch_size` transitions but at least one chunk) or a batch of `batch_size` sampled transitions.
        `episodes`: the report hands over the finished episodes (`report`)."""
        if isinstance(self.replay, FifoReplay):
            items = self.replay.fifo.take(batch_size)
            # The metadata is what `add` accepted: rebuilt into chunks, not checked against arrays again.
            chunks = [chunk_from_meta(item.arrays, item.meta, item.n_transitions) for item in items]
            return FifoReply(self.report(episodes), chunks)
        return TransitionReply(self.report(episodes), self.replay.sample(batch_size))

    def empty_reply(self, episodes: bool = True) -> EmptyReply:
        """What a request the shard could not answer with data in time gets: its progress only."""
        return EmptyReply(self.report(episodes))

    def report(self, episodes: bool = True) -> ShardReport:
        """This shard's progress for the next reply (data or empty); hands over the finished episodes and the
        actors heard from once. Without `episodes` (a learner group's rank after the first, `SampleRequest`), the
        env-step count only: the episodes wait for the learner that counts them."""
        if not episodes:
            return ShardReport(self.shard, self.env_steps_in, [], [], [], [])
        returns, lengths = list(self.finished_returns), list(self.finished_lengths)
        successes = list(self.finished_successes) if len(self.finished_successes) == len(returns) else []
        report = ShardReport(self.shard, self.env_steps_in, returns, lengths, sorted(self.actors_heard), successes)
        self.finished_returns.clear()
        self.finished_lengths.clear()
        self.finished_successes.clear()
        self.actors_heard.clear()
        return report

    def update_priorities(self, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> int:
        """Raises ValueError for an update this shard cannot apply (a FIFO or uniform replay, a slot out of range,
        more entries than a reply of it carries)."""
        return self.replay.update_priorities(slots, ids, priorities)

    def stats(self) -> dict[str, int]:
        return self.replay.stats()

    def state(self) -> dict[str, Any]:
        """Everything the shard holds (NumPy arrays, numbers, containers), for an exact resume in serial mode
        (run/serial.py): its buffer as a snapshot captures it (replay/snapshot.py), the sampling generator,
        and the books of the next report."""
        captured = capture(self.replay, guard=self.capacity, keep_empty=True)  # all copied: nothing writes now
        replay = (
            None
            if captured is None
            else {
                "books": captured.books,
                "arrays": {name: np.concatenate(pieces) for name, pieces in captured.arrays.items()},
            }
        )
        sampled = self.replay if isinstance(self.replay, TransitionReplay) else None  # a FIFO draws no numbers
        return {
            "replay": replay,
            "rng": None if sampled is None else sampled.rng.bit_generator.state,
            "priority_updates": 0 if sampled is None else sampled.priority_updates,
            "env_steps_in": self.env_steps_in,
            "finished_returns": list(self.finished_returns),
            "finished_lengths": list(self.finished_lengths),
            "finished_successes": list(self.finished_successes),
            "actors_heard": sorted(self.actors_heard),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Put `state` into this shard, a fresh one built with the same settings."""
        if state["replay"] is not None:
            restore(self.replay, ShardState(state["replay"]["books"], state["replay"]["arrays"]))
        if isinstance(self.replay, TransitionReplay):
            self.replay.rng.bit_generator.state = state["rng"]
            self.replay.priority_updates = state["priority_updates"]
        self.env_steps_in = state["env_steps_in"]
        self.finished_returns.extend(state["finished_returns"])
        self.finished_lengths.extend(state["finished_lengths"])
        self.finished_successes.extend(state["finished_successes"])
        self.actors_heard = set(state["actors_heard"])
