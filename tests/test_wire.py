"""The typed wire content (proto/wire.py) and what a replay shard does with hostile but well-framed messages:
every field validated where it is decoded, bad content counted and dropped, nothing raised."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import free_port
from surreal.proto.channels import ParamPublisher, frames_of, make_socket, send
from surreal.proto.codec import Limits, Message, ProtocolError, decode, encode
from surreal.proto.wire import (
    ERROR,
    EXPERIENCE,
    FIFO_REPLY,
    MAX_CHUNK_ENV_STEPS,
    NO_VERSION,
    PARAMS,
    PARAMS_REQUEST,
    PER_ENV,
    PRIORITY_UPDATE,
    SAMPLE_REQUEST,
    TRANSITION_REPLY,
    BlobMeta,
    Chunk,
    EmptyReply,
    ErrorReply,
    Field,
    FifoReply,
    NotModified,
    Params,
    ParamsRequest,
    PriorityUpdate,
    ReplyLayout,
    SampleRequest,
    ShardReport,
    TransitionReply,
    chunk_meta,
    decode_chunk,
    decode_params,
    decode_params_reply,
    decode_sample_reply,
    encode_chunk,
    encode_params,
    encode_sample_reply,
    supersedes,
)
from surreal.replay.buffers import TransitionStorage
from surreal.replay.samplers import MAX_PRIORITY, PrioritizedSampler
from surreal.replay.shard import ReplayShard
from surreal.roles import ps as ps_role
from surreal.roles import replay as replay_role
from surreal.roles.ports import InProcessParams
from surreal.roles.ps import ParamServer
from surreal.roles.replay import MAX_PENDING_PER_PEER, ReplayServer


def chunk(value: float = 1.0, T: int = 4, K: int = 2, actor: int = 1) -> Chunk:
    arrays = {"obs": np.full((T, K, 3), value, np.float32), "rewards": np.full((T, K), value, np.float32)}
    return Chunk(arrays, version=3, actor=actor, episode_returns=[2.5], episode_lengths=[7])


def parts(message: Message) -> tuple[dict, dict]:
    """(meta, arrays) of a message, for tests that tamper with one before decoding."""
    return message.meta, message.arrays


def decode_parts(arrays: dict, meta: dict, max_steps_per_unit: int | None = None) -> Chunk:
    return decode_chunk(Message(EXPERIENCE, meta, arrays), max_steps_per_unit)


def over_the_wire(message: Message) -> Message:
    """`message` framed and decoded again, as a peer receives it."""
    return decode(frames_of(message))


def test_a_chunk_round_trips_through_its_encoder_and_decoder():
    message = over_the_wire(encode_chunk(chunk(), incarnation="abc"))
    decoded = decode_chunk(message)
    assert message.kind == EXPERIENCE and chunk_meta(decoded, "abc") == message.meta
    assert (decoded.version, decoded.actor, decoded.size, decoded.env_steps, decoded.incarnation) == (3, 1, 8, 8, "abc")
    assert (decoded.episode_returns, decoded.episode_lengths, decoded.episode_successes) == ([2.5], [7], [])


def test_every_message_kind_round_trips_through_its_one_encoder_and_decoder():
    report = ShardReport(0, 40, [2.5], [7], actors=[1])
    fifo = over_the_wire(encode_sample_reply(FifoReply(report, [decode_chunk(encode_chunk(chunk(), "abc"))] * 2)))
    got = decode_sample_reply(fifo, shard=2)
    assert fifo.kind == FIFO_REPLY and isinstance(got, FifoReply)
    assert [(c.version, c.incarnation) for c in got.chunks] == [(3, "abc")] * 2 and got.report.shard == 2
    batch = {"obs": np.zeros((4, 3), np.float32), "slots": np.arange(4), "ids": np.arange(4, dtype=np.uint64)}
    transitions = over_the_wire(encode_sample_reply(TransitionReply(report, batch)))
    got = decode_sample_reply(transitions, shard=0)
    assert transitions.kind == TRANSITION_REPLY and isinstance(got, TransitionReply) and got.report == report
    assert decode_sample_reply(over_the_wire(encode_sample_reply(EmptyReply(report))), shard=0) == EmptyReply(report)
    with pytest.raises(ProtocolError, match="error_reply"):
        decode_sample_reply(over_the_wire(ErrorReply("bad_request").to_message()), shard=0)
    for request in (SampleRequest(64), SampleRequest(128, ready_at=32)):
        assert SampleRequest.from_message(over_the_wire(request.to_message())) == request
    update = PriorityUpdate(np.arange(3), np.arange(3, dtype=np.uint64), np.ones(3))
    decoded = PriorityUpdate.from_message(over_the_wire(update.to_message()))
    assert all(np.array_equal(a, b) for a, b in zip(vars(decoded).values(), vars(update).values(), strict=True))
    for request in (ParamsRequest(-1, ""), ParamsRequest(4, "a", hold_ms=500), ParamsRequest(4, "a", 500, 9)):
        assert ParamsRequest.from_message(over_the_wire(request.to_message())) == request
    params = Params(BlobMeta(5, "inc", env_steps=10), {"w": np.ones(3, np.float32)})
    assert decode_params(over_the_wire(encode_params(params))).blob == params.blob
    assert decode_params_reply(over_the_wire(NotModified(-1, "").to_message())) == NotModified(-1, "")
    assert ErrorReply.from_message(over_the_wire(ErrorReply("too_many_pending").to_message())).reason


@pytest.mark.parametrize(
    ("decoder", "meta", "arrays"),
    [
        (SampleRequest.from_message, {"batch_size": 0}, {}),
        (SampleRequest.from_message, {"batch_size": 64, "ready_at": 65}, {}),
        (SampleRequest.from_message, {"batch_size": "64"}, {}),
        (ParamsRequest.from_message, {"version": -2, "incarnation": ""}, {}),
        (ParamsRequest.from_message, {"version": 1, "incarnation": "", "hold_ms": 60_001}, {}),
        (ParamsRequest.from_message, {"version": 1}, {}),
        (ParamsRequest.from_message, {"version": 1, "incarnation": "", "hold_ms": 5, "wake_version": -1}, {}),
        (NotModified.from_message, {"version": 1.0, "incarnation": ""}, {}),
        (ErrorReply.from_message, {"reason": 3}, {}),
        (PriorityUpdate.from_message, {}, {"slots": np.arange(2), "ids": np.arange(3)}),
        (PriorityUpdate.from_message, {}, {"slots": np.arange(2), "ids": np.arange(2), "priorities": np.ones(3)}),
        (PriorityUpdate.from_message, {}, {"slots": np.ones(2), "ids": np.arange(2), "priorities": np.ones(2)}),
        (
            PriorityUpdate.from_message,
            {},
            {"slots": np.arange(1), "ids": np.arange(1), "priorities": np.full(1, np.nan)},
        ),
    ],
)
def test_every_request_and_reply_decoder_refuses_bad_content_with_a_reason(decoder, meta, arrays):
    with pytest.raises(ProtocolError) as caught:
        decoder(Message("any", meta, arrays))
    assert caught.value.reason


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"version": 1.5}, "bad_chunk_meta"),
        ({"version": -1}, "bad_chunk_meta"),
        ({"version": True}, "bad_chunk_meta"),
        ({"env_steps": MAX_CHUNK_ENV_STEPS + 1}, "bad_chunk_meta"),
        ({"env_steps": 2**64 - 1}, "bad_chunk_meta"),
        ({"episode_returns": [math.nan], "episode_lengths": [3]}, "bad_chunk_meta"),
        ({"episode_returns": [1.0], "episode_lengths": [math.inf]}, "bad_chunk_meta"),
        ({"episode_returns": [1.0, 2.0], "episode_lengths": [3]}, "bad_chunk_meta"),
        ({"episode_returns": "x"}, "bad_chunk_meta"),
        ({"incarnation": "x" * 1000}, "bad_chunk_meta"),
        ({"episode_successes": [True, False]}, "bad_chunk_meta"),
        ({"episode_successes": [2]}, "bad_chunk_meta"),
        ({"episode_successes": [1.0]}, "bad_chunk_meta"),
        ({"episode_successes": ["yes"]}, "bad_chunk_meta"),
        ({"episode_successes": None}, "bad_chunk_meta"),
        ({"episode_successes": True}, "bad_chunk_meta"),
    ],
)
def test_out_of_range_chunk_metadata_is_refused_with_a_reason(change, reason):
    meta, arrays = parts(encode_chunk(chunk(), incarnation="abc"))
    with pytest.raises(ProtocolError) as caught:
        decode_parts(arrays, {**meta, **change})
    assert caught.value.reason == reason


@pytest.mark.parametrize(("bad", "reason"), [(math.nan, "non_finite"), (math.inf, "non_finite")])
def test_non_finite_observations_or_rewards_never_pass(bad, reason):
    for key in ("obs", "rewards"):
        meta, arrays = parts(encode_chunk(chunk(), incarnation=""))
        arrays[key] = arrays[key].copy()
        arrays[key].flat[3] = bad
        with pytest.raises(ProtocolError) as caught:
            decode_parts(arrays, meta)
        assert caught.value.reason == reason


def test_empty_and_ragged_chunks_are_refused():
    meta, arrays = parts(encode_chunk(chunk(T=4), incarnation=""))
    with pytest.raises(ProtocolError, match="empty_chunk"):
        decode_parts({k: v[:0] for k, v in arrays.items()}, meta)
    with pytest.raises(ProtocolError, match="bad_chunk"):
        decode_parts({**arrays, "rewards": np.zeros((3, 2), np.float32)}, meta)


def test_per_env_arrays_travel_once_per_chunk_column_and_are_checked_against_its_k():
    """A chunk's `per_env` arrays (a recurrent policy's start state) are [K, ...]: they pass a FIFO reply and the
    learner's field check with the chunk's other arrays; another K, no other arrays, or a transition replay are
    refused."""
    with_state = chunk(T=4, K=2)
    with_state.arrays[PER_ENV] = {"rnn_state": np.arange(2 * 2 * 3, dtype=np.float32).reshape(2, 2, 3)}
    assert with_state.size == 8, "per-env rows are no transitions"
    meta, arrays = parts(over_the_wire(encode_chunk(with_state, incarnation="abc")))
    decoded = decode_parts(arrays, meta)
    np.testing.assert_array_equal(decoded.arrays[PER_ENV]["rnn_state"], with_state.arrays[PER_ENV]["rnn_state"])
    fields = {"obs": Field(np.dtype(np.float32), (3,)), "rewards": Field(np.dtype(np.float32))}
    layout = ReplyLayout({**fields, f"{PER_ENV}/rnn_state": Field(np.dtype(np.float32), (2, 3))})
    reply = over_the_wire(encode_sample_reply(FifoReply(ShardReport(0, 8), [decoded, chunk()])))
    got = decode_sample_reply(reply, shard=0, layout=layout)
    assert len(got.chunks) == 1 and got.refused == ["bad_chunk_fields"], "the chunk without a start state is refused"
    np.testing.assert_array_equal(got.chunks[0].arrays[PER_ENV]["rnn_state"], with_state.arrays[PER_ENV]["rnn_state"])
    for bad in (np.zeros((3, 2, 3), np.float32), np.zeros((), np.float32)):  # K of 3, no K at all
        with pytest.raises(ProtocolError, match="bad_chunk"):
            decode_parts({**arrays, PER_ENV: {"rnn_state": bad}}, meta)
    with pytest.raises(ProtocolError, match="bad_chunk"):
        decode_parts({PER_ENV: arrays[PER_ENV]}, meta)
    shard = ReplayShard("uniform", capacity=100)
    with pytest.raises(ValueError, match="learned from whole"):
        shard.add(encode_chunk(with_state, incarnation="abc"))
    assert shard.env_steps_in == 0


def test_episode_successes_travel_beside_returns_and_are_optional():
    successful = chunk()
    successful.episode_successes = [True]
    meta, arrays = parts(encode_chunk(successful, incarnation="abc"))
    assert decode_parts(arrays, meta).episode_successes == [True]
    assert decode_parts(arrays, {**meta, "episode_successes": [0]}).episode_successes == [False], "0/1 too"
    assert decode_parts(arrays, {k: v for k, v in meta.items() if k != "episode_successes"}).episode_successes == []
    report = ShardReport(1, 10, [5.0, 1.0], [3, 3], actors=[0], episode_successes=[True, False])
    assert ShardReport.from_meta(report.to_meta()) == report
    with pytest.raises(ProtocolError, match="bad_reply_meta"):
        ShardReport.from_meta({**report.to_meta(), "episode_successes": [True]})


def test_a_transition_shard_forwards_successes_only_while_every_episode_has_one():
    shard = ReplayShard("uniform", 100)
    with_success, without = chunk(), chunk()
    with_success.episode_successes = [True]
    shard.add(encode_chunk(with_success, incarnation="a"))
    assert shard.report().episode_successes == [True]
    shard.add(encode_chunk(with_success, incarnation="a"))
    shard.add(encode_chunk(without, incarnation="a"))
    report = shard.report()
    assert report.episode_returns == [2.5, 2.5] and report.episode_successes == [], "unpaired: none forwarded"


def test_reply_and_blob_metadata_are_typed_and_bounded():
    assert ShardReport.from_meta({"shard": 2, "env_steps": 10}) == ShardReport(2, 10)
    with pytest.raises(ProtocolError, match="bad_reply_meta"):
        ShardReport.from_meta({"shard": 0, "env_steps": 2**63})
    report = ShardReport(1, 10, [5.0], [3], actors=[0, 7])
    assert ShardReport.from_meta(report.to_meta()) == report
    for actors in ([-1], ["0"], [True], 3, list(range(5000))):
        with pytest.raises(ProtocolError, match="bad_reply_meta"):
            ShardReport.from_meta({**report.to_meta(), "actors": actors})
    blob = BlobMeta(5, "inc", done=True, env_steps=100, env_step_budget=140, actors=3)
    assert BlobMeta.from_meta(blob.to_meta()) == blob
    assert BlobMeta.from_meta({"version": 1, "incarnation": "a"}).actors is None, "absent: the configured count"
    for bad in ({"done": "yes"}, {"version": "5"}, {"env_step_budget": -1}, {"actors": 0}, {"actors": 1.5}):
        with pytest.raises(ProtocolError, match="bad_blob_meta"):
            BlobMeta.from_meta({**blob.to_meta(), **bad})


def test_a_transition_shard_reports_each_actor_heard_once():
    shard = ReplayShard("uniform", 100)
    for actor in (3, 1, 3):
        meta, arrays = parts(encode_chunk(chunk(actor=actor), incarnation=""))
        shard.add(Message(EXPERIENCE, meta, arrays))
    assert shard.report().actors == [1, 3]
    assert shard.report().actors == [], "handed over once"


def test_a_group_ranks_requests_leave_the_episodes_and_actors_to_rank_0s():
    """A learner group's ranks after the first sample with `episodes=False`: their replies carry the shard's env-step
    count, and the finished episodes and actors heard wait for rank 0's next request (which counts them)."""
    from surreal.roles.replay import ReplayCore

    shard = ReplayShard("uniform", 100)
    for actor in (3, 1):
        shard.add(encode_chunk(chunk(actor=actor), incarnation="a"))
    answers: list = []
    core = ReplayCore(shard, lambda peer, reply: answers.append((peer, reply)), lambda reason, peer: None)
    follower = SampleRequest(4, episodes=False)
    assert SampleRequest.from_message(follower.to_message()) == follower
    assert SampleRequest.from_message(SampleRequest(4).to_message()).episodes, "absent: episodes handed over"
    core.on_request("rank1", follower.to_message(), 0.0)
    core.serve(0.0)
    report = answers[-1][1].report
    assert (report.env_steps, report.episode_returns, report.actors) == (16, [], [])
    core.on_request("rank0", SampleRequest(4).to_message(), 0.0)
    core.serve(0.0)
    report = answers[-1][1].report
    assert (report.env_steps, report.episode_returns, report.actors) == (16, [2.5, 2.5], [1, 3])
    with pytest.raises(ProtocolError, match="bad_request"):
        SampleRequest.from_message(Message(SAMPLE_REQUEST, {"batch_size": 4, "with_episodes": "no"}))


