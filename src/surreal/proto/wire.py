"""What each message carries: typed metadata with one encoder and one decoder per message kind.

`codec.py` is the envelope (header frame + raw array frames, checked against `Limits`); this module is the
content. Every message kind is defined here, with one encoder (typed value -> `Message`) and one validating
decoder (`Message` -> typed value); every field a peer sends is read here and only here, so "what can arrive"
is one file to read (tests/test_layering.py holds it):

    kind               from -> to               typed as
    experience         actor -> replay          `Chunk` (+ `chunk_meta`)     encode_chunk / decode_chunk
    sample_request     learner -> replay        `SampleRequest`
    fifo_reply         replay -> learner        `FifoReply` (whole chunks)   encode_sample_reply / decode_sample_reply
    transition_reply   replay -> learner        `TransitionReply` (a batch)  "  (both against a `ReplyLayout`)
    empty_reply        replay -> learner        `EmptyReply` (progress only) "
    priority_update    learner -> replay        `PriorityUpdate`
    params             learner -> ps -> actor   `Params` (`BlobMeta`)        encode_params / decode_params
    params_request     actor -> ps              `ParamsRequest`
    not_modified       ps -> actor              `NotModified`
    error              a server -> its client   `ErrorReply`
    group_order        learner rank 0 -> ranks  `GroupOrder`                 encode_group_order / decode_group_order
    infer_request      actor -> inference       `InferRequest` (observations)
    infer_reply        inference -> actor       `InferReply` (actions + what the chunk records)

The typed requests and replies encode with `to_message` and decode with `from_message`; every sample reply
carries its shard's progress (`ShardReport`). Decoders validate types and ranges (integers bounded so sums stay
encodable, finite floats, bounded list lengths) and raise `ProtocolError` with a stable reason, which receivers
count and drop. Numpy only: the replay and ps images import this without torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from surreal.proto.codec import ALLOWED_DTYPES, Arrays, Message, ProtocolError, flatten

# -- message kinds: the header's `k`; a socket accepts only the kinds listed for it ---------------------

EXPERIENCE = "experience"
SAMPLE_REQUEST = "sample_request"
FIFO_REPLY = "fifo_reply"
TRANSITION_REPLY = "transition_reply"
EMPTY_REPLY = "empty_reply"
PRIORITY_UPDATE = "priority_update"
PARAMS = "params"
PARAMS_REQUEST = "params_request"
NOT_MODIFIED = "not_modified"
ERROR = "error"
INFER_REQUEST = "infer_request"
INFER_REPLY = "infer_reply"
GROUP_ORDER = "group_order"  # over torch.distributed, not ZMQ (roles/learner_group.py): its buffers are packed

REPLAY_REQUESTS = frozenset({SAMPLE_REQUEST, PRIORITY_UPDATE})  # what a replay's ROUTER takes
SAMPLE_REPLIES = frozenset({FIFO_REPLY, TRANSITION_REPLY, EMPTY_REPLY, ERROR})  # what a learner's DEALER takes
PARAMS_REPLIES = frozenset({PARAMS, NOT_MODIFIED, ERROR})  # what an actor's DEALER takes
INFERENCE_REQUESTS = frozenset({INFER_REQUEST})  # what an inference worker's ROUTER takes
INFERENCE_REPLIES = frozenset({INFER_REPLY, ERROR})  # what an actor's inference DEALER takes

# Bounds on metadata values. Counters are summed over chunks, shards and a whole run, so each value is kept
# far below 2**63 (msgpack's and numpy's int64) even after a very long run of maximal values.
MAX_VERSION = 2**53
MAX_CHUNK_ENV_STEPS = 10**8  # one message's env steps (ES: whole episodes of every pair)
MAX_TOTAL_ENV_STEPS = 2**53  # a shard's or a learner's running count
MAX_EPISODES = 100_000  # finished episodes listed in one message
MAX_EPISODE_LENGTH = 2**31
MAX_ACTORS = 2**20
MAX_SHARDS = 2**16
MAX_REPORTED_ACTORS = 4096  # distinct actors one sample reply may name
MAX_TEXT = 64  # incarnation ids, error reasons
MAX_BATCH = 2**31  # transitions one sample request may ask for
MAX_HOLD_MS = 60_000  # the longest a ps holds a parameter request for a newer blob
MAX_INFER_ENVS = 4096  # observations in one inference request (one actor's envs)
MAX_REQUEST_ID = 2**53
NO_VERSION = -1  # what an actor that holds no parameters yet runs (and a ps that holds none answers)


# A chunk's arrays nested under this key hold one row per env (`[K, ...]`) instead of one per step: what the
# chunk's K columns start from, such as a recurrent policy's state at its first step (algos/ppo/recurrent.py). Sent
# once per chunk rather than once per step, which for an LSTM's state is most of a chunk's bytes.
PER_ENV = "per_env"
# A chunk's arrays nested under this key have a length of their own (`[N, ...]`), neither T nor K: what its steps
# index into, such as each distinct frame of a chunk of stacked pixel observations, carried once (runtime/
# frame_chunks.py). A field that indexes one names it (`Field.index_of`), and every index is checked against its N.
PER_CHUNK = "per_chunk"


@dataclass
class Chunk:
    """A batch of experience from one actor, plus who made it with what. Arrays are time-major
    `[T, K, ...]` (docs/architecture.md), those under `PER_ENV` `[K, ...]`; ES results use `[1, pairs, ...]`."""

    arrays: dict[str, Any]
    version: int
    actor: int
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    steps: int | None = None  # environment steps behind the chunk when that is not T*K (ES, n-step carry)
    episode_successes: list[bool] = field(default_factory=list)  # one per episode, or none: the env reports none
    incarnation: str = ""  # the learner incarnation whose parameters made it (set by `decode_chunk`)

    @property
    def size(self) -> int:
        """T*K: the units the replay FIFO and the learner's batch count."""
        t, k = lead_dims(self.arrays)
        return t * k

    @property
    def env_steps(self) -> int:
        return self.size if self.steps is None else self.steps


