"""Central inference's message kinds (proto/wire.py `InferRequest`, `InferReply`): a round trip through the codec's
bytes, and every malformed field refused with its reason."""

from __future__ import annotations

import numpy as np
import pytest

from surreal.proto.channels import frames_of
from surreal.proto.codec import Limits, Message, ProtocolError, decode
from surreal.proto.wire import (
    INFER_REPLY,
    INFER_REQUEST,
    INFERENCE_REPLIES,
    INFERENCE_REQUESTS,
    MAX_INFER_ENVS,
    NO_PARAMS,
    NO_VERSION,
    ErrorReply,
    InferReply,
    InferRequest,
)


def through_bytes(message: Message, kinds: frozenset[str]) -> Message:
    frames = [bytes(f) if not isinstance(f, bytes) else f for f in frames_of(message)]
    return decode(frames, Limits(kinds=kinds))


def request(obs: np.ndarray | None = None, **meta: object) -> Message:
    obs = np.zeros((3, 4), np.float32) if obs is None else obs
    message = InferRequest(1, 7, NO_VERSION, "", obs).to_message()
    message.meta.update(meta)
    return message


def reply(n: int = 3, **arrays: object) -> Message:
    record = {"actions": np.ones((n, 2), np.float32), "logprobs": np.zeros(n, np.float32)}
    message = InferReply(7, 5, "inc", np.ones((n, 2), np.float32), record).to_message()
    message.arrays.update(arrays)
    return message


def test_request_round_trip() -> None:
    obs = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = InferRequest.from_message(through_bytes(InferRequest(2, 9, 4, "inc", obs).to_message(), INFERENCE_REQUESTS))
    assert (got.actor, got.request, got.version, got.incarnation) == (2, 9, 4, "inc")
    np.testing.assert_array_equal(got.obs, obs)
    assert InferRequest.from_message(request(), obs_dim=4).obs.shape == (3, 4)


@pytest.mark.parametrize(
    "message",
    [
        request(np.zeros((3, 4), np.float64)),  # not float32
        request(np.zeros((3,), np.float32)),  # not [n, obs_dim]
        request(np.zeros((0, 4), np.float32)),  # no env
        request(np.zeros((MAX_INFER_ENVS + 1, 1), np.float32)),  # too many envs
        request(actor=-1),
        request(request="7"),
        request(version=True),
        request(incarnation="x" * 65),
        Message(INFER_REQUEST, {"actor": 0, "request": 0, "version": 0, "incarnation": ""}, {}),
    ],
)
def test_bad_requests_refused(message: Message) -> None:
    with pytest.raises(ProtocolError) as exc:
        InferRequest.from_message(message)
    assert exc.value.reason == "bad_infer_request"


def test_request_checked_against_the_policy() -> None:
    with pytest.raises(ProtocolError, match="bad_infer_request"):
        InferRequest.from_message(request(), obs_dim=5)
    obs = np.zeros((3, 4), np.float32)
    obs[1, 2] = np.nan
    with pytest.raises(ProtocolError, match="non_finite"):
        InferRequest.from_message(request(obs))


def test_reply_round_trip() -> None:
    got = InferReply.from_message(through_bytes(reply(), INFERENCE_REPLIES), n_envs=3)
    assert (got.request, got.version, got.incarnation) == (7, 5, "inc")
    assert got.env_actions.shape == (3, 2) and set(got.record) == {"actions", "logprobs"}


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (reply(env_actions=np.ones((2, 2), np.float32)), "bad_infer_reply"),  # rows != n_envs
        (reply(record={"logprobs": np.zeros(4, np.float32)}), "bad_infer_reply"),
        (reply(record={}), "bad_infer_reply"),  # nothing for the chunk
        (reply(extra=np.zeros(3, np.float32)), "bad_infer_reply"),
        (reply(env_actions=np.full((3, 2), np.inf, np.float32)), "non_finite"),
        (
            Message(INFER_REPLY, {"request": 7, "version": NO_VERSION, "incarnation": ""}, reply().arrays),
            "bad_infer_reply",
        ),
        (ErrorReply(NO_PARAMS).to_message(), "error_reply"),
        (Message("params", {}), "unknown_kind"),
    ],
)
def test_bad_replies_refused(message: Message, reason: str) -> None:
    with pytest.raises(ProtocolError) as exc:
        InferReply.from_message(message, n_envs=3)
    assert exc.value.reason == reason


def test_kinds_are_fenced() -> None:
    with pytest.raises(ProtocolError):
        through_bytes(reply(), INFERENCE_REQUESTS)
    with pytest.raises(ProtocolError):
        through_bytes(request(), INFERENCE_REPLIES)