def test_a_replay_shard_refuses_bad_content_and_keeps_its_books_right():
    shard = ReplayShard("uniform", 100)
    meta, arrays = parts(encode_chunk(chunk(), incarnation=""))
    assert shard.add(Message(EXPERIENCE, meta, arrays)) == 8
    nan = {**arrays, "rewards": np.full((4, 2), math.nan, np.float32)}
    with pytest.raises(ProtocolError):
        shard.add(Message(EXPERIENCE, meta, nan))
    assert shard.stats()["size"] == 8 and shard.env_steps_in == 8, "nothing of the refused chunk counted"


def test_a_huge_priority_is_clamped_so_other_weights_stay_meaningful():
    storage, sampler = TransitionStorage(8), PrioritizedSampler(8, alpha=0.6, beta=0.4, eps=1e-6)
    slots = storage.write({"x": np.zeros((8, 1), np.float32)})
    sampler.on_add(slots)
    sampler.update_priorities(storage, slots, storage.ids[slots], np.array([1e308] + [1.0] * 7))
    _, weights = sampler.sample(storage, 64, np.random.default_rng(0))
    assert sampler.max_priority == pytest.approx(MAX_PRIORITY + 1e-6)
    assert weights.min() > 1e-3, "a slot of priority 1 still has a usable importance weight"
    with pytest.raises(ValueError, match="finite"):
        sampler.update_priorities(storage, slots[:1], storage.ids[slots[:1]], np.array([math.nan]))


