"""Live replay and ps processes driven through the real channels: the multi-process path of the protocol."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
import zmq

from conftest import loopback_settings, wait_until
from surreal.config import load_config, save_config
from surreal.proto.channels import (
    ExperienceSender,
    ParamClient,
    ParamPublisher,
    SampleClient,
    frames_of,
    recv_frames,
    send,
)
from surreal.proto.codec import Limits, decode, encode
from surreal.proto.wire import (
    ERROR,
    PARAMS,
    PARAMS_REQUEST,
    BlobMeta,
    Chunk,
    FifoReply,
    NotModified,
    Params,
    ParamsRequest,
    TransitionReply,
)
from surreal.roles.common import EXIT_STOPPED
from surreal.settings import ReplayEndpoint

LIMITS = Limits()


def chunk(value: float, T: int = 8, K: int = 2) -> dict[str, np.ndarray]:
    return {
        "obs": np.full((T, K, 3), value, np.float32),
        "next_obs": np.full((T, K, 3), value + 0.5, np.float32),
        "actions": np.full((T, K, 2), value, np.float32),
        "rewards": np.full((T, K), value, np.float32),
        "terminated": np.zeros((T, K), bool),
        "truncated": np.zeros((T, K), bool),
    }


def experience(value: float, version: int = 0, T: int = 8, K: int = 2, **fields) -> Chunk:
    """A chunk of `chunk(value, T, K)` made with parameters `version` (fields: Chunk's episode fields, steps)."""
    return Chunk(chunk(value, T, K), version=version, actor=0, **fields)


def ask(client: ParamClient, version: int, incarnation: str, timeout_s: float, hold_ms: int = 0):
    """One parameter request on `client`'s socket and the ps's typed answer (`Params` or `NotModified`), or
    None: what `ParamClient.fetch` asks, with "not modified" told apart from no answer."""
    if not send(client.sock, frames_of(ParamsRequest(version, incarnation, hold_ms).to_message()), timeout_s):
        return None
    frames = recv_frames(client.sock, timeout_s + hold_ms / 1000)
    return None if frames is None else client.decode(frames)


def held(reply) -> tuple[int, str]:
    """(version, incarnation) of a ps's answer."""
    return (
        (reply.blob.version, reply.blob.incarnation)
        if isinstance(reply, Params)
        else (reply.version, reply.incarnation)
    )


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def served_metric(port: int, name: str) -> float | None:
    """A role's metric, or None while its /metrics endpoint is not up (a busy box starts it late)."""
    try:
        return metric_value(metrics_text(port), name)
    except OSError:
        return None


def metric_value(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.system
def test_role_help_starts_nothing_and_replay_ps_never_import_torch():
    for role in ("replay", "ps", "learner", "actor"):
        out = subprocess.run(
            [sys.executable, "-m", "surreal", "role", role, "--help"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0 and f"surreal role {role}" in out.stdout
    code = (
        "import sys, surreal.roles.replay, surreal.roles.ps, surreal.replay, surreal.proto.channels;"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.system
def test_fifo_through_two_shards_round_robin_each_chunk_once(roles, ctx):
    shards = [loopback_settings(index=i) for i in range(2)]
    procs = [roles.start("replay", s, "--mode", "fifo", "--capacity", "10000") for s in shards]
    endpoints = [ReplayEndpoint("127.0.0.1", s.experience_port, s.sample_port) for s in shards]
    sender = ExperienceSender(ctx, [e.experience for e in endpoints])
    sampler = SampleClient(ctx, [e.sample for e in endpoints], LIMITS, prefetch=2)
    # PUSH (with IMMEDIATE) only round-robins over connected shards: send numbered warm-up chunks until
    # both shards have one, so the 40 that follow have both to choose from even on a loaded machine.
    wait_until(lambda: all(p.poll() is None for p in procs) and sampler.next(1, 0.2) is None, 60)
    sent = 0

    def both_shards_have_data() -> bool:
        nonlocal sent
        if not sender.send(experience(float(sent), version=sent), "", timeout_s=1):
            return False  # no shard connected yet: the chunk was not queued, so it is not counted
        sent += 1
        try:
            return all(
                metric_value(metrics_text(s.metrics_port), "surreal_replay_transitions_in_total") > 0 for s in shards
            )
        except OSError:  # a shard's /metrics endpoint is not up yet
            return False

    wait_until(both_shards_have_data, 60, interval_s=0.1)
    for i in range(sent, sent + 40):
        assert sender.send(experience(float(i), version=i), "", timeout_s=30)
    sent += 40
    seen: dict[int, list[int]] = {0: [], 1: []}
    for _ in range(200):
        got = sampler.next(1000, 0.5)
        if got is None:
            if sum(len(v) for v in seen.values()) == sent:
                break
            continue
        assert isinstance(got, FifoReply)
        for received in got.chunks:
            seen[got.report.shard].append(received.version)
            np.testing.assert_array_equal(received.arrays["obs"], chunk(float(received.version))["obs"])
    assert sorted(seen[0] + seen[1]) == list(range(sent)), "every chunk served exactly once"
    assert seen[0] and seen[1], "both shards received experience"
    assert seen[0] == sorted(seen[0]) and seen[1] == sorted(seen[1]), "FIFO order within a shard"
    for s in shards:
        text = metrics_text(s.metrics_port)
        assert metric_value(text, "surreal_replay_transitions_in_total") > 0
        assert "surreal_replay_size" in text and "surreal_replay_transitions_out_per_second" in text
    sender.close()
    sampler.close()


@pytest.mark.system
def test_prioritized_updates_are_routed_to_the_owning_shard(roles, ctx):
    shards = [loopback_settings(index=i) for i in range(2)]
    for s in shards:
        roles.start("replay", s, "--mode", "prioritized", "--capacity", "1000")
    endpoints = [ReplayEndpoint("127.0.0.1", s.experience_port, s.sample_port) for s in shards]
    senders = [ExperienceSender(ctx, [e.experience]) for e in endpoints]
    sampler = SampleClient(ctx, [e.sample for e in endpoints], LIMITS, prefetch=1)
    for shard, sender in enumerate(senders):
        for i in range(4):
            assert sender.send(experience(100.0 * shard + i, T=64, K=1), "", timeout_s=10)

    def batch_from(shard: int, size: int = 64) -> dict:
        for _ in range(100):
            got = sampler.next(size, 1.0)
            if isinstance(got, TransitionReply) and got.report.shard == shard:
                return got.transitions
        raise AssertionError("no batch from shard")

    wait_until(lambda: batch_from(0) is not None and batch_from(1) is not None, 20)
    before = batch_from(1)
    assert before["weights"].dtype == np.float32
    # Make one transition of shard 1 dominate; send its priorities home to shard 1 only.
    slots, ids = before["slots"], before["ids"]
    target = int(slots[0])
    priorities = np.where(slots == target, 1e6, 1e-6)
    unique = {int(s): (int(i), float(p)) for s, i, p in zip(slots, ids, priorities, strict=True)}
    sampler.send_priorities(
        1,
        np.array(list(unique), np.int64),
        np.array([v[0] for v in unique.values()], np.uint64),
        np.array([v[1] for v in unique.values()], np.float64),
    )

    def dominated() -> bool:
        return float(np.mean(batch_from(1)["slots"] == target)) > 0.9

    wait_until(dominated, 20)
    shard0 = batch_from(0, 256)
    assert len(np.unique(shard0["slots"])) > 4, "shard 0's priorities were not touched"
    for sender in senders:
        sender.close()
    sampler.close()


@pytest.mark.system
def test_transition_replies_count_env_steps_and_hand_over_finished_episodes_once(roles, ctx, tmp_path):
    """Off-policy learners see no chunks: a reply carries the shard's env-step count (the actor's, which
    differs from the transitions stored when actors send n-step transitions) and the episodes since."""
    config = save_config(load_config(["algo=ddpg", "algo.n_step=2"]), tmp_path / "ddpg.yaml")
    settings = loopback_settings(config_path=config)  # n-step 2: 16 transitions may stand for up to 32 steps
    roles.start("replay", settings, "--mode", "uniform", "--capacity", "1000")
    endpoint = ReplayEndpoint("127.0.0.1", settings.experience_port, settings.sample_port)
    sender = ExperienceSender(ctx, [endpoint.experience])
    sampler = SampleClient(ctx, [endpoint.sample], LIMITS, prefetch=1)
    episodes = {"episode_returns": [-3.5, 7.0], "episode_lengths": [10, 12]}
    assert sender.send(experience(1.0, steps=20, **episodes), "", timeout_s=10)
    assert sender.send(experience(2.0, steps=20), "", timeout_s=10)
    seen_returns: list[float] = []
    replies = []
    for _ in range(50):
        got = sampler.next(4, 1.0)
        if got is None:
            continue
        replies.append(got.report)
        seen_returns += got.report.episode_returns
        if got.report.env_steps == 40 and len(replies) > 3:
            break
    assert replies[-1].env_steps == 40 and replies[-1].shard == 0
    assert seen_returns == [-3.5, 7.0], "each finished episode is handed over exactly once"
    sender.close()
    sampler.close()


def test_ps_late_join_not_modified_and_new_incarnation(roles, ctx):
    settings = loopback_settings()
    publisher = ParamPublisher(ctx, settings.bind(settings.params_pub_port))
    blob = {"policy": {"w": np.arange(1000, dtype=np.float32)}, "obs_norm": {"mean": np.ones(3)}}
    publisher.publish(BlobMeta(3, "a"), blob)  # before any ps exists
    roles.start("ps", settings)
    client = ParamClient(ctx, settings.ps_addrs, LIMITS)

    def fetch_version():
        publisher.service()  # the learner's loop answers the late subscription with the latest blob
        reply = client.fetch(-1, "", 0.2)
        return reply if isinstance(reply, Params) else None

    reply = wait_until(fetch_version, 20)
    assert held(reply) == (3, "a")
    np.testing.assert_array_equal(reply.arrays["policy"]["w"], blob["policy"]["w"])
    # Replies to the short-timeout requests above may still arrive (a late reply is a valid answer and
    # is taken by the next fetch); the ps's own answer to "have 3/a" is "not modified".
    again = wait_until(lambda: isinstance(r := ask(client, 3, "a", 1.0), NotModified) and r, 20)
    assert held(again) == (3, "a")

    # A resumed learner restarts at a lower version under a new incarnation: the ps must take it.
    publisher.publish(BlobMeta(1, "b"), {"policy": {"w": np.zeros(4, np.float32)}})
    reply = wait_until(lambda: isinstance(r := client.fetch(3, "a", 0.5), Params) and r, 20)
    assert held(reply) == (1, "b")
    client.close()
    publisher.close()


@pytest.mark.system
def test_actor_side_survives_a_replay_restart(roles, ctx):
    settings = loopback_settings()
    replay = roles.start("replay", settings, "--mode", "fifo")
    endpoint = settings.replay[0]
    sender = ExperienceSender(ctx, [endpoint.experience])
    sampler = SampleClient(ctx, [endpoint.sample], LIMITS, prefetch=2, lost_after_s=2.0)
    assert sender.send(experience(1.0, version=1), "", timeout_s=20)
    got = wait_until(lambda: sampler.next(1000, 0.5), 20)
    assert isinstance(got, FifoReply) and got.chunks[0].version == 1

    replay.send_signal(signal.SIGKILL)
    replay.wait(timeout=10)
    # Nothing listens now: the send is refused within its timeout instead of queueing without bound.
    wait_until(lambda: not sender.send(experience(2.0, version=2), "", timeout_s=0.2), 10)

    roles.start("replay", settings, "--mode", "fifo")
    assert sender.send(experience(3.0, version=3), "", timeout_s=20), "sender reconnected to the new replay"
    got = wait_until(lambda: sampler.next(1000, 0.5), 30)
    versions = [c.version for c in got.chunks]
    assert 3 in versions, "sampler re-issued its requests to the restarted replay"
    sender.close()
    sampler.close()


# -- replay snapshots: a restarted shard comes back with what it held ------------------------------------


def snapshot_settings(tmp_path, interval_s: float):
    """A DDPG shard's settings with snapshots every `interval_s` in a run folder of the test's own."""
    overrides = ["algo=ddpg", f"replay.snapshot_interval_s={interval_s}"]
    config = save_config(load_config(overrides), tmp_path / "ddpg.yaml")
    return loopback_settings(config_path=config, run_dir=tmp_path / "run")


def fill_shard(ctx, settings, chunks: int) -> None:
    """Push `chunks` chunks of 16 transitions (obs tagged with the chunk's number) and wait until all are held."""
    sender = ExperienceSender(ctx, [settings.replay[0].experience])
    for i in range(chunks):
        assert sender.send(experience(float(i)), "", timeout_s=20)
    sender.close()
    held = lambda: served_metric(settings.metrics_port, "surreal_replay_size")  # noqa: E731
    wait_until(lambda: held() == 16 * chunks, 60, interval_s=0.2)


def restarted_shard_holds(roles, ctx, settings, mode: str) -> tuple[int, set[float]]:
    """Start the shard again and take one sample reply: (transitions it holds, chunk tags it drew)."""
    roles.start("replay", settings, "--mode", mode, "--capacity", "1000")
    sampler = SampleClient(ctx, [settings.replay[0].sample], LIMITS, prefetch=1)
    got = wait_until(lambda: sampler.next(256, 1.0), 60)
    sampler.close()
    assert isinstance(got, TransitionReply)
    size = wait_until(lambda: served_metric(settings.metrics_port, "surreal_replay_size"), 60)
    return int(size), set(np.unique(got.transitions["obs"]).tolist())


@pytest.mark.system
def test_a_replay_shard_given_sigterm_writes_everything_and_restarts_with_it(roles, ctx, tmp_path):
    settings = snapshot_settings(tmp_path, 3600.0)  # no periodic snapshot: all of it must come from SIGTERM's
    replay = roles.start("replay", settings, "--mode", "prioritized", "--capacity", "1000")
    fill_shard(ctx, settings, 20)
    replay.send_signal(signal.SIGTERM)
    assert replay.wait(timeout=60) == EXIT_STOPPED, "stopped by a signal with everything saved"
    held, tags = restarted_shard_holds(roles, ctx, settings, "prioritized")
    assert held == 320 and tags <= set(map(float, range(20))) and len(tags) > 10, "no transition lost"
    assert "restored 320 transitions" in (tmp_path / "replay-0-1.log").read_text()


@pytest.mark.system
def test_a_killed_replay_shard_comes_back_with_its_last_periodic_snapshot(roles, ctx, tmp_path):
    settings = snapshot_settings(tmp_path, 0.2)
    replay = roles.start("replay", settings, "--mode", "uniform", "--capacity", "1000")
    fill_shard(ctx, settings, 20)
    in_snapshot = lambda: served_metric(settings.metrics_port, "surreal_replay_snapshot_transitions")  # noqa: E731
    wait_until(lambda: in_snapshot() == 320, 60, interval_s=0.1)
    replay.send_signal(signal.SIGKILL)
    replay.wait(timeout=10)
    held, _ = restarted_shard_holds(roles, ctx, settings, "uniform")
    assert held == 320


@pytest.mark.system
def test_a_fifo_shard_keeps_its_chunks_across_sigterm_and_serves_them_once(roles, ctx, tmp_path):
    settings = loopback_settings(run_dir=tmp_path / "run")  # PPO's defaults: a FIFO, snapshots on SIGTERM
    replay = roles.start("replay", settings, "--mode", "fifo")
    fill_shard(ctx, settings, 3)
    replay.send_signal(signal.SIGTERM)
    assert replay.wait(timeout=60) == EXIT_STOPPED, "stopped by a signal with everything saved"
    restarted = roles.start("replay", settings, "--mode", "fifo")
    sampler = SampleClient(ctx, [settings.replay[0].sample], LIMITS, prefetch=1)
    got = wait_until(lambda: sampler.next(1000, 1.0), 60)
    sampler.close()
    assert [c.arrays["obs"][0, 0, 0] for c in got.chunks] == [0.0, 1.0, 2.0], "in order, all of them"
    restarted.send_signal(signal.SIGKILL)  # served since it restored: a restart must not serve them again
    restarted.wait(timeout=10)
    roles.start("replay", settings, "--mode", "fifo")
    wait_until(lambda: "no replay snapshot to restore" in (tmp_path / "replay-0-2.log").read_text(), 60)
    wait_until(lambda: served_metric(settings.metrics_port, "surreal_replay_size") is not None, 60)
    assert served_metric(settings.metrics_port, "surreal_replay_size") == 0


@pytest.mark.system
def test_ps_holds_a_request_for_a_newer_blob_then_answers_not_modified(roles, ctx):
    """A held request (`hold_s`, what a waiting actor sends) is answered by the next blob, or by "not modified"
    when its hold ends; a malformed hold is refused and counted."""
    settings = loopback_settings()
    publisher = ParamPublisher(ctx, settings.bind(settings.params_pub_port))
    publisher.publish(BlobMeta(1, "a"), {"policy": {"w": np.ones(8, np.float32)}})
    roles.start("ps", settings)
    client = ParamClient(ctx, settings.ps_addrs, LIMITS)

    def current():
        publisher.service()
        reply = client.fetch(-1, "", 0.2)
        return isinstance(reply, Params) and reply.blob.version == 1

    wait_until(current, 20)
    while recv_frames(client.sock, 0.3) is not None:  # late replies to the probes above
        pass
    assert send(client.sock, frames_of(ParamsRequest(1, "a", hold_ms=60_000).to_message()), 5.0)
    assert recv_frames(client.sock, 0.5) is None, "held: no answer while nothing newer exists"
    publisher.publish(BlobMeta(2, "a"), {"policy": {"w": np.full(8, 2.0, np.float32)}})
    frames = wait_until(lambda: (publisher.service(), recv_frames(client.sock, 0.1))[1], 20)
    message = decode(frames, LIMITS)
    assert message.kind == PARAMS and message.meta["version"] == 2
    np.testing.assert_array_equal(message.arrays["policy"]["w"], np.full(8, 2.0, np.float32))

    reply = ask(client, 2, "a", 20.0, hold_ms=200)  # nothing newer comes: "not modified" when the hold ends
    assert isinstance(reply, NotModified) and reply.version == 2

    bad = encode(PARAMS_REQUEST, {"version": 2, "incarnation": "a", "hold_ms": -1})
    assert send(client.sock, bad, 5.0)
    frames = wait_until(lambda: recv_frames(client.sock, 0.1), 20)
    assert decode(frames, LIMITS).kind == ERROR
    port = int(settings.metrics_port)
    wait_until(lambda: metric_value(metrics_text(port), "surreal_messages_dropped_total") == 1, 20)
    client.close()
    publisher.close()
