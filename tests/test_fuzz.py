"""Fuzz: 10,000+ random and mutated messages at a live replay and ps, which must keep serving correct data.

Hypothesis generates messages of two families: raw random frames, and valid messages with one mutation
(header bytes flipped or truncated, wrong protocol version, unknown kind, an array spec that disagrees
with its frame, an object dtype, extra or missing frames, frames over the size limit). Each of the four
server-facing sockets (replay PULL, replay ROUTER, ps ROUTER, ps SUB) takes 2,600 of them; afterwards a
well-formed client must get exactly the data it put in, and /metrics must show the drops were counted.
"""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import loopback_settings, wait_until
from surreal.proto.channels import (
    ExperienceSender,
    ParamClient,
    ParamPublisher,
    SampleClient,
    make_socket,
)
from surreal.proto.codec import PROTOCOL_VERSION, Limits, encode
from surreal.proto.wire import BlobMeta, FifoReply, Params
from test_services import chunk, experience, metric_value, metrics_text

PER_TARGET = 2600  # x 4 targets: 10,400 messages generated, >= 10,000 of them must get onto the wire
MAX_BYTES = 1 << 20  # servers below run with this limit so "oversized" frames are cheap to make
FUZZ = settings(
    max_examples=PER_TARGET,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def valid_messages() -> list[list[bytes]]:
    arrays = chunk(1.0, T=2, K=1)
    return [
        [bytes(memoryview(f)) for f in encode("experience", {"version": 1}, arrays)],
        [bytes(memoryview(f)) for f in encode("sample_request", {"batch_size": 8})],
        [
            bytes(memoryview(f))
            for f in encode(
                "priority_update",
                {},
                {"slots": np.zeros(2, np.int64), "ids": np.zeros(2, np.uint64), "priorities": np.ones(2)},
            )
        ],
        [bytes(memoryview(f)) for f in encode("params_request", {"version": 0, "incarnation": "x"})],
        [
            bytes(memoryview(f))
            for f in encode(
                "params", {"version": 10**6, "incarnation": "evil"}, {"policy": {"w": np.ones(3, np.float32)}}
            )
        ],
    ]


def mutate(frames: list[bytes], how: str, draw_bytes: bytes, position: int) -> list[bytes]:
    header = msgpack.unpackb(frames[0])
    if how == "flip":
        data = bytearray(frames[0])
        for i, b in enumerate(draw_bytes[:8]):
            data[(position + i * 7) % len(data)] ^= b or 1
        return [bytes(data), *frames[1:]]
    if how == "truncate":
        return [frames[0][: position % len(frames[0])], *frames[1:]]
    if how == "version":
        header["v"] = PROTOCOL_VERSION + 1 + position % 5
    elif how == "kind":
        header["k"] = draw_bytes.hex() or "?"
    elif how == "spec_size" and header["a"]:
        header["a"][0][2] = [int(d) + 1 + position % 3 for d in header["a"][0][2]] or [2]
    elif how == "object_dtype" and header["a"]:
        header["a"][0][1] = "|O"
    elif how == "bad_meta":
        header["m"] = [position] if position % 2 else {"version": "x", "batch_size": -position, "id": None}
    elif how == "extra_frames":
        return [*frames, *[draw_bytes] * (1 + position % 300)]
    elif how == "drop_frame" and len(frames) > 1:
        return frames[:-1]
    elif how == "oversize":
        return [*frames[:-1], b"\0" * (MAX_BYTES + 1 + position)]
    return [msgpack.packb(header), *frames[1:]]


HOW = [
    "flip",
    "truncate",
    "version",
    "kind",
    "spec_size",
    "object_dtype",
    "bad_meta",
    "extra_frames",
    "drop_frame",
    "oversize",
]
random_frames = st.lists(st.binary(max_size=64), min_size=1, max_size=6)
mutated = st.builds(
    mutate,
    st.sampled_from(valid_messages()),
    st.sampled_from(HOW),
    st.binary(min_size=0, max_size=8),
    st.integers(0, 10**6),
)
messages = st.one_of(random_frames, mutated)


def drain(sock: zmq.Socket) -> None:
    while sock.poll(0):
        sock.recv_multipart()


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def send_fuzz(sock: zmq.Socket, frames: list[bytes]) -> bool:
    """Send without blocking for long; False if the socket stayed full (the message is not counted)."""
    for _ in range(2):
        try:
            sock.send_multipart(frames, flags=zmq.NOBLOCK)
            return True
        except zmq.Again:
            sock.poll(200, zmq.POLLOUT)
    return False


def is_oversized(frames: list[bytes]) -> bool:
    return any(len(f) > MAX_BYTES for f in frames)


@pytest.mark.system
def test_fuzz_replay_and_ps_keep_serving(roles, ctx, tmp_path):
    limits_env = {"SURREAL_CONFIG": str(tmp_path / "fuzz.yaml")}
    from surreal.config import load_config, save_config

    cfg = load_config([f"replay.max_message_bytes={MAX_BYTES}", f"ps.max_message_bytes={MAX_BYTES}"])
    save_config(cfg, tmp_path / "fuzz.yaml")
    s = loopback_settings()
    ps_metrics = loopback_settings().metrics_port
    replay = roles.start("replay", s, "--mode", "fifo", extra_env=limits_env)
    ps = roles.start("ps", s.__class__(**{**s.__dict__, "metrics_port": ps_metrics}), extra_env=limits_env)
    publisher = ParamPublisher(ctx, s.bind(s.params_pub_port))
    good_params = {"policy": {"w": np.arange(10, dtype=np.float32)}}
    publisher.publish(BlobMeta(5, "real"), good_params)
    client = ParamClient(ctx, s.ps_addrs, Limits())

    def ps_ready():
        publisher.service()
        return isinstance(client.fetch(-1, "", 0.2), Params)

    wait_until(ps_ready, 30)

    targets = {
        "replay_pull": make_socket(ctx, zmq.PUSH, sndhwm=1000),
        "replay_router": make_socket(ctx, zmq.DEALER, sndhwm=1000),
        "ps_router": make_socket(ctx, zmq.DEALER, sndhwm=1000),
    }
    # libzmq drops a connection that carries a frame over ZMQ_MAXMSGSIZE; oversized messages go through a
    # second socket per target so the first one is not reconnecting half of the time.
    oversize = {
        "replay_pull": make_socket(ctx, zmq.PUSH),
        "replay_router": make_socket(ctx, zmq.DEALER),
        "ps_router": make_socket(ctx, zmq.DEALER),
    }
    endpoints = {"replay_pull": s.replay[0].experience, "replay_router": s.replay[0].sample, "ps_router": s.ps_addrs[0]}
    for name, endpoint in endpoints.items():
        targets[name].connect(endpoint)
        oversize[name].connect(endpoint)
    sent = dict.fromkeys([*targets, "ps_sub"], 0)

    def fuzz(name: str, sock: zmq.Socket) -> None:
        @FUZZ
        @given(frames=messages)
        def fuzz_socket(frames):
            if send_fuzz(oversize[name] if is_oversized(frames) else sock, frames):
                sent[name] += 1
            if sent[name] % 200 == 0:
                drain(sock)

        fuzz_socket()

    for name, sock in targets.items():
        fuzz(name, sock)

    # The ps's other input is the learner's PUB socket: fuzz what the "learner" publishes.
    @FUZZ
    @given(frames=messages)
    def fuzz_sub(frames):
        if send_fuzz(publisher.sock, frames):  # PUB never blocks: a subscriber over its HWM just misses
            sent["ps_sub"] += 1

    fuzz_sub()
    assert sum(sent.values()) >= 10_000
    assert replay.poll() is None and ps.poll() is None, "a server died under fuzzing"

    # Correct data still flows: experience in, the same experience out, in order.
    sender = ExperienceSender(ctx, [s.replay[0].experience])
    sampler = SampleClient(ctx, [s.replay[0].sample], Limits(), prefetch=1)
    # Garbage chunks that happened to be valid may sit in the FIFO: drain them first.
    while sampler.next(10_000, 1.5) is not None:
        pass
    for i in range(5):
        assert sender.send(experience(float(i), version=100 + i), "", timeout_s=10)
    got = []
    wait_until(
        lambda: (
            isinstance(r := sampler.next(10_000, 0.5), FifoReply) and got.extend(r.chunks) is None and len(got) >= 5
        ),
        30,
    )
    assert [c.version for c in got] == [100, 101, 102, 103, 104]

    # The ps still serves the real learner's latest blob (a forged "params" with a huge version may have
    # been accepted from the PUB socket, which is the trusted learner's; publish a newer real one).
    publisher.publish(BlobMeta(10**7, "real"), good_params)

    def latest_real():
        publisher.service()  # as the learner's loop does: a ps that re-subscribed gets the latest blob
        reply = client.fetch(-1, "", 0.5)
        return reply if isinstance(reply, Params) and reply.blob.version == 10**7 else None

    reply = wait_until(latest_real, 30)
    np.testing.assert_array_equal(reply.arrays["policy"]["w"], good_params["policy"]["w"])

    replay_dropped = metric_value(metrics_text(s.metrics_port), "surreal_messages_dropped_total")
    ps_dropped = metric_value(metrics_text(ps_metrics), "surreal_messages_dropped_total")
    assert replay_dropped > 1000 and ps_dropped > 1000, (replay_dropped, ps_dropped)
    for sock in [*targets.values(), *oversize.values()]:
        sock.close(0)
    for closable in (sender, sampler, client, publisher):
        closable.close()