def is_per_env(name: str) -> bool:
    """Whether a flat array name (`a/b`) is one of a chunk's `PER_ENV` arrays."""
    return name.startswith(PER_ENV + "/")


def is_per_chunk(name: str) -> bool:
    """Whether a flat array name (`a/b`) is one of a chunk's `PER_CHUNK` arrays."""
    return name.startswith(PER_CHUNK + "/")


def lead_dims(arrays: Arrays) -> tuple[int, int]:
    """The `[T, K]` every array of a chunk starts with (nested dicts allowed; the `PER_ENV` ones start with its
    `[K]`, the `PER_CHUNK` ones have a length of their own); ValueError otherwise.

    Two arrays with the same T*K but different [T, K] would be paired up transition by transition in the
    wrong order, so the leading dims must agree exactly."""
    leaves = flatten(arrays)
    steps = [(name, array) for name, array in leaves if not is_per_env(name) and not is_per_chunk(name)]
    if not steps:
        raise ValueError("chunk has no arrays" if not leaves else "chunk has only per-env or per-chunk arrays")
    lead = steps[0][1].shape[:2]
    for name, array in steps:
        if array.ndim < 2 or array.shape[:2] != lead:
            raise ValueError(f"{name}: shape {array.shape} does not start with the chunk's [T, K] = {lead}")
    for name, array in leaves:
        if is_per_env(name) and (array.ndim < 1 or array.shape[:1] != lead[1:]):
            raise ValueError(f"{name}: shape {array.shape} does not start with the chunk's K = {lead[1]}")
        if is_per_chunk(name) and array.ndim < 1:
            raise ValueError(f"{name}: a per-chunk array needs a leading dimension")
    return int(lead[0]), int(lead[1])


# -- field readers: one place for "what a valid value is" -----------------------------------------------


def _int(meta: Mapping[str, Any], key: str, low: int, high: int, reason: str, default: int | None = None) -> int:
    value = meta.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ProtocolError(reason, f"{key}={value!r:.40} not an integer in [{low}, {high}]")
    return value


def _text(meta: Mapping[str, Any], key: str, reason: str, default: str | None = None) -> str:
    value = meta.get(key, default)
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ProtocolError(reason, f"{key} is not a string of at most {MAX_TEXT} characters")
    return value


def _episodes(meta: Mapping[str, Any], reason: str) -> tuple[list[float], list[int], list[bool]]:
    """`episode_returns` (finite floats) and `episode_lengths` (non-negative ints), equally long, bounded, and
    `episode_successes` (booleans, or 0/1): absent, empty (the env reports no success) or one per episode."""
    returns, lengths = meta.get("episode_returns", []), meta.get("episode_lengths", [])
    if not isinstance(returns, list) or not isinstance(lengths, list) or len(returns) != len(lengths):
        raise ProtocolError(reason, "episode_returns and episode_lengths must be lists of one length")
    if len(returns) > MAX_EPISODES:
        raise ProtocolError(reason, f"{len(returns)} episodes > {MAX_EPISODES}")
    if not all(isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r) for r in returns):
        raise ProtocolError(reason, "episode_returns must be finite numbers")
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_EPISODE_LENGTH for n in lengths):
        raise ProtocolError(reason, "episode_lengths must be non-negative integers")
    successes = meta.get("episode_successes", [])
    if not isinstance(successes, list) or len(successes) not in (0, len(returns)):
        raise ProtocolError(reason, "episode_successes must be an empty list or one entry per episode")
    if not all(isinstance(x, bool) or (type(x) is int and x in (0, 1)) for x in successes):
        raise ProtocolError(reason, "episode_successes must be booleans (or 0/1)")
    return [float(r) for r in returns], list(lengths), [bool(x) for x in successes]


def _reply_of(message: Message, *kinds: str) -> None:
    """A reply of one of `kinds`: an error reply raises `ProtocolError("error_reply")` with its reason, any other
    kind `ProtocolError("unknown_kind")`."""
    if message.kind == ERROR:
        raise ProtocolError("error_reply", ErrorReply.from_message(message).reason)
    if message.kind not in kinds:
        raise ProtocolError("unknown_kind", message.kind[:32])


# -- experience chunks ----------------------------------------------------------------------------------


def chunk_meta(chunk: Chunk, incarnation: str) -> dict[str, Any]:
    """An experience message's metadata: the parameter version (and learner incarnation) that produced every step,
    the actor, the env steps behind the chunk, and the episodes that finished inside it."""
    return {
        "version": chunk.version,
        "incarnation": incarnation,
        "actor": chunk.actor,
        "env_steps": chunk.env_steps,
        "episode_returns": chunk.episode_returns,
        "episode_lengths": chunk.episode_lengths,
        "episode_successes": chunk.episode_successes,
    }


