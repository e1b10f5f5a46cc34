"""Codec: exact round-trips over ZMQ, zero-copy decode, and every malformed-input class rejected."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from surreal.proto.codec import ALLOWED_DTYPES, PROTOCOL_VERSION, Limits, ProtocolError, decode, encode

NUMERIC_DTYPES = sorted(ALLOWED_DTYPES)


@pytest.fixture(scope="module")
def pair():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    port = a.bind_to_random_port("tcp://127.0.0.1")
    b.connect(f"tcp://127.0.0.1:{port}")
    yield a, b
    a.close(0)
    b.close(0)
    ctx.term()


def over_wire(pair, frames):
    a, b = pair
    a.send_multipart(frames, copy=False)
    assert b.poll(5000)
    return b.recv_multipart(copy=False)


def assert_same(x, y):
    if isinstance(x, dict):
        assert isinstance(y, dict) and x.keys() == y.keys()
        for key in x:
            assert_same(x[key], y[key])
    else:
        assert y.dtype == x.dtype.newbyteorder("<") or y.dtype == x.dtype
        assert y.shape == x.shape
        np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (4, 3, 2)])
def test_every_dtype_and_shape_round_trips(pair, dtype, shape):
    rng = np.random.default_rng(0)
    array = (rng.random(shape) * 100).astype(dtype)
    message = decode(over_wire(pair, encode("x", {"n": 1}, {"a": array})))
    assert message.kind == "x" and message.meta == {"n": 1}
    assert_same({"a": array}, message.arrays)


def test_nested_chunk_round_trips_without_copies(pair):
    chunk = {
        "obs": np.random.rand(64, 4, 17).astype(np.float32),
        "terminated": np.zeros((64, 4), bool),
        "extras": {"logprobs": np.random.rand(64, 4).astype(np.float32), "deep": {"x": np.arange(3)}},
    }
    frames = over_wire(pair, encode("experience", {"version": 7, "returns": [1.5, 2.0]}, chunk))
    message = decode(frames)
    assert_same(chunk, message.arrays)
    assert message.meta == {"version": 7, "returns": [1.5, 2.0]}
    # The decoded array is a view over the received frame's memory, not a copy.
    assert np.shares_memory(message.arrays["obs"], np.frombuffer(frames[1].buffer, np.uint8))


def test_big_endian_and_non_contiguous_inputs_are_normalised(pair):
    big = np.arange(6, dtype=">f8").reshape(2, 3)
    strided = np.arange(20, dtype=np.int32)[::2]
    message = decode(over_wire(pair, encode("x", {}, {"big": big, "strided": strided})))
    np.testing.assert_array_equal(message.arrays["big"], big)
    np.testing.assert_array_equal(message.arrays["strided"], strided)


@settings(max_examples=150, deadline=None)
@given(
    arrays=st.dictionaries(
        st.text(alphabet="abcxyz_0", min_size=1, max_size=6),
        hnp.arrays(
            dtype=st.sampled_from([np.float32, np.float64, np.int8, np.uint16, np.int64, np.bool_]),
            shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
        ),
        max_size=5,
    )
)
def test_property_round_trip(arrays):
    frames = encode("x", {}, arrays)
    # Through bytes, as a peer on another host would deliver them.
    message = decode([bytes(memoryview(f)) for f in frames])
    assert message.arrays.keys() == arrays.keys()
    for key, array in arrays.items():
        np.testing.assert_array_equal(message.arrays[key], array)
        assert message.arrays[key].shape == array.shape


def test_encode_refuses_object_arrays_and_bad_names():
    with pytest.raises(ValueError):
        encode("x", {}, {"o": np.array([object()])})
    with pytest.raises(ValueError):
        encode("x", {}, {"a/b": np.zeros(1)})


def header(**fields):
    base = {"v": PROTOCOL_VERSION, "k": "x", "m": {}, "a": []}
    base.update(fields)
    return msgpack.packb(base)


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([], "empty"),
        ([b"\xc1\xff garbage"], "bad_header"),
        ([msgpack.packb([1, 2, 3])], "bad_header"),
        ([header(v=99)], "bad_version"),
        ([header(k=5)], "bad_header"),
        ([header(a=[["a", "<f4", [2]]]), b"\x00" * 7], "size_mismatch"),
        ([header(a=[["a", "|O", [1]]]), b"\x00" * 8], "bad_dtype"),
        ([header(a=[["a", "<f4", [-1]]]), b""], "bad_spec"),
        ([header(a=[["a", "<f4", [1]]])], "bad_spec"),
        ([header(a=[["a", "<f4", [1]], ["a", "<f4", [1]]]), b"\0" * 4, b"\0" * 4], "bad_spec"),
        ([header(a=[["a", "<f4", [1]], ["a/b", "<f4", [1]]]), b"\0" * 4, b"\0" * 4], "bad_spec"),
        ([header(a=[["", "<f4", [1]]]), b"\0" * 4], "bad_spec"),
        ([header(a=[["a", "<f4", [True]]]), b"\0" * 4], "bad_spec"),
    ],
)
def test_malformed_messages_raise_protocol_errors(frames, reason):
    with pytest.raises(ProtocolError) as info:
        decode(frames)
    assert info.value.reason == reason


def test_limits_on_frames_bytes_and_kinds():
    frames = encode("x", {}, {str(i): np.zeros(10) for i in range(5)})
    with pytest.raises(ProtocolError, match="too_many_frames"):
        decode(frames, Limits(max_frames=4))
    with pytest.raises(ProtocolError, match="too_large"):
        decode(frames, Limits(max_bytes=100))
    with pytest.raises(ProtocolError, match="unknown_kind"):
        decode(frames, Limits(kinds=frozenset({"y"})))
    assert decode(frames, Limits(max_frames=5, kinds=frozenset({"x"}))).kind == "x"