# -- a replay server in this process: parked requests ---------------------------------------------------


@pytest.fixture
def server():
    ctx = zmq.Context()
    exp, sample = free_port(), free_port()
    shard = ReplayShard("prioritized", 1000)
    replay = ReplayServer(ctx, f"tcp://127.0.0.1:{exp}", f"tcp://127.0.0.1:{sample}", shard)
    clients: list[zmq.Socket] = []

    def client(kind: int = zmq.DEALER) -> zmq.Socket:
        sock = make_socket(ctx, kind)
        sock.connect(f"tcp://127.0.0.1:{exp if kind == zmq.PUSH else sample}")
        clients.append(sock)
        return sock

    yield replay, client
    for sock in clients:
        sock.close(0)
    replay.close()
    ctx.term()


def replies(server: ReplayServer, sock: zmq.Socket, count: int, timeout_s: float = 5.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        server.poll_once(0.01)
        while sock.poll(0):
            got.append(decode(sock.recv_multipart()))
    return got


def test_one_peers_absurd_requests_never_starve_another(server, monkeypatch):
    monkeypatch.setattr(replay_role, "DEFER_S", 600.0)  # parked requests outlast the test, however slow the box
    replay, client = server
    hostile, learner = client(), client()
    for _ in range(MAX_PENDING_PER_PEER + 4):
        hostile.send_multipart(frames_of(SampleRequest(900).to_message()))  # parks: 900 > what is held
    hostile.send_multipart(frames_of(SampleRequest(10**9).to_message()))  # more than capacity
    refused = replies(replay, hostile, 5)
    assert [m.kind for m in refused] == [ERROR] * 5
    assert {m.meta["reason"] for m in refused} == {"too_many_pending", "over_capacity"}

    meta, arrays = parts(encode_chunk(chunk(T=50, K=2), incarnation=""))
    client(zmq.PUSH).send_multipart(encode(EXPERIENCE, meta, arrays))
    learner.send_multipart(frames_of(SampleRequest(32).to_message()))
    (answer,) = replies(replay, learner, 1)
    assert answer.kind == TRANSITION_REPLY and len(answer.arrays["obs"]) == 32
    # Served while the hostile peer's requests are still parked: not behind them (they wait for data that never
    # comes, until their deadline).
    assert len(replay.core.pending) == MAX_PENDING_PER_PEER and not hostile.poll(0), "the hostile's still wait"


def test_a_request_parked_before_the_shard_knew_its_layout_is_refused_when_data_shows_it_too_large(monkeypatch):
    """A transition shard learns what a transition weighs from its first chunk: a request parked while it was empty
    is held to the learner's byte limit when data comes, answered with an error instead of a reply that limit would
    refuse (or an allocation that size), and the shard serves on."""
    monkeypatch.setattr(replay_role, "DEFER_S", 600.0)
    ctx = zmq.Context()
    exp, sample = free_port(), free_port()
    reply = Limits(max_bytes=1 << 20)
    replay = ReplayServer(
        ctx, f"tcp://127.0.0.1:{exp}", f"tcp://127.0.0.1:{sample}", ReplayShard("uniform", 100_000, reply=reply)
    )
    learner, pusher = make_socket(ctx, zmq.DEALER), make_socket(ctx, zmq.PUSH)
    learner.connect(f"tcp://127.0.0.1:{sample}")
    pusher.connect(f"tcp://127.0.0.1:{exp}")
    try:
        # 40,000 transitions: under 1 MiB at the 16 bytes of a slot and an id, over it at 32 with this layout.
        learner.send_multipart(frames_of(SampleRequest(40_000, ready_at=1).to_message()))
        deadline = time.monotonic() + 20
        while not replay.core.pending and time.monotonic() < deadline:
            replay.poll_once(0.01)
        assert len(replay.core.pending) == 1, "parked: nothing told the shard yet that it is too large"
        meta, arrays = parts(encode_chunk(chunk(T=50, K=2), incarnation=""))
        pusher.send_multipart(encode(EXPERIENCE, meta, arrays))
        [refused] = replies(replay, learner, 1)
        assert (refused.kind, refused.meta["reason"]) == (ERROR, "reply_too_large") and not replay.core.pending
        learner.send_multipart(frames_of(SampleRequest(1000, ready_at=1).to_message()))
        [served] = replies(replay, learner, 1)
        assert served.kind == TRANSITION_REPLY and len(served.arrays["obs"]) == 1000
    finally:
        learner.close(0)
        pusher.close(0)
        replay.close()
        ctx.term()


def test_a_request_for_several_minibatches_is_answered_once_its_ready_at_is_held(server):
    """An off-policy learner asks for 4 minibatches but can learn once one is held: the shard answers at
    `ready_at` transitions with the whole `batch_size`, drawn with replacement."""
    replay, client = server
    learner = client()
    for bad in (
        {"batch_size": 64, "ready_at": 65},
        {"batch_size": 64, "ready_at": 0},
        {"batch_size": 64, "ready_at": "1"},
    ):
        learner.send_multipart(encode(SAMPLE_REQUEST, bad))
    assert {(m.kind, m.meta["reason"]) for m in replies(replay, learner, 3)} == {(ERROR, "bad_request")}
    learner.send_multipart(frames_of(SampleRequest(4 * 32, ready_at=32).to_message()))
    replay.poll_once(0.05)
    meta, arrays = parts(encode_chunk(chunk(T=10, K=2), incarnation=""))  # 20 transitions: fewer than ready_at
    client(zmq.PUSH).send_multipart(encode(EXPERIENCE, meta, arrays))
    assert replies(replay, learner, 1, timeout_s=0.3) == []
    meta, arrays = parts(encode_chunk(chunk(T=10, K=2), incarnation=""))  # 40: a minibatch's worth
    client(zmq.PUSH).send_multipart(encode(EXPERIENCE, meta, arrays))
    (answer,) = replies(replay, learner, 1)
    assert answer.kind == TRANSITION_REPLY and len(answer.arrays["obs"]) == 128


# -- hostile content, generated ---------------------------------------------------------------------------

# Anything msgpack carries: what a peer can put in a well-framed header's metadata.
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
fields = st.sampled_from(
    ["version", "incarnation", "actor", "env_steps", "episode_returns", "episode_lengths", "shard", "done"]
    + ["env_step_budget", "chunks", "episode_successes", "batch_size", "ready_at", "hold_ms", "reason"]
)
hostile_meta = st.dictionaries(fields, values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(meta=hostile_meta, value=st.floats(width=32))
def test_every_decoder_returns_a_typed_value_or_refuses_with_a_reason(meta, value):
    arrays = {"obs": np.full((2, 2, 3), value, np.float32), "rewards": np.zeros((2, 2), np.float32)}
    decoders = [
        lambda: decode_parts(arrays, meta),
        lambda: ShardReport.from_meta(meta),
        lambda: BlobMeta.from_meta(meta),
        lambda: decode_sample_reply(Message(FIFO_REPLY, {"chunks": [meta]}, {"0": arrays}), shard=0),
        lambda: decode_sample_reply(Message(FIFO_REPLY, meta, {"0": arrays}), shard=0),
        lambda: ParamsRequest.from_message(Message(PARAMS_REQUEST, meta)),
        lambda: NotModified.from_message(Message(PARAMS_REQUEST, meta)),
    ]
    for decoder in decoders:
        try:
            decoded = decoder()
        except ProtocolError as exc:
            assert exc.reason  # a stable label for the dropped-messages counter
            continue
        if isinstance(decoded, Chunk):  # decode_chunk: what passed is sane, and re-encodes
            assert np.isfinite(decoded.arrays["obs"]).all() and 0 <= decoded.env_steps <= MAX_CHUNK_ENV_STEPS
            frames_of(encode_chunk(decoded, decoded.incarnation))
        elif isinstance(decoded, BlobMeta | ShardReport):
            encode(PARAMS, decoded.to_meta())
        elif isinstance(decoded, FifoReply):
            frames_of(encode_sample_reply(decoded))
        else:
            frames_of(decoded.to_message())


@settings(max_examples=150, deadline=None)
@given(metas=st.lists(hostile_meta, min_size=1, max_size=8))
def test_a_shard_fed_hostile_chunks_keeps_books_that_stay_encodable(metas):
    shard = ReplayShard("prioritized", 1000)
    good_meta, arrays = parts(encode_chunk(chunk(), incarnation="a"))
    for meta in [*metas, good_meta]:
        try:
            shard.add(Message(EXPERIENCE, meta, arrays))
        except ValueError:  # ProtocolError is one: refused with a reason, nothing stored
            continue
    frames_of(encode_sample_reply(shard.sample(4)))  # the reply a learner gets is always encodable
    assert 0 < shard.env_steps_in <= (len(metas) + 1) * MAX_CHUNK_ENV_STEPS


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    metas=st.lists(hostile_meta, min_size=1, max_size=4),
    request_meta=hostile_meta,
    slots=st.lists(st.integers(min_value=-(2**40), max_value=2**40), min_size=1, max_size=8),
    priorities=st.lists(st.floats(), min_size=1, max_size=8),
)
def test_a_live_replay_fed_hostile_content_still_answers_well_formed_requests_right(
    server, metas, request_meta, slots, priorities
):
    replay, client = server
    push, hostile, learner = client(zmq.PUSH), client(), client()
    _, arrays = parts(encode_chunk(chunk(), incarnation=""))
    for meta in metas:
        push.send_multipart(encode(EXPERIENCE, meta, arrays))
    hostile.send_multipart(encode(SAMPLE_REQUEST, request_meta))
    update = {
        "slots": np.array(slots, np.int64),
        "ids": np.arange(len(slots), dtype=np.uint64),
        "priorities": np.array(priorities[: len(slots)], np.float64),
    }
    hostile.send_multipart(encode(PRIORITY_UPDATE, request_meta, update))
    good_meta, good_arrays = parts(encode_chunk(chunk(value=7.0, T=40, K=2), incarnation=""))
    push.send_multipart(encode(EXPERIENCE, good_meta, good_arrays))
    deadline = time.monotonic() + 5
    while replay.replay.env_steps_in < 80 and time.monotonic() < deadline:  # the good chunk is in
        replay.poll_once(0.01)
    learner.send_multipart(frames_of(SampleRequest(32).to_message()))
    (answer,) = replies(replay, learner, 1)
    assert answer.kind == TRANSITION_REPLY and answer.arrays["obs"].shape == (32, 3)
    assert np.isfinite(answer.arrays["obs"]).all() and ShardReport.from_meta(answer.meta).env_steps >= 80


def test_a_chunk_cannot_claim_more_env_steps_than_its_units_can_stand_for():
    meta, arrays = parts(encode_chunk(chunk(T=4, K=2), incarnation=""))
    assert decode_parts(arrays, {**meta, "env_steps": 8}, max_steps_per_unit=1).env_steps == 8
    for claim in (9, 10**6):
        with pytest.raises(ProtocolError, match="implausible_env_steps"):
            decode_parts(arrays, {**meta, "env_steps": claim}, max_steps_per_unit=1)
    assert decode_parts(arrays, {**meta, "env_steps": 24}, max_steps_per_unit=3).env_steps == 24  # n-step
    shard = ReplayShard("fifo", 100, max_steps_per_unit=1)
    with pytest.raises(ProtocolError, match="implausible"):
        shard.add(Message(EXPERIENCE, {**meta, "env_steps": 10**6}, arrays))
    assert shard.env_steps_in == 0, "one chunk never ends a run"


def test_each_algorithm_bounds_the_env_steps_a_unit_of_its_data_stands_for():
    from surreal.config import load_config

    assert load_config([]).algo.max_env_steps_per_unit(1000) == 1  # PPO: one step per transition
    assert load_config(["algo=ddpg", "algo.n_step=3"]).algo.max_env_steps_per_unit(1000) == 3
    es = load_config(["algo=es"]).algo
    assert es.max_env_steps_per_unit(1000) == 2000 and es.max_env_steps_per_unit(None) is None


@pytest.fixture
def ps_server():
    ctx = zmq.Context()
    pub_port, serve_port = free_port(), free_port()
    publisher = ParamPublisher(ctx, f"tcp://127.0.0.1:{pub_port}")
    ps = ParamServer(ctx, f"tcp://127.0.0.1:{pub_port}", f"tcp://127.0.0.1:{serve_port}")
    actor = make_socket(ctx, zmq.DEALER)
    actor.connect(f"tcp://127.0.0.1:{serve_port}")
    yield publisher, ps, actor, itertools.count()
    actor.close(0)
    ps.close()
    publisher.close()
    ctx.term()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob_metas=st.lists(hostile_meta, min_size=1, max_size=3), request_meta=hostile_meta)