def chunk_from_meta(arrays: dict[str, Any], meta: Mapping[str, Any], transitions: int) -> Chunk:
    """The chunk `meta` describes over `arrays` (already checked by whoever holds them), its metadata checked:
    `transitions` (T*K) stands in for an absent `env_steps`; `actor` and `incarnation` are optional."""
    returns, lengths, successes = _episodes(meta, "bad_chunk_meta")
    return Chunk(
        arrays,
        _int(meta, "version", 0, MAX_VERSION, "bad_chunk_meta"),
        _int(meta, "actor", 0, MAX_ACTORS, "bad_chunk_meta", default=0),
        returns,
        lengths,
        steps=_int(meta, "env_steps", 0, MAX_CHUNK_ENV_STEPS, "bad_chunk_meta", default=transitions),
        episode_successes=successes,
        incarnation=_text(meta, "incarnation", "bad_chunk_meta", default=""),
    )


def encode_chunk(chunk: Chunk, incarnation: str) -> Message:
    """The experience message an actor sends for `chunk`, made with the parameters of learner `incarnation`."""
    return Message(EXPERIENCE, chunk_meta(chunk, incarnation), chunk.arrays)


def decode_chunk(message: Message, max_steps_per_unit: int | None = None) -> Chunk:
    """Validate an experience message's content: arrays sharing a non-empty leading [T, K], every float
    finite (a diverging simulation's NaN must never reach an optimizer), the metadata's fields, and, given
    the algorithm's `max_steps_per_unit`, env steps its T*K units can stand for (one chunk must not claim
    a whole run)."""
    return _decode_chunk(message.arrays, message.meta, max_steps_per_unit)


def _decode_chunk(arrays: Mapping[str, Any], meta: Mapping[str, Any], max_steps_per_unit: int | None) -> Chunk:
    try:
        t, k = lead_dims(arrays)
    except ValueError as exc:
        raise ProtocolError("bad_chunk", str(exc)[:80]) from None
    if t * k == 0:
        raise ProtocolError("empty_chunk", "a chunk of zero transitions")
    for name, array in flatten(arrays):
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ProtocolError("non_finite", f"{name} holds NaN or infinity")
    chunk = chunk_from_meta(dict(arrays), meta, t * k)
    if max_steps_per_unit is not None and chunk.env_steps > t * k * max_steps_per_unit:
        raise ProtocolError("implausible_env_steps", f"{chunk.env_steps} env steps for {t * k} units")
    return chunk


# -- sample replies -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardReport:
    """What every sample reply reports besides its data: the shard, the env steps it has received in all
    (what an off-policy learner's replay ratio and `total_env_steps` count) and, for transition replays,
    the episodes finished and the actors heard from since its previous reply (an off-policy learner never
    sees chunks; runtime/regimes' `LiveActors` counts the actors)."""

    shard: int
    env_steps: int
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    actors: list[int] = field(default_factory=list)
    episode_successes: list[bool] = field(default_factory=list)

    def to_meta(self) -> dict[str, Any]:
        # Its fields as they are, not `dataclasses.asdict`: that deep-copies every list, on every sample reply.
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> ShardReport:
        returns, lengths, successes = _episodes(meta, "bad_reply_meta")
        actors = meta.get("actors", [])
        if (
            not isinstance(actors, list)
            or len(actors) > MAX_REPORTED_ACTORS
            or not all(type(a) is int and 0 <= a < MAX_ACTORS for a in actors)
        ):
            raise ProtocolError("bad_reply_meta", "actors is not a list of actor indices")
        return cls(
            shard=_int(meta, "shard", 0, MAX_SHARDS, "bad_reply_meta", default=0),
            env_steps=_int(meta, "env_steps", 0, MAX_TOTAL_ENV_STEPS, "bad_reply_meta", default=0),
            episode_returns=returns,
            episode_lengths=lengths,
            actors=actors,
            episode_successes=successes,
        )


@dataclass
class FifoReply:
    """A FIFO shard's reply: whole chunks, oldest first, for an on-policy learner. `refused`: why the learner left
    out chunks it held that its algorithm could not take (their fields: `ReplyLayout`); the others are kept."""

    report: ShardReport
    chunks: list[Chunk]
    refused: list[str] = field(default_factory=list)


@dataclass
class TransitionReply:
    """A transition shard's reply: one batch of sampled transitions (nested keys as in the chunks) with
    `slots` (int64) and `ids` (uint64) to send back with priorities and, when prioritized, `weights` (float32):
    `SAMPLE_ARRAYS`."""

    report: ShardReport
    transitions: dict[str, Any]


# What a transition reply carries beside the sampled fields, by name: where each transition sits in its shard, its
# insertion id (both go home with its priority) and, from a prioritized shard, its importance weight.
SAMPLE_ARRAYS: Mapping[str, np.dtype] = MappingProxyType(
    {"slots": np.dtype(np.int64), "ids": np.dtype(np.uint64), "weights": np.dtype(np.float32)}
)
SLOTS, IDS, WEIGHTS = SAMPLE_ARRAYS  # their names; a uniform shard leaves out WEIGHTS


@dataclass(frozen=True)
class Field:
    """One array of an algorithm's experience, per unit (a chunk's [T, K] cell, one stored transition; for a chunk's
    `PER_ENV` fields, one of its K columns; for its `PER_CHUNK` fields, one of their N rows): its dtype, its shape,
    for an integer field the values it may take (inclusive; None: any its dtype holds), and for an index into a
    `PER_CHUNK` field that field's name (`index_of`: every value must be a row of the same chunk's array)."""

    dtype: np.dtype
    shape: tuple[int, ...] = ()
    low: int | None = None
    high: int | None = None
    index_of: str | None = None


