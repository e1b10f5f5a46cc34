"""Well-formed messages no honest role sends, against live roles: each is refused (or counted and dropped), costs
the role no memory beyond its limits, and the role goes on serving honest peers.

- Sample requests a replay shard could never serve (a batch of 10**9 that is ready at once, more than the shard
  holds, a reply over the learner's byte limit, known only once data laid the shard out) get an error reply.
- Priority updates larger than any sample of the shard are refused.
- Transition replies with fields missing, of the wrong shapes or dtypes, or not finite reach a live learner from a
  shard it trusts: each is counted and dropped, and the learner keeps learning from the honest ones.
"""

from __future__ import annotations

import urllib.request

import numpy as np
import psutil
import pytest
import zmq

from conftest import loopback_settings, wait_until
from surreal.config import load_config, save_config
from surreal.proto.channels import ExperienceSender, SampleClient, frames_of, make_socket, recv_frames, send
from surreal.proto.codec import Limits, Message, decode, encode
from surreal.proto.wire import (
    ERROR,
    SAMPLE_REQUEST,
    TRANSITION_REPLY,
    Chunk,
    PriorityUpdate,
    SampleRequest,
    ShardReport,
    TransitionReply,
    decode_sample_reply,
    encode_sample_reply,
)
from surreal.replay.shard import ReplayShard