@pytest.mark.system
def test_a_live_ps_fed_hostile_blobs_and_requests_still_serves_the_learners_blob(ps_server, blob_metas, request_meta):
    publisher, ps, actor, turn = ps_server
    n = next(turn)
    weights = {"policy": {"w": np.full(4, float(n), np.float32)}}
    for meta in blob_metas:
        send(publisher.sock, encode(PARAMS, meta, weights), 0.0)
    actor.send_multipart(encode(PARAMS_REQUEST, request_meta))
    publisher.publish(BlobMeta(n, f"learner-{n}"), weights)  # a new incarnation always replaces
    deadline = time.monotonic() + 5
    while ps.core.incarnation != f"learner-{n}" and time.monotonic() < deadline:
        publisher.service()
        ps.poll_once(0.01)
    actor.send_multipart(frames_of(ParamsRequest(-1, "").to_message()))
    got = [m for m in replies(ps, actor, 2) if m.kind == PARAMS and m.meta.get("incarnation") == f"learner-{n}"]
    assert got and np.array_equal(got[-1].arrays["policy"]["w"], weights["policy"]["w"])


def held_by_ps(publisher: ParamPublisher, ps: ParamServer, version: int, incarnation: str = "a") -> None:
    """Publish (`version`, `incarnation`) and poll the ps until it holds it."""
    publisher.publish(BlobMeta(version, incarnation), {"policy": {"w": np.full(4, float(version), np.float32)}})
    deadline = time.monotonic() + 20
    while (ps.core.version, ps.core.incarnation) != (version, incarnation) and time.monotonic() < deadline:
        publisher.service()
        ps.poll_once(0.01)
    assert (ps.core.version, ps.core.incarnation) == (version, incarnation)