Fields = Mapping[str, Field]  # by flat name (`a/b`, as the codec names nested arrays)

MAX_LAYOUT_FIELDS = 256  # fields of one transition a layout may declare (a reply carries one frame each)
MAX_LAYOUT_ELEMENTS = 1 << 24  # elements of one field (a 4096 x 4096 frame)
LAYOUT_KEYS = frozenset({"dtype", "shape", "low", "high", "index_of"})


def layout_of(fields: Fields) -> dict[str, dict[str, Any]]:
    """`fields` as plain data a config holds (`replay.layout`): {name: {"dtype", "shape", "low", "high"}}, the dtype
    by its NumPy name. What the launcher resolves from the algorithm and the env, for a replay that has neither."""
    layout: dict[str, dict[str, Any]] = {}
    for name, f in fields.items():
        layout[name] = {"dtype": f.dtype.name, "shape": list(f.shape), "low": f.low, "high": f.high}
        if f.index_of is not None:
            layout[name]["index_of"] = f.index_of
    return layout


def fields_of(layout: Mapping[str, Any]) -> dict[str, Field]:
    """The `Fields` a `layout_of` mapping describes; ValueError, one line, for anything else: a name the codec could
    not carry, a dtype it does not, a shape or bounds that are not small non-negative ints."""
    if not isinstance(layout, Mapping) or not 0 < len(layout) <= MAX_LAYOUT_FIELDS:
        raise ValueError(f"a mapping of 1 to {MAX_LAYOUT_FIELDS} fields")
    fields: dict[str, Field] = {}
    for name, spec in layout.items():
        if not isinstance(name, str) or not name or any(not part for part in name.split("/")):
            raise ValueError(f"field name {str(name)[:40]!r} is not a/b names")
        if not isinstance(spec, Mapping) or set(spec) - LAYOUT_KEYS or "dtype" not in spec:
            raise ValueError(f"{name}: not {{dtype, shape, low, high, index_of}}")
        try:
            dtype = np.dtype(str(spec["dtype"]))
        except TypeError:
            raise ValueError(f"{name}: dtype {str(spec['dtype'])[:40]!r} is not a NumPy dtype") from None
        if dtype.str not in ALLOWED_DTYPES:
            raise ValueError(f"{name}: dtype {dtype.name} is not one the wire carries")
        shape = list(spec.get("shape") or [])
        if (
            not all(type(d) is int and d >= 0 for d in shape)
            or len(shape) > 6
            or math.prod(shape) > MAX_LAYOUT_ELEMENTS
        ):
            raise ValueError(f"{name}: shape {shape[:8]} is not a few small non-negative ints")
        low, high = spec.get("low"), spec.get("high")
        if any(bound is not None and type(bound) is not int for bound in (low, high)):
            raise ValueError(f"{name}: bounds must be ints or null")
        index_of = spec.get("index_of")
        if index_of is not None and (dtype.kind not in "iu" or index_of not in layout or not is_per_chunk(index_of)):
            raise ValueError(f"{name}: index_of must name a per-chunk field of the layout, from an integer field")
        fields[name] = Field(dtype, tuple(shape), low, high, index_of)
    return fields


@dataclass(frozen=True)
class ReplyLayout:
    """What a learner takes from its shards, as its algorithm collects it (`surreal.algos` `chunk_fields`):
    `fields`, one unit's arrays (a chunk's cell; a sampled transition is a stored chunk's cell), and for transition
    replies the batch asked for (`transitions`) and whether importance weights come with it (`weighted`). A reply
    that differs would reach the update with a field missing (a KeyError on the learner's main thread), an index
    out of range or silently wrong shapes: the replay cannot check this (it knows neither the env nor the
    algorithm's arrays), so the learner does, in `decode_sample_reply`."""

    fields: Fields
    transitions: int = 0
    weighted: bool = False


def check_fields(leaves: Mapping[str, np.ndarray], fields: Fields, lead: int, reason: str) -> None:
    """`leaves` (flat names) are exactly `fields`: each of its dtype, of its shape after `lead` leading dims (a
    chunk's `PER_ENV` arrays: one fewer, they have no T; its `PER_CHUNK` arrays: their own N), within its bounds, and
    an index (`index_of`) a row of the array it indexes. Raises `ProtocolError(reason)`."""
    if leaves.keys() != fields.keys():
        missing, extra = sorted(fields.keys() - leaves.keys()), sorted(leaves.keys() - fields.keys())
        raise ProtocolError(reason, f"fields missing {missing[:4]}, unexpected {extra[:4]}")
    for name, spec in fields.items():
        array = leaves[name]
        skip = 1 if is_per_chunk(name) else lead - 1 if is_per_env(name) else lead
        if array.dtype != spec.dtype or array.ndim < skip or array.shape[skip:] != spec.shape:
            raise ProtocolError(reason, f"{name}: {array.dtype}{array.shape[skip:]}, not {spec.dtype}{spec.shape}")
        high = spec.high
        if spec.index_of is not None:
            rows = len(leaves[spec.index_of])
            high = rows - 1 if high is None else min(high, rows - 1)
        if array.size and (
            (spec.low is not None and array.min() < spec.low)
            or (high is not None and array.max() > high)
            or (spec.index_of is not None and array.min() < 0)
        ):
            raise ProtocolError(reason, f"{name} outside [{spec.low}, {high}]")