MIB = 1 << 20
CAPACITY = 20_000
REPLY_BYTES = MIB  # the learner's (and so every reply's) byte limit in these tests
RSS_GROWTH_BYTES = 50 * MIB


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def metric(port: int, name: str, **labels: str) -> float:
    """The sum of a role's metric over the series that carry `labels`; 0 while /metrics is not up yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    total = 0.0
    for line in text.splitlines():
        if line.startswith(f"surreal_{name}") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def chunk(T: int = 16, K: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((T, K, 3)).astype(np.float32),
        "next_obs": rng.standard_normal((T, K, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (T, K, 2)).astype(np.float32),
        "rewards": rng.standard_normal((T, K)).astype(np.float32),
        "terminated": np.zeros((T, K), bool),
        "truncated": np.zeros((T, K), bool),
    }


def experience(i: int) -> Chunk:
    """A chunk as an actor sends it: 64 transitions, each 38 bytes (54 in a uniform shard's reply with its slot and
    id, 58 in a prioritized one's with its weight)."""
    return Chunk(chunk(seed=i), version=0, actor=0)


def ask(sock: zmq.Socket, meta: dict, timeout_s: float = 30.0) -> Message:
    """Send one raw sample request (`meta` as a peer may write it) and return the shard's answer."""
    assert send(sock, encode(SAMPLE_REQUEST, meta), 5.0)
    frames = recv_frames(sock, timeout_s)
    assert frames is not None, f"no answer to {meta}"
    return decode(frames)


def rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


# -- replay shards ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fifo", "uniform", "prioritized"])
@pytest.mark.system
def test_requests_a_shard_could_never_serve_get_an_error_and_cost_it_nothing(roles, ctx, tmp_path, mode):
    config = tmp_path / "config.yaml"
    save_config(load_config([f"replay.max_message_bytes={REPLY_BYTES}"]), config)
    s = loopback_settings()
    replay = roles.start(
        "replay", s, "--mode", mode, "--capacity", str(CAPACITY), extra_env={"SURREAL_CONFIG": str(config)}
    )
    hostile = make_socket(ctx, zmq.DEALER)
    hostile.connect(s.replay[0].sample)
    sender = ExperienceSender(ctx, [s.replay[0].experience])
    learner = SampleClient(ctx, [s.replay[0].sample], Limits(max_bytes=REPLY_BYTES), prefetch=1)
    for i in range(8):
        assert sender.send(experience(i), "", timeout_s=10)

    def honest_batch() -> bool:
        reply = learner.next(64, 1.0)
        return reply is not None and (mode == "fifo" or isinstance(reply, TransitionReply))

    wait_until(honest_batch, 60)
    if mode == "fifo":  # the FIFO served its chunks once: give it more for the honest learner after the hostile one
        for i in range(8):
            assert sender.send(experience(100 + i), "", timeout_s=10)
    before = rss(replay.pid)

    impossible = [
        {"batch_size": 10**9, "ready_at": 1},  # the issue's: ready at once, 7.45 GiB of slot indices
        {"batch_size": 2**31},  # the wire's largest
        {"batch_size": 2**31, "ready_at": 1},
        {"batch_size": CAPACITY + 1, "ready_at": 1},  # more than the shard holds (a FIFO) or a reply carries
        {"batch_size": CAPACITY + 1, "ready_at": CAPACITY + 1},  # waits for data it can never hold
    ]
    for meta in impossible:
        answer = ask(hostile, meta)
        assert answer.kind == ERROR, meta
        assert answer.meta["reason"] in {"over_capacity", "reply_too_large"}, (meta, answer.meta)
    # Priorities for more transitions than any sample of this shard holds (a FIFO or uniform shard takes none).
    n = REPLY_BYTES // 24 - 64
    update = PriorityUpdate(np.zeros(n, np.int64), np.ones(n, np.uint64), np.ones(n, np.float64))
    assert send(hostile, frames_of(update.to_message()), 5.0)
    refused = recv_frames(hostile, 30)
    assert refused is not None and decode(refused).meta["reason"] == "bad_priorities"

    wait_until(lambda: learner.next(64, 1.0) is not None, 60)  # the honest learner is still served
    assert replay.poll() is None, "the shard died"
    assert rss(replay.pid) - before < RSS_GROWTH_BYTES, (before, rss(replay.pid))
    refused_total = metric(s.metrics_port, "messages_dropped_total")
    assert refused_total == len(impossible) + 1, refused_total  # each refusal counted once
    for closable in (sender, learner):
        closable.close()
    hostile.close(0)


def test_a_shard_refuses_at_once_what_it_could_never_serve_and_parks_the_rest():
    """`ReplayShard.refusal`, the rule both the ZMQ shard and a simulator ask: capacity, the reply's byte limit
    (a lower bound before the layout is known), and a FIFO's whole contents."""
    from surreal.config.schema import ReplayConfig
    from surreal.proto.wire import encode_chunk

    def shard(mode: str) -> ReplayShard:
        return ReplayShard.of(ReplayConfig(mode=mode, capacity=CAPACITY, max_message_bytes=REPLY_BYTES), seed=0)

    fifo, uniform, prioritized = shard("fifo"), shard("uniform"), shard("prioritized")
    assert (
        fifo.refusal(SampleRequest(CAPACITY)) is None and fifo.refusal(SampleRequest(CAPACITY + 1)) == "over_capacity"
    )
    for transitions in (uniform, prioritized):
        assert transitions.refusal(SampleRequest(10**9, ready_at=1)) == "reply_too_large"
        assert transitions.refusal(SampleRequest(CAPACITY + 1, ready_at=CAPACITY + 1)) == "over_capacity"
        assert transitions.refusal(SampleRequest(19_500, ready_at=1)) is None  # the layout is not known yet
        transitions.add(encode_chunk(experience(0), ""))
        assert transitions.refusal(SampleRequest(19_500, ready_at=1)) == "reply_too_large"
        most = transitions.storage.max_batch(transitions.sampler.weighted)
        assert transitions.refusal(SampleRequest(most, ready_at=1)) is None
        assert transitions.refusal(SampleRequest(most + 1, ready_at=1)) == "reply_too_large"
        # What it serves at its largest passes the learner's limit.
        reply = encode_sample_reply(transitions.sample(most))
        assert sum(len(memoryview(f)) for f in frames_of(reply)) <= REPLY_BYTES


# -- the learner ---------------------------------------------------------------------------------------


OBS, ACT = 3, 1  # Pendulum-v1
BATCH, MINIBATCHES = 32, 2
SAMPLE = BATCH * MINIBATCHES
STEPS_PER_REPLY = 64


def transitions(rng: np.random.Generator, n: int = SAMPLE) -> dict[str, np.ndarray]:
    slots = rng.integers(0, 10_000, n)
    return {
        "obs": rng.standard_normal((n, OBS)).astype(np.float32),
        "actions": rng.uniform(-2, 2, (n, ACT)).astype(np.float32),
        "rewards": rng.standard_normal(n).astype(np.float32),
        "next_obs": rng.standard_normal((n, OBS)).astype(np.float32),
        "discounts": np.full(n, 0.99, np.float32),
        "slots": slots,
        "ids": slots.astype(np.uint64) + 1,
    }


def malformed(rng: np.random.Generator) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(the reason the learner counts it under, a transition batch no honest shard sends)."""
    good = transitions(rng)
    without = lambda key: {k: v for k, v in good.items() if k != key}
    return [
        ("bad_transitions", without("rewards")),  # the KeyError on the learner's main thread
        ("bad_transitions", without("slots")),
        ("bad_transitions", {**good, "obs": good["obs"][:, :2]}),  # a wrong shape
        ("bad_transitions", {**good, "obs": good["obs"].astype(np.float64)}),  # a wrong dtype
        ("bad_transitions", {**good, "actions": good["actions"].astype(np.int32)}),
        ("bad_transitions", {**good, "ids": good["ids"].astype(np.int64)}),
        ("bad_transitions", {k: v[: SAMPLE - 1] for k, v in good.items()}),  # not the batch asked for
        ("bad_transitions", {**good, "rewards": good["rewards"][:-1]}),  # arrays of different lengths
        ("bad_transitions", {**good, "extra": np.zeros(SAMPLE, np.float32)}),
        ("bad_transitions", {**good, "weights": np.ones(SAMPLE, np.float32)}),  # a uniform shard sends none
        ("non_finite", {**good, "rewards": np.where(good["rewards"] > 0, np.nan, good["rewards"]).astype(np.float32)}),
    ]


@pytest.mark.system
def test_a_live_learner_counts_and_drops_malformed_transition_replies_and_keeps_learning(roles, ctx, tmp_path):
    """A shard the learner trusts answers its requests with a malformed batch, then an honest one, in turn: every
    malformed one is counted by reason, and the learner updates from the honest ones throughout."""
    overrides = [
        "algo=ddpg",
        "env=Pendulum-v1",
        "replay.mode=uniform",
        f"algo.batch_size={BATCH}",
        f"learner.minibatches_per_sample={MINIBATCHES}",
        "algo.learning_starts=0",
        "steps=100000000",
        f"replay.max_message_bytes={REPLY_BYTES}",
    ]
    config = tmp_path / "config.yaml"
    save_config(load_config(overrides), config)
    s = loopback_settings(run_dir=tmp_path / "run")
    shard = make_socket(ctx, zmq.ROUTER)
    shard.bind(s.replay[0].sample)
    learner = roles.start("learner", s, extra_env={"SURREAL_CONFIG": str(config)})
    rng = np.random.default_rng(0)
    bad = malformed(rng)
    env_steps = 0

    def answer_one(arrays: dict[str, np.ndarray]) -> None:
        nonlocal env_steps
        frames = None
        while frames is None:
            assert learner.poll() is None, "the learner died"
            frames = recv_frames(shard, 1.0)
        identity, request = frames[0].bytes, decode(frames[1:])
        if request.kind != SAMPLE_REQUEST:  # a priority update: this shard is uniform, the learner sends none
            raise AssertionError(f"unexpected {request.kind}")
        env_steps += STEPS_PER_REPLY
        reply = encode_sample_reply(TransitionReply(ShardReport(0, env_steps), arrays))
        assert send(shard, [identity, *frames_of(reply)], 10.0)

    answer_one(transitions(rng))
    wait_until(lambda: metric(s.metrics_port, "learner_updates") > 0, 120)
    for _, arrays in bad:
        answer_one(arrays)
        answer_one(transitions(rng))
    expected: dict[str, int] = {}
    for reason, _ in bad:
        expected[reason] = expected.get(reason, 0) + 1
    for reason, count in expected.items():
        wait_until(lambda r=reason, c=count: metric(s.metrics_port, "messages_dropped_total", reason=r) == c, 60)
    honest = 1 + len(bad)
    # Every honest reply is learned from in full: its two minibatches, one gradient step each (replay ratio 1:
    # 64 env steps a reply allow 64 updates, more than a sample's two).
    wait_until(lambda: metric(s.metrics_port, "learner_updates") >= honest * MINIBATCHES, 120)
    assert learner.poll() is None, "the learner died"
    shard.close(0)


def test_a_fifo_reply_keeps_its_honest_chunks_and_leaves_out_those_the_algorithm_cannot_take():
    """A FIFO shard without the experiment's layout (a config no launcher prepared: it knows neither env nor
    algorithm) cannot check an algorithm's fields: the learner leaves out each chunk that lacks them, or whose ES noise
    offset lies past the table, and keeps the rest of the reply."""
    from surreal.algos import get_algorithm
    from surreal.config import algo_config
    from surreal.envs import env_spaces
    from surreal.proto.wire import FifoReply, ReplyLayout, decode_sample_reply, encode_chunk
    from surreal.replay.shard import ReplayShard as Shard

    cfg = load_config(["algo=ppo", "env=Pendulum-v1"])
    layout = ReplyLayout(get_algorithm("ppo").chunk_fields(*env_spaces(cfg), algo_config(cfg)))
    honest = {**chunk(T=4, K=2), "actions": np.zeros((4, 2, 1), np.float32), "logprobs": np.zeros((4, 2), np.float32)}
    honest["obs"], honest["next_obs"] = honest["obs"][..., :3], honest["next_obs"][..., :3]
    without_logprobs = {k: v for k, v in honest.items() if k != "logprobs"}
    shard = Shard("fifo", 1000)
    for arrays in (honest, without_logprobs, honest):
        shard.add(encode_chunk(Chunk(arrays, version=0, actor=0), ""))
    message = decode(frames_of(encode_sample_reply(shard.sample(1000))))
    reply = decode_sample_reply(message, 0, layout=layout)
    assert isinstance(reply, FifoReply) and len(reply.chunks) == 2 and reply.refused == ["bad_chunk_fields"]

    es_cfg = load_config(["algo=es", "env=InvertedPendulum-v5"])
    es_fields = get_algorithm("es").chunk_fields(*env_spaces(es_cfg), algo_config(es_cfg))
    past_the_table = es_fields["noise_offsets"].high + 1
    pair = {
        "noise_offsets": np.array([[past_the_table]], np.int64),
        "returns": np.zeros((1, 1, 2), np.float32),
        "lengths": np.ones((1, 1, 2), np.int32),
        "obs_sum": np.zeros((1, 1, 4)),
        "obs_sumsq": np.zeros((1, 1, 4)),
        "obs_count": np.ones((1, 1)),
    }
    es_shard = Shard("fifo", 1000)
    es_shard.add(encode_chunk(Chunk(pair, version=0, actor=0, steps=2), ""))
    message = decode(frames_of(encode_sample_reply(es_shard.sample(1000))))
    reply = decode_sample_reply(message, 0, layout=ReplyLayout(es_fields))
    assert isinstance(reply, FifoReply) and reply.chunks == [] and reply.refused == ["bad_chunk_fields"]
    pair["noise_offsets"] = np.array([[past_the_table - 1]], np.int64)
    es_shard.add(encode_chunk(Chunk(pair, version=0, actor=0, steps=2), ""))
    reply = decode_sample_reply(
        decode(frames_of(encode_sample_reply(es_shard.sample(1000)))), 0, layout=ReplyLayout(es_fields)
    )
    assert isinstance(reply, FifoReply) and len(reply.chunks) == 1 and reply.refused == []


# -- a transition shard laid out by the experiment; parking places shared fairly ----------------------------------


def ddpg_layout() -> dict:
    """The layout the launcher resolves for DDPG on Pendulum-v1 (run/preflight.py `checked`)."""
    from surreal.run.preflight import checked

    return checked(load_config(["algo=ddpg", "env=Pendulum-v1"]))[0].replay.layout


def transitions_chunk(T: int = 50, K: int = 2, seed: int = 0, obs: int = 3) -> dict[str, np.ndarray]:
    """A chunk as DDPG's actors send it: n-step transitions, `T` x `K` of them."""
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((T, K, obs)).astype(np.float32),
        "actions": rng.uniform(-2, 2, (T, K, 1)).astype(np.float32),
        "rewards": rng.standard_normal((T, K)).astype(np.float32),
        "next_obs": rng.standard_normal((T, K, obs)).astype(np.float32),
        "discounts": np.full((T, K), 0.99, np.float32),
    }