def test_a_ps_sends_a_held_actor_the_version_that_wakes_it_and_says_how_far_the_learner_got(ps_server, monkeypatch):
    """An actor whose turn is k versions away is answered by version v + k, not by every version on the way;
    when its hold ends first, "not modified" says which version the ps holds (the learner is progressing)."""
    monkeypatch.setattr(ps_role, "QUIET_MIN_S", 600.0)  # the learner never counts as quiet here, however slow the box
    publisher, ps, actor, _ = ps_server
    held_by_ps(publisher, ps, 1)
    actor.send_multipart(frames_of(ParamsRequest(1, "a", hold_ms=60_000, wake_version=4).to_message()))
    held_by_ps(publisher, ps, 2)
    held_by_ps(publisher, ps, 3)
    assert replies(ps, actor, 1, timeout_s=0.3) == [], "versions below the wake version are not sent"
    assert len(ps.core.parked) == 1
    held_by_ps(publisher, ps, 4)
    [woken] = replies(ps, actor, 1)
    assert woken.kind == PARAMS and woken.meta["version"] == 4 and woken.arrays["policy"]["w"][0] == 4.0

    actor.send_multipart(frames_of(ParamsRequest(2, "a").to_message()))
    [at_once] = replies(ps, actor, 1)
    assert at_once.kind == PARAMS and at_once.meta["version"] == 4, "a request without a hold gets what is newer"

    held_by_ps(publisher, ps, 5)  # newer than the actor's 4, below its wake version: parked until the hold ends
    actor.send_multipart(frames_of(ParamsRequest(4, "a", hold_ms=300, wake_version=9).to_message()))
    [progress] = replies(ps, actor, 1, timeout_s=20)
    assert decode_params_reply(progress) == NotModified(5, "a"), "the hold ended: not modified, at version 5"

    actor.send_multipart(frames_of(ParamsRequest(4, "a", hold_ms=60_000, wake_version=9).to_message()))
    held_by_ps(publisher, ps, 1, "resumed")
    [resumed] = replies(ps, actor, 1)
    assert resumed.meta["incarnation"] == "resumed", "a new learner incarnation wakes every held request"