@dataclass
class EmptyReply:
    """A shard had nothing to give within its defer window: only its progress."""

    report: ShardReport


SampleReply = FifoReply | TransitionReply  # a reply holding data: what a learner's feed takes


def encode_sample_reply(reply: FifoReply | TransitionReply | EmptyReply) -> Message:
    """The message a replay shard sends for `reply`. A FIFO reply's chunks nest under "0", "1", ... and their
    metadata is the list `chunks` (replay/buffers.py packs them to fit the learner's limits)."""
    meta = reply.report.to_meta()
    if isinstance(reply, FifoReply):
        return _with_chunks(FIFO_REPLY, meta, reply.chunks)
    if isinstance(reply, TransitionReply):
        return Message(TRANSITION_REPLY, meta, reply.transitions)
    return Message(EMPTY_REPLY, meta)


def _with_chunks(kind: str, meta: dict[str, Any], chunks: list[Chunk]) -> Message:
    """A message of whole chunks (a FIFO reply, a group order): their arrays nest under "0", "1", ... and their
    metadata is the list `chunks` beside `meta`."""
    meta["chunks"] = [chunk_meta(chunk, chunk.incarnation) for chunk in chunks]
    return Message(kind, meta, {str(i): chunk.arrays for i, chunk in enumerate(chunks)})