@pytest.fixture
def live_shard():
    """A transition ReplayServer over ZMQ on 127.0.0.1, laid out by the experiment (`replay.layout`), driven from
    this thread (`poll_once`), and sockets to it; all closed at the end."""
    from surreal.config.schema import ReplayConfig
    from surreal.launch.local import free_ports
    from surreal.roles.replay import ReplayServer

    ctx = zmq.Context()
    exp, sample = free_ports(2)
    config = ReplayConfig(mode="uniform", capacity=10_000, layout=ddpg_layout())
    server = ReplayServer(ctx, f"tcp://127.0.0.1:{exp}", f"tcp://127.0.0.1:{sample}", ReplayShard.of(config, 0))
    sockets: list[zmq.Socket] = []

    def connect(kind: int) -> zmq.Socket:
        sock = make_socket(ctx, kind)
        sock.connect(f"tcp://127.0.0.1:{exp if kind == zmq.PUSH else sample}")
        sockets.append(sock)
        return sock

    yield server, connect
    for sock in sockets:
        sock.close(0)
    server.close()
    ctx.term()


def serve_until(server, condition, timeout_s: float = 60.0) -> None:
    """Run the server's loop until `condition()` holds; fail after `timeout_s` (a hang, not a verdict)."""
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the shard never got there"
        server.poll_once(0.01)