def test_one_peers_flood_of_held_requests_is_answered_at_once_and_never_fills_the_park(ps_server, monkeypatch):
    """A peer may park `MAX_PARKED_PER_PEER` held requests; the rest of its flood is answered at once ("not
    modified"), so the park keeps room for the honest actors, whose held request the next version still wakes."""
    monkeypatch.setattr(ps_role, "QUIET_MIN_S", 600.0)
    publisher, ps, hostile, _ = ps_server
    held_by_ps(publisher, ps, 1)
    flood = 50
    for _ in range(flood):
        hostile.send_multipart(frames_of(ParamsRequest(1, "a", hold_ms=60_000).to_message()))
    answered = replies(ps, hostile, flood - ps_role.MAX_PARKED_PER_PEER, timeout_s=20)
    assert [decode_params_reply(m) for m in answered] == [NotModified(1, "a")] * (flood - ps_role.MAX_PARKED_PER_PEER)
    assert len(ps.core.parked) == ps_role.MAX_PARKED_PER_PEER
    honest = make_socket(hostile.context, zmq.DEALER)
    honest.connect(hostile.getsockopt_string(zmq.LAST_ENDPOINT))
    try:
        honest.send_multipart(frames_of(ParamsRequest(1, "a", hold_ms=60_000).to_message()))
        deadline = time.monotonic() + 20
        while len(ps.core.parked) == ps_role.MAX_PARKED_PER_PEER and time.monotonic() < deadline:
            ps.poll_once(0.01)
        assert len(ps.core.parked) == ps_role.MAX_PARKED_PER_PEER + 1, "the honest actor's request is parked"
        held_by_ps(publisher, ps, 2)
        [woken] = replies(ps, honest, 1)
        assert woken.kind == PARAMS and woken.meta["version"] == 2
        assert not ps.core.parked and not ps.core.parked_by_peer, "every held request answered, and none left counted"
    finally:
        honest.close(0)


