"""Parking is fair (roles/parking.py): with every place taken, a peer holding fewer parked requests than the peer
holding the most still gets one, that peer's newest request answered instead. Checked on the rule itself and in the
two cores that park: the replay shard's (sample requests waiting for data) and the ps's (held parameter requests).
The cores run here without sockets or clocks, as the simulator runs them; tests/test_hostile_peers.py runs the
replay's over ZMQ."""

from __future__ import annotations

import numpy as np
import pytest

from surreal.config.schema import ReplayConfig
from surreal.proto.wire import (
    Chunk,
    ErrorReply,
    NotModified,
    ParamsRequest,
    SampleRequest,
    TransitionReply,
    encode_chunk,
    encode_params,
)
from surreal.replay.shard import ReplayShard
from surreal.roles import ps as ps_role
from surreal.roles import replay as replay_role
from surreal.roles.parking import FairParking
from surreal.roles.ps import PsCore
from surreal.roles.replay import ReplayCore


def test_the_rule_admits_a_peer_below_the_most_by_evicting_the_first_peer_to_hold_the_most():
    parking: FairParking[str] = FairParking(capacity=4, per_peer=3)
    for peer in ("a", "a", "b", "b"):
        assert parking.admit(peer) == (True, None)
        parking.add(peer)
    assert parking.admit("a") == (False, None), "full, and it holds as many as any other"
    assert parking.admit("c") == (True, "a"), "c holds fewer: the first to hold two gives one up"
    parking.remove("a")
    parking.add("c")
    assert parking.counts == {"a": 1, "b": 2, "c": 1} and parking.total == 4
    assert parking.admit("a") == (True, "b"), "now a holds fewer than b"
    for _ in range(2):
        parking.remove("b")
    assert parking.admit("d") == (True, None) and parking.counts == {"a": 1, "c": 1}
    parking.add("a")
    parking.add("a")
    assert parking.admit("a") == (False, None), "at its own cap, whatever is free"


# -- the replay's core -----------------------------------------------------------------------------------------


def transitions(n: int) -> dict[str, np.ndarray]:
    return {"obs": np.zeros((n, 1, 3), np.float32), "rewards": np.zeros((n, 1), np.float32)}