def push(sock: zmq.Socket, arrays: dict[str, np.ndarray], actor: int) -> None:
    from surreal.proto.wire import encode_chunk

    assert send(sock, frames_of(encode_chunk(Chunk(arrays, version=0, actor=actor), "")), 10.0)


def test_a_hostile_first_chunk_is_refused_and_every_honest_actor_is_served(live_shard):
    """The first chunk a transition shard receives is a peer's: well-formed (finite, one [T, K], plausible steps)
    but of other fields. The shard was laid out by the experiment, so it is refused and counted like any bad chunk,
    and the chunks of every honest actor after it are stored and served."""
    server, connect = live_shard
    hostile = connect(zmq.PUSH)
    wrong = {**transitions_chunk(obs=4), "extra": np.zeros((50, 2), np.float32)}
    push(hostile, wrong, actor=99)
    serve_until(server, lambda: server.bad_messages == 1)
    honest = [connect(zmq.PUSH) for _ in range(3)]
    for actor, sock in enumerate(honest):
        for i in range(2):
            push(sock, transitions_chunk(seed=10 * actor + i), actor)
    serve_until(server, lambda: server.replay.stats()["added"] == 3 * 2 * 100)
    learner = connect(zmq.DEALER)
    assert send(learner, frames_of(SampleRequest(256, ready_at=1).to_message()), 5.0)
    got: list[Message] = []

    def answered() -> bool:
        while learner.poll(0):
            got.append(decode(learner.recv_multipart()))
        return bool(got)

    serve_until(server, answered)
    reply = decode_sample_reply(got[0], 0)
    assert isinstance(reply, TransitionReply) and reply.transitions["obs"].shape == (256, 3)
    assert reply.report.actors == [0, 1, 2], "every honest actor heard, the hostile one not"
    assert server.bad_messages == 1, "the hostile chunk counted once, nothing honest refused"