def _chunk_list(message: Message, reason: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """The (arrays, metadata) of each chunk `_with_chunks` packed, in order and still to be validated;
    `ProtocolError(reason)` where the list and the arrays do not pair up."""
    metas, arrays = message.meta.get("chunks", []), message.arrays
    if not isinstance(metas, list) or len(metas) != len(arrays):
        raise ProtocolError(reason, "chunks list does not match the message's arrays")
    for i, meta in enumerate(metas):
        chunk_arrays = arrays.get(str(i))
        if not isinstance(meta, dict) or not isinstance(chunk_arrays, dict):
            raise ProtocolError(reason, f"chunk {i} malformed")
        yield chunk_arrays, meta


def decode_sample_reply(
    message: Message, shard: int, max_steps_per_unit: int | None = None, layout: ReplyLayout | None = None
) -> FifoReply | TransitionReply | EmptyReply:
    """A reply from replay shard `shard` (by the socket it came on): its progress and its data, a FIFO reply's
    chunks each validated as an experience message is (and, given the learner's `layout`, those with other fields
    left out and listed in `refused`: an actor's chunk must not cost the honest chunks packed with it), a
    transition reply's batch as `_decode_transitions` says. An error reply raises `ProtocolError("error_reply")`."""
    _reply_of(message, EMPTY_REPLY, TRANSITION_REPLY, FIFO_REPLY)
    report = ShardReport.from_meta({**message.meta, "shard": shard})
    if message.kind == EMPTY_REPLY:
        return EmptyReply(report)
    if message.kind == TRANSITION_REPLY:
        return TransitionReply(report, _decode_transitions(message.arrays, layout))
    reply = FifoReply(report, [])
    for chunk_arrays, meta in _chunk_list(message, "bad_reply_meta"):
        chunk = _decode_chunk(chunk_arrays, meta, max_steps_per_unit)
        try:
            if layout is not None:
                check_fields(dict(flatten(chunk_arrays)), layout.fields, 2, "bad_chunk_fields")
        except ProtocolError as exc:
            reply.refused.append(exc.reason)
            continue
        reply.chunks.append(chunk)
    return reply


def _decode_transitions(arrays: dict[str, Any], layout: ReplyLayout | None) -> dict[str, Any]:
    """A transition batch, checked before anything reads it: every array one row per transition (N of them, at
    least one field besides `SAMPLE_ARRAYS`), `slots` and `ids` of their dtypes, `weights` (if any) float32 and
    non-negative, every float finite; with `layout`, exactly its fields, dtypes and shapes, its N, and weights
    exactly when it is weighted. Raises `ProtocolError("bad_transitions" | "non_finite")`."""
    leaves = dict(flatten(arrays))
    if any(array.ndim == 0 for array in leaves.values()) or len({len(a) for a in leaves.values()}) > 1:
        raise ProtocolError("bad_transitions", "arrays do not share one leading transition dimension")
    weighted = WEIGHTS in leaves
    for name, dtype in SAMPLE_ARRAYS.items():
        array = leaves.pop(name, None)
        if array is None and name == WEIGHTS:
            continue
        if array is None or array.ndim != 1 or array.dtype != dtype:
            raise ProtocolError("bad_transitions", f"{name} must be a 1-d {dtype} array")
        if name == WEIGHTS and not (array >= 0).all():  # NaN fails too
            raise ProtocolError("non_finite", "importance weights must be finite and >= 0")
    if not leaves:
        raise ProtocolError("bad_transitions", "no sampled fields")
    n = len(next(iter(leaves.values())))
    if n == 0:
        raise ProtocolError("bad_transitions", "zero transitions")
    if layout is not None:
        if n != layout.transitions:
            raise ProtocolError("bad_transitions", f"{n} transitions, not the {layout.transitions} asked for")
        if weighted != layout.weighted:
            raise ProtocolError("bad_transitions", f"{WEIGHTS} {'missing' if layout.weighted else 'unexpected'}")
        check_fields(leaves, layout.fields, 1, "bad_transitions")
    for name, array in leaves.items():
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ProtocolError("non_finite", f"{name} holds NaN or infinity")
    return arrays


# -- requests, priorities, errors -----------------------------------------------------------------------


@dataclass(frozen=True)
class SampleRequest:
    """A learner asks a shard for `batch_size` transitions (a FIFO: at most that many, whole chunks), to be
    answered once the shard holds `ready_at` (default: the batch size; an off-policy learner asks for several
    minibatches but can learn once one is held). `episodes`: the reply's report hands over the episodes finished
    and the actors heard since the last one that did; False for a learner group's ranks 1..K-1, which sample
    their own minibatches but leave that count to rank 0 (its env-step count they get all the same)."""

    batch_size: int
    ready_at: int | None = None
    episodes: bool = True

    @property
    def threshold(self) -> int:
        """Transitions the shard must hold to answer with data."""
        return self.batch_size if self.ready_at is None else min(self.ready_at, self.batch_size)

    def to_message(self) -> Message:
        meta: dict[str, Any] = {"batch_size": self.batch_size}
        if self.ready_at is not None:
            meta["ready_at"] = min(self.ready_at, self.batch_size)
        if not self.episodes:
            meta["with_episodes"] = False
        return Message(SAMPLE_REQUEST, meta)

    @classmethod
    def from_message(cls, message: Message) -> SampleRequest:
        batch_size = _int(message.meta, "batch_size", 1, MAX_BATCH, "bad_request")
        ready_at = message.meta.get("ready_at")
        episodes = message.meta.get("with_episodes", True)
        if not isinstance(episodes, bool):
            raise ProtocolError("bad_request", f"episodes {episodes!r:.32} is not a boolean")
        return cls(
            batch_size,
            None if ready_at is None else _int(message.meta, "ready_at", 1, batch_size, "bad_request"),
            episodes,
        )


@dataclass
class PriorityUpdate:
    """New priorities (|TD error|) for the `slots` of a shard, with the insertion `ids` the learner sampled
    them under (a slot overwritten since keeps its priority: replay/buffers.py)."""

    slots: np.ndarray
    ids: np.ndarray
    priorities: np.ndarray

    def to_message(self) -> Message:
        return Message(PRIORITY_UPDATE, {}, {"slots": self.slots, "ids": self.ids, "priorities": self.priorities})

    @classmethod
    def from_message(cls, message: Message) -> PriorityUpdate:
        """Three 1-d arrays of one length: `slots` and `ids` as a transition reply carried them (`SAMPLE_ARRAYS`),
        finite float priorities. Exact index dtypes mean nothing here grows a peer's array: one of int8 slots
        made int64 would be 8 times the bytes the message limit allowed."""
        arrays = message.arrays
        try:
            slots, ids, priorities = (arrays[key] for key in ("slots", "ids", "priorities"))
        except KeyError:
            raise ProtocolError("bad_priorities", "slots, ids and priorities are required") from None
        if not all(isinstance(a, np.ndarray) and a.ndim == 1 for a in (slots, ids, priorities)):
            raise ProtocolError("bad_priorities", "slots, ids and priorities must be 1-d arrays")
        if not len(slots) == len(ids) == len(priorities):
            raise ProtocolError("bad_priorities", "slots, ids and priorities differ in length")
        if slots.dtype != SAMPLE_ARRAYS[SLOTS] or ids.dtype != SAMPLE_ARRAYS[IDS] or priorities.dtype.itemsize < 4:
            raise ProtocolError("bad_priorities", "int64 slots, uint64 ids, float32 or float64 priorities")
        if priorities.dtype.kind != "f" or not np.isfinite(priorities).all():
            raise ProtocolError("bad_priorities", "priorities must be finite floats")
        return cls(slots, ids, priorities.astype(np.float64))


@dataclass(frozen=True)
class ErrorReply:
    """A server refused a request; `reason` is the label it counted the request under."""

    reason: str

    def to_message(self) -> Message:
        return Message(ERROR, {"reason": self.reason})

    @classmethod
    def from_message(cls, message: Message) -> ErrorReply:
        return cls(_text(message.meta, "reason", "bad_error_reply"))


# -- parameter blobs ------------------------------------------------------------------------------------


def supersedes(blob: tuple[int, str], held: tuple[int, str]) -> bool:
    """Whether the parameter blob `blob` (version, incarnation) replaces `held`: a higher version does, and so
    does any version from another learner incarnation (a resumed learner restarts at its checkpoint's version).
    The one rule for the ps, over ZMQ (roles/ps.py) and in process (roles/ports.py): by it a ps takes the
    learner's blob, and answers an actor that runs `held` with the blob or "not modified"."""
    (version, incarnation), (held_version, held_incarnation) = blob, held
    return incarnation != held_incarnation or version > held_version


@dataclass(frozen=True)
class BlobMeta:
    """A parameter blob's metadata. `incarnation` names the learner process (a resumed learner restarts at
    its checkpoint's version under a new one); `done` ends training; `env_steps` is what the learner has
    counted; `env_step_budget` (off-policy flow control, runtime/regimes/replay_ratio.py) the env steps the
    actors together may have taken by now, None when unthrottled; `actors` how many actors the learner hears
    from (the actors' shares follow it), None before it has heard from any."""

    version: int
    incarnation: str
    done: bool = False
    env_steps: int = 0
    env_step_budget: int | None = None
    actors: int | None = None

    def to_meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "version": self.version,
            "incarnation": self.incarnation,
            "done": self.done,
            "env_steps": self.env_steps,
        }
        if self.env_step_budget is not None:
            meta["env_step_budget"] = self.env_step_budget
        if self.actors is not None:
            meta["actors"] = self.actors
        return meta

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> BlobMeta:
        done = meta.get("done", False)
        if not isinstance(done, bool):
            raise ProtocolError("bad_blob_meta", "done is not a boolean")
        budget, actors = meta.get("env_step_budget"), meta.get("actors")
        return cls(
            version=_int(meta, "version", 0, MAX_VERSION, "bad_blob_meta"),
            incarnation=_text(meta, "incarnation", "bad_blob_meta"),
            done=done,
            env_steps=_int(meta, "env_steps", 0, MAX_TOTAL_ENV_STEPS, "bad_blob_meta", default=0),
            env_step_budget=None
            if budget is None
            else _int(meta, "env_step_budget", 0, MAX_TOTAL_ENV_STEPS, "bad_blob_meta"),
            actors=None if actors is None else _int(meta, "actors", 1, MAX_ACTORS, "bad_blob_meta"),
        )


