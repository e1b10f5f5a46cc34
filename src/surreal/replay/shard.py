"""One replay shard without its sockets: validated chunks in, sample replies out.

The replay role (`roles/replay.py`) puts this behind its PULL and ROUTER sockets; serial mode calls it
directly (`roles/ports.py`), so both keep the same books: the env steps received (what an off-policy learner's
replay ratio counts) and, for transition replays, the episodes finished and the actors heard from since the
previous reply (an off-policy learner never sees chunks, so this is how the training-return curve and the
live-actor count of flow control reach it). Torch-free.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, TypedDict

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
    decode_chunk,
    fields_of,
)
from surreal.replay.buffers import (
    DEFAULT_CAPACITY_BYTES,
    DEFAULT_REPLY,
    ChunkFifo,
    ReplayStats,
    Storage,
    TransitionStorage,
)
from surreal.replay.frame_storage import FrameStorage, has_frames
from surreal.replay.samplers import InOrder, PrioritizedSampler, Sampler, UniformSampler
from surreal.replay.snapfile import Capture, ShardState

MAX_FORWARDED_EPISODES = 1000  # finished episodes held for the next reply; older ones are only on the actors' metrics


def message_limits(config: ReplayConfig) -> Limits:
    """What a replay's sockets and its learner accept (`max_frames`, `max_message_bytes`): every reply is packed to
    pass the learner's decode with these."""
    return Limits(max_frames=config.max_frames, max_bytes=config.max_message_bytes)


class SavedReplay(TypedDict):
    """A shard's storage and sampler as its snapshot holds them (`ReplayShard.capture`), the arrays joined."""

    books: dict[str, Any]
    arrays: dict[str, np.ndarray]


class ShardCheckpoint(TypedDict):
    """Everything a shard holds, for an exact resume in serial mode (run/serial.py)."""

    replay: SavedReplay | None  # None: an empty transition replay, in checkpoints written before it was captured
    rng: Mapping[str, Any] | None  # the sampling generator's; None: a FIFO's, in checkpoints written before it had one
    priority_updates: int
    env_steps_in: int
    finished_returns: list[float]
    finished_lengths: list[int]
    finished_successes: list[bool]
    actors_heard: list[int]