def test_a_quiet_learner_wakes_every_held_actor_behind_it(ps_server, monkeypatch):
    """A learner that stops publishing (it waits for data) must not wait for holds to end: the ps sends its blob
    to every parked request it supersedes, whatever their wake versions, as soon as the learner counts as quiet."""
    monkeypatch.setattr(ps_role, "QUIET_MIN_S", 0.2)
    monkeypatch.setattr(ps_role, "QUIET_FACTOR", 0.0)
    publisher, ps, actor, _ = ps_server
    held_by_ps(publisher, ps, 1)
    actor.send_multipart(frames_of(ParamsRequest(0, "a", hold_ms=60_000, wake_version=50).to_message()))
    [woken] = replies(ps, actor, 1, timeout_s=20)
    assert woken.kind == PARAMS and woken.meta["version"] == 1
    actor.send_multipart(frames_of(ParamsRequest(1, "a", hold_ms=300, wake_version=50).to_message()))
    [nothing_newer] = replies(ps, actor, 1, timeout_s=20)
    assert decode_params_reply(nothing_newer) == NotModified(1, "a"), "quiet or not, nothing newer is held"


def test_one_rule_says_which_parameter_blob_wins_for_the_ps_and_the_in_process_ps():
    assert supersedes((4, "a"), (3, "a")) and not supersedes((3, "a"), (3, "a"))
    assert not supersedes((2, "a"), (3, "a")), "an older blob of the same learner never replaces a newer one"
    assert supersedes((1, "b"), (9, "a")), "a resumed learner restarts at its checkpoint's version"
    params = InProcessParams()
    assert params.fetch(-1, "") == NotModified(NO_VERSION, ""), "nothing held: not modified"
    params.publish(BlobMeta(3, "a"), {})
    params.publish(BlobMeta(2, "a"), {})  # late and older: the held blob stays
    held = params.fetch(-1, "")
    assert isinstance(held, Params) and held.blob.version == 3
    assert params.fetch(3, "a") == params.fetch(5, "a") == NotModified(3, "a"), "nothing newer for these actors"
    params.publish(BlobMeta(1, "b"), {})
    again = params.fetch(3, "a")
    assert isinstance(again, Params) and (again.blob.version, again.blob.incarnation) == (1, "b")