@dataclass
class Params:
    """A parameter blob: its metadata and its arrays (weights, normalizer statistics), opaque to the ps."""

    blob: BlobMeta
    arrays: dict[str, Any]


def encode_params(params: Params) -> Message:
    return Message(PARAMS, params.blob.to_meta(), params.arrays)


def decode_params(message: Message) -> Params:
    return Params(BlobMeta.from_meta(message.meta), message.arrays)


@dataclass(frozen=True)
class ParamsRequest:
    """An actor that runs (`version`, `incarnation`) asks a ps for anything newer (`supersedes`); with
    `hold_ms` > 0, a ps holding nothing newer holds the request that long for the next blob (a long poll).

    `wake_version` (held requests only): the first version of the same incarnation that can let this actor
    act again (flow control knows: an actor whose share is a fraction of a chunk needs several versions).
    Blobs below it do not answer the request, so a version is fanned out to the actors it frees, not to every
    waiting one; when the hold ends the ps says "not modified" with the version it holds (how far the learner
    got), and when the learner goes quiet it sends what it holds whatever the wake version (roles/ps.py).
    0: any newer blob answers."""

    version: int
    incarnation: str
    hold_ms: int = 0
    wake_version: int = 0

    @property
    def held(self) -> tuple[int, str]:
        return self.version, self.incarnation

    def wakes(self, version: int, incarnation: str) -> bool:
        """Whether a held blob of (`version`, `incarnation`) that supersedes the actor's answers this request."""
        return incarnation != self.incarnation or version >= self.wake_version

    def to_message(self) -> Message:
        meta: dict[str, Any] = {"version": self.version, "incarnation": self.incarnation}
        if self.hold_ms:
            meta["hold_ms"] = min(MAX_HOLD_MS, self.hold_ms)
            if self.wake_version > self.version + 1:
                meta["wake_version"] = self.wake_version
        return Message(PARAMS_REQUEST, meta)

    @classmethod
    def from_message(cls, message: Message) -> ParamsRequest:
        meta = message.meta
        return cls(
            _int(meta, "version", NO_VERSION, MAX_VERSION, "bad_request"),
            _text(meta, "incarnation", "bad_request"),
            _int(meta, "hold_ms", 0, MAX_HOLD_MS, "bad_request", default=0),
            _int(meta, "wake_version", 0, MAX_VERSION, "bad_request", default=0),
        )


@dataclass(frozen=True)
class NotModified:
    """A ps holds nothing newer than what the actor runs, or nothing up to the request's `wake_version`; it says
    what it holds (`NO_VERSION` before any)."""

    version: int
    incarnation: str

    def to_message(self) -> Message:
        return Message(NOT_MODIFIED, {"version": self.version, "incarnation": self.incarnation})

    @classmethod
    def from_message(cls, message: Message) -> NotModified:
        return cls(
            _int(message.meta, "version", NO_VERSION, MAX_VERSION, "bad_blob_meta"),
            _text(message.meta, "incarnation", "bad_blob_meta"),
        )


def decode_params_reply(message: Message) -> Params | NotModified:
    """A ps's answer to a `ParamsRequest`; an error reply raises `ProtocolError("error_reply")`."""
    _reply_of(message, PARAMS, NOT_MODIFIED)
    return NotModified.from_message(message) if message.kind == NOT_MODIFIED else decode_params(message)


# -- the learner group: rank 0's orders to the other ranks ----------------------------------------------

GROUP_OPS = ("update", "heartbeat", "stop", "finish")


@dataclass
class GroupOrder:
    """What rank 0 of a data-parallel learner group (`learner.replicas`) tells the other ranks in a round:
    `update` (on-policy: the batch's `chunks` and the schedule's `progress`, learned from as rank 0 learns from
    them; off-policy: `steps` gradient steps on each rank's own samples), `heartbeat` (nothing yet: rank 0 waits for
    data, and the ranks' waits stay within the group's timeout), `stop` (rank 0 saved a checkpoint on a signal)
    or `finish` (training is done)."""

    op: str
    progress: float = 0.0
    steps: int = 0
    chunks: list[Chunk] = field(default_factory=list)


def encode_group_order(order: GroupOrder) -> Message:
    """The chunks nest under "0", "1", ... with their metadata as the list `chunks`, as in a FIFO reply."""
    meta: dict[str, Any] = {"op": order.op, "progress": order.progress, "gradient_steps": order.steps}
    return _with_chunks(GROUP_ORDER, meta, order.chunks)