def test_a_replay_core_full_of_unservable_requests_still_parks_and_serves_the_learner(monkeypatch):
    """Four peers park 16 requests each of the shard's whole capacity while it holds 1,000 transitions. The
    learner's request takes a place (the newest of the first peer to hold 16 is refused `too_many_pending`) and is
    served; the old caps alone refused the learner every time."""
    shard = ReplayShard.of(ReplayConfig(mode="uniform", capacity=10_000), seed=0)
    shard.add(encode_chunk(Chunk(transitions(1000), version=0, actor=0), ""))
    answers: list[tuple[str, object]] = []
    core = ReplayCore(shard, lambda peer, reply: answers.append((peer, reply)), lambda reason, peer: None)
    hostile = [f"hostile-{i}" for i in range(replay_role.MAX_PENDING // replay_role.MAX_PENDING_PER_PEER)]
    for peer in hostile:
        for _ in range(replay_role.MAX_PENDING_PER_PEER):
            core.on_request(peer, SampleRequest(10_000).to_message(), now=0.0)
    core.serve(0.0)
    assert len(core.pending) == replay_role.MAX_PENDING and answers == []
    for _ in range(10):
        core.on_request("learner", SampleRequest(64).to_message(), now=0.0)
        core.serve(0.0)
    to_learner = [reply for peer, reply in answers if peer == "learner"]
    assert len(to_learner) == 10 and all(isinstance(reply, TransitionReply) for reply in to_learner)
    assert answers[0] == ("hostile-0", ErrorReply("too_many_pending")), "the first peer to hold 16 gave one up"
    assert len(core.pending) == replay_role.MAX_PENDING - 1 and core.parking.total == len(core.pending)
    core.on_request("hostile-1", SampleRequest(10_000).to_message(), now=0.0)  # at its cap: refused
    assert answers[-1] == ("hostile-1", ErrorReply("too_many_pending"))
    core.on_request("hostile-0", SampleRequest(10_000).to_message(), now=0.0)  # a free place: parked, the park full
    assert len(core.pending) == replay_role.MAX_PENDING
    core.on_request("hostile-0", SampleRequest(10_000).to_message(), now=0.0)  # as many as the others: refused
    assert answers[-1] == ("hostile-0", ErrorReply("too_many_pending"))
    core.on_request("newcomer", SampleRequest(10_000).to_message(), now=0.0)  # none held: hostile-1 gives way
    assert answers[-1] == ("hostile-1", ErrorReply("too_many_pending")) and core.parking.counts["newcomer"] == 1
    # When the deadlines pass every parked request is answered and nothing is left counted.
    core.serve(replay_role.DEFER_S + 1)
    assert not core.pending and core.parking.total == 0 and core.parking.counts == {}


# -- the ps's core ---------------------------------------------------------------------------------------------


def blob(version: int) -> tuple:
    from surreal.proto.wire import BlobMeta, Params

    message = encode_params(Params(BlobMeta(version, "a"), {"w": np.full(2, float(version), np.float32)}))
    return message, f"blob-{version}"


@pytest.fixture
def small_park(monkeypatch):
    """A ps whose park holds 8 requests, 2 a peer: the rule at a size a test can fill."""
    monkeypatch.setattr(ps_role, "MAX_PARKED", 8)
    monkeypatch.setattr(ps_role, "MAX_PARKED_PER_PEER", 2)
    answers: list[tuple[str, object]] = []
    core: PsCore[str] = PsCore(lambda peer, reply: answers.append((peer, reply)), lambda reason, peer: None)
    core.on_blob(*blob(1), now=0.0)
    return core, answers


def test_a_ps_full_of_held_requests_still_holds_an_actors(small_park):
    core, answers = small_park
    held = ParamsRequest(1, "a", hold_ms=60_000).to_message()  # the actor runs version 1: held for a newer one
    for peer in ("h0", "h1", "h2", "h3"):
        for _ in range(2):
            core.on_request(peer, held, now=0.0)
    assert core.held == 8 and answers == []
    core.on_request("actor", held, now=0.0)
    assert answers == [("h0", NotModified(1, "a"))], "the first peer to hold the most gave up its newest"
    assert core.held == 8 and core.parked_by_peer == {"h0": 1, "h1": 2, "h2": 2, "h3": 2, "actor": 1}
    core.on_request("h0", held, now=0.0)  # it holds fewer than h1, the first of those holding two: h1 gives way
    assert answers[-1] == ("h1", NotModified(1, "a")) and core.parked_by_peer["h0"] == 2
    core.on_blob(*blob(2), now=1.0)
    woken = sorted(peer for peer, reply in answers if reply == "blob-2")
    assert "actor" in woken and core.held == 0 and core.parked_by_peer == {}


def test_an_evicted_held_request_is_answered_once_and_never_again(small_park):
    """Evicted requests stay in the ps's heap, marked, until they surface: they are never answered a second time
    (at their deadline, or by a blob) and never counted as held."""
    core, answers = small_park
    held = ParamsRequest(1, "a", hold_ms=1_000).to_message()
    for peer in ("h0", "h1", "h2", "h3"):
        for _ in range(2):
            core.on_request(peer, held, now=0.0)
    for i in range(4):
        core.on_request(f"actor-{i}", held, now=0.0)
    evicted = [peer for peer, _ in answers]
    assert sorted(evicted) == ["h0", "h1", "h2", "h3"] and core.held == 8
    core.on_time(2.0)  # every hold is over: each parked request answered once, "not modified"
    by_peer: dict[str, int] = {}
    for peer, reply in answers:
        assert reply == NotModified(1, "a")
        by_peer[peer] = by_peer.get(peer, 0) + 1
    assert by_peer == {"h0": 2, "h1": 2, "h2": 2, "h3": 2, "actor-0": 1, "actor-1": 1, "actor-2": 1, "actor-3": 1}
    assert core.held == 0 and core.parked == [] and core.next_event() is None