def exchange(server, learner: zmq.Socket, requests: int, batch: int) -> dict[str, int]:
    """The learner's requests, two in flight as its prefetch keeps them, each answered: {"data": n, reason: n}."""
    counts: dict[str, int] = {}
    sent = answered = 0

    def take() -> bool:
        nonlocal answered
        while learner.poll(0):
            message = decode(learner.recv_multipart())
            key = "data" if message.kind == TRANSITION_REPLY else str(message.meta.get("reason", message.kind))
            counts[key] = counts.get(key, 0) + 1
            answered += 1
        return answered >= sent

    while sent < requests:
        for _ in range(min(2, requests - sent)):
            assert send(learner, frames_of(SampleRequest(batch).to_message()), 5.0)
            sent += 1
        serve_until(server, take)
    return counts


def test_four_peers_parking_at_their_cap_leave_an_honest_learner_its_batches(live_shard, monkeypatch):
    """Four peers each park 16 requests of the shard's whole capacity while it holds 1,000 transitions: requests
    that can never be served, filling all 64 parking places. An honest learner's requests are answered with data as
    often as without them (counted, not timed) and never refused `too_many_pending`: each of its requests takes the
    place of the newest request of the peer holding the most, which is refused instead."""
    from surreal.roles import replay as replay_role

    monkeypatch.setattr(replay_role, "DEFER_S", 600.0)  # the hostile requests stay parked, however slow the box
    server, connect = live_shard
    pusher = connect(zmq.PUSH)
    for i in range(10):
        push(pusher, transitions_chunk(seed=i), actor=0)
    serve_until(server, lambda: server.replay.stats()["size"] == 1000)
    learner = connect(zmq.DEALER)
    without = exchange(server, learner, requests=50, batch=64)

    hostile = [connect(zmq.DEALER) for _ in range(replay_role.MAX_PENDING // replay_role.MAX_PENDING_PER_PEER)]
    for sock in hostile:
        for _ in range(replay_role.MAX_PENDING_PER_PEER):
            assert send(sock, frames_of(SampleRequest(10_000).to_message()), 5.0)
    serve_until(server, lambda: len(server.core.pending) == replay_role.MAX_PENDING)
    with_them = exchange(server, learner, requests=50, batch=64)

    assert without == {"data": 50}
    assert with_them.get("too_many_pending", 0) == 0, with_them
    assert with_them.get("data", 0) >= 0.8 * without["data"], with_them
    evicted = 0
    for sock in hostile:
        while sock.poll(0):
            evicted += decode(sock.recv_multipart()).meta.get("reason") == "too_many_pending"
    assert evicted >= 1, "the hostile peers held every place: the learner took one of theirs"