def decode_group_order(message: Message, layout: ReplyLayout | None = None) -> GroupOrder:
    """An order, checked as every message is: its op, a `progress` in [0, 1], a bounded `steps`, and every chunk
    validated as an experience message is (with `layout`, its fields exactly the algorithm's). Unlike a FIFO reply,
    a chunk that fails refuses the whole order: rank 0 learned from it, so another rank must not learn without it."""
    if message.kind != GROUP_ORDER:
        raise ProtocolError("unknown_kind", message.kind[:32])
    meta = message.meta
    op, progress = meta.get("op"), meta.get("progress")
    if op not in GROUP_OPS:
        raise ProtocolError("bad_group_order", f"op {op!r:.32}")
    if not isinstance(progress, int | float) or isinstance(progress, bool) or not 0.0 <= progress <= 1.0:
        raise ProtocolError("bad_group_order", f"progress {progress!r:.32} not in [0, 1]")
    steps = _int(meta, "gradient_steps", 0, MAX_BATCH, "bad_group_order")
    chunks = []
    for chunk_arrays, listed_meta in _chunk_list(message, "bad_group_order"):
        chunks.append(_decode_chunk(chunk_arrays, listed_meta, None))
        if layout is not None:
            check_fields(dict(flatten(chunk_arrays)), layout.fields, 2, "bad_chunk_fields")
    return GroupOrder(op, float(progress), steps, chunks)


# -- central inference: actor <-> inference worker --------------------------------------------------------

NO_PARAMS = "no_params"  # an inference worker's error reply before it holds any parameters


def _rows(array: Any, name: str, reason: str, rows: int | None = None) -> np.ndarray:
    """A numpy array of at least one dimension whose float values are finite (and with `rows`, that many rows)."""
    if not isinstance(array, np.ndarray) or array.ndim < 1:
        raise ProtocolError(reason, f"{name} is not an array of rows")
    if rows is not None and len(array) != rows:
        raise ProtocolError(reason, f"{name} has {len(array)} rows, not {rows}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ProtocolError("non_finite", f"{name} holds NaN or infinity")
    return array


@dataclass
class InferRequest:
    """An actor in central mode asks an inference worker to act for its envs: `obs` float32 [n_envs, obs_dim]
    (1 <= n_envs <= MAX_INFER_ENVS), `request` its id (a reply names it; a late reply to an earlier id is dropped),
    and the (`version`, `incarnation`) of the parameters the actor's flow control runs: a worker holding older ones
    asks the ps before it acts, so the chunk's steps are made with what the actor was allowed to use."""

    actor: int
    request: int
    version: int
    incarnation: str
    obs: np.ndarray

    def to_message(self) -> Message:
        meta = {"actor": self.actor, "request": self.request, "version": self.version, "incarnation": self.incarnation}
        return Message(INFER_REQUEST, meta, {"observations": self.obs})

    @classmethod
    def from_message(cls, message: Message, obs_dim: int | None = None) -> InferRequest:
        """With `obs_dim`, the observations must have exactly that width (the worker's policy's)."""
        meta, reason = message.meta, "bad_infer_request"
        obs = _rows(message.arrays.get("observations"), "observations", reason)
        if set(message.arrays) != {"observations"} or obs.ndim != 2 or obs.dtype != np.float32:
            raise ProtocolError(reason, "observations must be the only array, float32 [n_envs, obs_dim]")
        if not 1 <= len(obs) <= MAX_INFER_ENVS or (obs_dim is not None and obs.shape[1] != obs_dim):
            raise ProtocolError(reason, f"observations of shape {obs.shape}: want [1..{MAX_INFER_ENVS}, {obs_dim}]")
        return cls(
            _int(meta, "actor", 0, MAX_ACTORS, reason),
            _int(meta, "request", 0, MAX_REQUEST_ID, reason),
            _int(meta, "version", NO_VERSION, MAX_VERSION, reason),
            _text(meta, "incarnation", reason),
            obs,
        )


@dataclass
class InferReply:
    """A worker's answer to `request`: the actions to give the envs (`env_actions`, one row per env) and what the
    actor's chunk records per step (`record`: for PPO the sampled actions and their log-probabilities, exactly what
    the policy's `act` returns), made with the parameters (`version`, `incarnation`)."""

    request: int
    version: int
    incarnation: str
    env_actions: np.ndarray
    record: dict[str, np.ndarray]

    def to_message(self) -> Message:
        meta = {"request": self.request, "version": self.version, "incarnation": self.incarnation}
        return Message(INFER_REPLY, meta, {"env_actions": self.env_actions, "record": self.record})

    @classmethod
    def from_message(cls, message: Message, n_envs: int) -> InferReply:
        """Checked against the `n_envs` the request asked for: every array one row per env, every float finite, the
        record a flat mapping of arrays. An error reply raises `ProtocolError("error_reply")` with its reason."""
        _reply_of(message, INFER_REPLY)
        meta, arrays, reason = message.meta, message.arrays, "bad_infer_reply"
        record = arrays.get("record", {})
        if set(arrays) - {"env_actions", "record"} or not isinstance(record, dict) or not record:
            raise ProtocolError(reason, "env_actions and a non-empty record are the only arrays")
        env_actions = _rows(arrays.get("env_actions"), "env_actions", reason, n_envs)
        checked = {str(k): _rows(v, f"record/{k}", reason, n_envs) for k, v in record.items()}
        return cls(
            _int(meta, "request", 0, MAX_REQUEST_ID, reason),
            _int(meta, "version", 0, MAX_VERSION, reason),
            _text(meta, "incarnation", reason),
            env_actions,
            checked,
        )