class ReplayShard:
    """A storage and a sampler, composed TorchRL-style (replay/buffers.py, replay/samplers.py): `fifo` is a
    `ChunkFifo` read `InOrder`, `uniform` and `prioritized` a `TransitionStorage` with that sampler (`uniform` of
    chunks of frames: a `FrameStorage`, replay/frame_storage.py)."""

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
        """`capacity` in transitions and in bytes; `reply`: the learner's limits, which a FIFO reply's packing keeps
        to and a transition replay's layout and batch sizes are held to; `max_steps_per_unit`: the algorithm's bound
        on the env steps a chunk may claim (`decode_chunk`); `layout`: the declared fields (`replay.layout`): a
        transition shard is laid out by them now, a FIFO holds every chunk to them (the learner checks them again)."""
        self.shard, self.mode, self.capacity = shard, mode, capacity
        self.max_steps_per_unit = max_steps_per_unit
        self.storage: Storage
        self.sampler: Sampler[Any]
        if mode == "fifo":
            self.storage, self.sampler = ChunkFifo(capacity, capacity_bytes, reply, layout), InOrder()
        elif mode in ("uniform", "prioritized") and has_frames(layout):
            if mode == "prioritized":
                raise ValueError("replay.mode=prioritized does not store frames (a frame replay samples uniformly)")
            self.storage, self.sampler = FrameStorage(capacity, capacity_bytes, reply, layout), UniformSampler()
        elif mode in ("uniform", "prioritized"):
            self.storage = TransitionStorage(capacity, capacity_bytes, reply, layout)
            prioritized = mode == "prioritized"
            self.sampler = PrioritizedSampler(capacity, alpha, beta, priority_eps) if prioritized else UniformSampler()
        else:
            raise ValueError(f"unknown replay mode {mode!r}: fifo, uniform or prioritized")
        self.rng = np.random.default_rng(seed + 7919 * shard)
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
        self.sampler.on_add(self.storage.add(chunk, n))
        self.env_steps_in += chunk.env_steps
        if self.forward_episodes:
            self.finished_returns.extend(chunk.episode_returns)
            self.finished_lengths.extend(chunk.episode_lengths)
            self.finished_successes.extend(chunk.episode_successes)
            if len(self.actors_heard) < MAX_REPORTED_ACTORS:
                self.actors_heard.add(chunk.actor)
        return n

    def ready(self, batch_size: int) -> bool:
        return self.storage.ready(batch_size)

    def refusal(self, request: SampleRequest) -> str | None:
        """Why this shard could never answer `request` with data, as the reason its error reply carries; None
        when it can. Asked when a request arrives (it is refused at once, never parked) and again just before
        it is served (a transition replay without a declared layout knows its reply's size only once data came)."""
        if request.threshold > self.capacity:
            return "over_capacity"  # the data it waits for can never be held
        return self.storage.refusal(request.batch_size, self.sampler.weighted)

    def sample(self, batch_size: int, episodes: bool = True) -> FifoReply | TransitionReply:
        """A reply holding data (call `ready` first) and the shard's progress: whole chunks (a FIFO, at most
        `batch_size` transitions but at least one chunk) or a batch of `batch_size` sampled transitions.
        `episodes`: the report hands over the finished episodes (`report`)."""
        slots, weights = self.sampler.sample(self.storage, batch_size, self.rng)
        return self.storage.reply(self.report(episodes), slots, weights)

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
        return self.sampler.update_priorities(self.storage, slots, ids, priorities)

    def stats(self) -> ReplayStats:
        return self.storage.stats()

    def change_token(self) -> tuple[int, ...]:
        """Equal tokens: nothing a snapshot holds has changed in between."""
        stats = self.storage.stats()
        return stats["size"], stats["added"], stats["served"], stats["dropped"], self.sampler.updates

    def capture(self, guard: int, keep_empty: bool = False) -> Capture | None:
        """The storage's and the sampler's state now, or None when it holds nothing worth a file; `guard`: rows of
        a transition ring copied ahead of its cursor (the rest is read from the live ring when the capture is
        written); `keep_empty`: the books of an empty one too (an exact resume keeps a FIFO's counts)."""
        captured = self.storage.capture(guard)
        if not (captured.transitions or keep_empty):
            return None
        books, arrays = self.sampler.capture(captured.transitions)
        captured.books = {**captured.books, **books}
        captured.arrays.update(arrays)
        return captured

    def restore(self, state: ShardState) -> int:
        """Put `state` into this shard (a fresh one) all at once: built aside, swapped in only when complete, so a
        state that does not fit raises (KeyError, TypeError, ValueError) and leaves the shard as it was. Returns
        the transitions restored."""
        storage = self.storage.restored(state)
        held = storage.stats()["size"]
        self.sampler, self.storage = self.sampler.restored(state, held), storage
        return held

    def state(self) -> ShardCheckpoint:
        """Everything the shard holds (NumPy arrays, numbers, containers): its storage and sampler as a snapshot
        captures them (all copied: nothing writes now), the sampling generator, and the books of the next report."""
        captured = self.capture(guard=self.capacity, keep_empty=True)
        assert captured is not None
        saved = captured.joined()
        return {
            "replay": {"books": dict(saved.books), "arrays": saved.arrays},
            "rng": self.rng.bit_generator.state,
            "priority_updates": self.sampler.updates,
            "env_steps_in": self.env_steps_in,
            "finished_returns": list(self.finished_returns),
            "finished_lengths": list(self.finished_lengths),
            "finished_successes": list(self.finished_successes),
            "actors_heard": sorted(self.actors_heard),
        }

    def load_state(self, state: ShardCheckpoint) -> None:
        """Put `state` into this shard, a fresh one built with the same settings."""
        if state["replay"] is not None:
            self.restore(ShardState(state["replay"]["books"], state["replay"]["arrays"]))
        if state["rng"] is not None:
            self.rng.bit_generator.state = state["rng"]
        self.sampler.updates = state["priority_updates"]
        self.env_steps_in = state["env_steps_in"]
        self.finished_returns.extend(state["finished_returns"])
        self.finished_lengths.extend(state["finished_lengths"])
        self.finished_successes.extend(state["finished_successes"])
        self.actors_heard = set(state["actors_heard"])
