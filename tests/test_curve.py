"""CURVE on the wire (src/surreal/proto/curve.py): the keys' files, the settings that name them, the launcher's keys,
the channels over a `WireContext`, and live roles that refuse every peer without the keys at the handshake, count
each refusal by socket and reason, and serve nothing to it and take nothing from it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zmq

from conftest import loopback_settings, wait_until
from surreal.config import load_config, save_config
from surreal.launch.local import free_ports, launch_keys, plan_processes
from surreal.proto.channels import (
    ExperienceSender,
    ParamClient,
    ParamPublisher,
    SampleClient,
    bind_socket,
    frames_of,
    make_socket,
    param_subscriber,
    recv_frames,
)
from surreal.proto.codec import Limits, decode
from surreal.proto.curve import (
    CLIENT_KEY_FILE,
    SERVER_KEY_FILE,
    CurveKeyError,
    CurveKeys,
    HandshakeWatch,
    WireContext,
)
from surreal.proto.wire import BlobMeta, Chunk, Params, ParamsRequest, SampleRequest, encode_chunk
from surreal.settings import Settings, SettingsError

WAIT_S = 60.0  # catches a hang only


def arrays(T: int = 4) -> dict[str, np.ndarray]:
    return {
        "obs": np.zeros((T, 1, 3), np.float32),
        "next_obs": np.ones((T, 1, 3), np.float32),
        "actions": np.zeros((T, 1, 1), np.float32),
        "rewards": np.ones((T, 1), np.float32),
        "terminated": np.zeros((T, 1), bool),
        "truncated": np.zeros((T, 1), bool),
    }


# -- keys and settings ----------------------------------------------------------------------------------------


def test_keys_written_for_a_launch_are_private_and_read_back(tmp_path: Path) -> None:
    folder = launch_keys(tmp_path)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in (SERVER_KEY_FILE, CLIENT_KEY_FILE):
        path = folder / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_size == 32
    keys = CurveKeys.load(folder)
    assert keys.server_public == zmq.curve_public(keys.server_secret) and keys.server_public != keys.client_public
    assert launch_keys(tmp_path / "again") != folder and CurveKeys.load(launch_keys(tmp_path / "other")) != keys
    assert keys.server_secret not in repr(keys).encode() and keys.client_secret not in repr(keys).encode()


def test_a_key_file_holds_32_raw_bytes_or_their_z85_text(tmp_path: Path) -> None:
    public, secret = zmq.curve_keypair()
    (tmp_path / SERVER_KEY_FILE).write_bytes(secret + b"\n")  # what zmq.curve_keypair gives, with a newline
    (tmp_path / CLIENT_KEY_FILE).write_bytes(os.urandom(32))  # what `head -c 32 /dev/urandom` gives
    keys = CurveKeys.load(tmp_path)
    assert keys.server_secret == secret and keys.server_public == public


@pytest.mark.parametrize(
    ("server", "message"),
    [
        (None, "server.secret: No such file"),
        (b"short", "5 bytes"),
        (b"~" * 40, "not Z85"),
        (b"#" * 40, "not Z85"),  # Z85's alphabet, but a group past 2**32
    ],
)
def test_a_bad_key_is_a_settings_error_naming_its_file(tmp_path: Path, server: bytes | None, message: str) -> None:
    (tmp_path / CLIENT_KEY_FILE).write_bytes(os.urandom(32))
    if server is not None:
        (tmp_path / SERVER_KEY_FILE).write_bytes(server)
    with pytest.raises(CurveKeyError, match=message):
        CurveKeys.load(tmp_path)
    settings = Settings.from_env({"SURREAL_CURVE_DIR": str(tmp_path)})
    with pytest.raises(SettingsError, match=f"SURREAL_CURVE_DIR: {tmp_path}.*{message}"):
        settings.curve_keys  # noqa: B018


def test_a_role_with_a_bad_key_exits_with_one_line(tmp_path: Path) -> None:
    s = loopback_settings(curve_dir=tmp_path / "missing")
    env = {**os.environ, **s.to_env()}
    done = subprocess.run(
        [sys.executable, "-m", "surreal", "role", "replay"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"surreal role replay: SURREAL_CURVE_DIR: {tmp_path / 'missing' / SERVER_KEY_FILE}: No such file or directory"
    ]


def test_the_curve_folder_travels_in_the_environment_and_unset_is_plaintext(tmp_path: Path) -> None:
    folder = launch_keys(tmp_path)
    settings = Settings(curve_dir=folder)
    again = Settings.from_env(settings.to_env())
    assert again == settings and again.curve_keys == CurveKeys.load(folder)
    off = Settings().to_env()
    assert off["SURREAL_CURVE_DIR"] == "", "written empty, so a child never inherits a launcher's stale folder"
    assert Settings.from_env(off).curve_keys is None


def test_surreal_run_hands_every_role_the_same_keys(tmp_path: Path) -> None:
    folder = launch_keys(tmp_path / "private")
    specs = plan_processes(load_config(["actors=2"]), tmp_path / "run", {}, curve_dir=folder)
    assert {spec.env["SURREAL_CURVE_DIR"] for spec in specs} == {str(folder)}


# -- the channels over a WireContext ------------------------------------------------------------------------


@pytest.fixture
def keys() -> CurveKeys:
    return CurveKeys.generate()


def test_channels_carry_messages_between_peers_holding_the_keys(keys: CurveKeys) -> None:
    server, client = WireContext(keys), WireContext(keys)
    try:
        pull = bind_socket(server, zmq.PULL, "tcp://127.0.0.1:0")
        assert pull.getsockopt(zmq.MECHANISM) == zmq.CURVE
        sender = ExperienceSender(client, [pull.getsockopt_string(zmq.LAST_ENDPOINT)])
        assert sender.sock.getsockopt(zmq.MECHANISM) == zmq.CURVE
        assert sender.send(Chunk(arrays(), version=3, actor=0), "", timeout_s=WAIT_S)
        frames = recv_frames(pull, WAIT_S)
        assert frames is not None and decode(frames).meta["version"] == 3
        publisher = ParamPublisher(server, "tcp://127.0.0.1:0")
        sub = param_subscriber(client, publisher.sock.getsockopt_string(zmq.LAST_ENDPOINT))
        publisher.publish(BlobMeta(7, "i"), {"w": np.ones(4, np.float32)})

        def blob_arrived() -> bool:
            publisher.service()
            return sub.poll(50, zmq.POLLIN) != 0

        wait_until(blob_arrived, WAIT_S)
        assert decode(sub.recv_multipart(copy=False)).meta["version"] == 7
        for sock in (pull, sub):
            sock.close(0)
        sender.close()
        publisher.close()
    finally:
        server.destroy(0)
        client.destroy(0)


def test_clients_over_curve_still_hear_a_server_go_away(keys: CurveKeys) -> None:
    """The learner's sample client and an actor's parameter client watch their connections with socket monitors
    (a request out to a server that went away is not waited for): over CURVE, the monitors hear the break too."""
    server, client = WireContext(keys), WireContext(keys)
    try:
        shard = bind_socket(server, zmq.ROUTER, "tcp://127.0.0.1:0")
        ps = bind_socket(server, zmq.ROUTER, "tcp://127.0.0.1:0")
        sampler = SampleClient(client, [shard.getsockopt_string(zmq.LAST_ENDPOINT)], Limits(), lost_after_s=3600.0)
        params = ParamClient(client, [ps.getsockopt_string(zmq.LAST_ENDPOINT)], Limits())
        # Both connected through the handshake: each server has a request of its client's.
        wait_until(lambda: sampler.next(8, 0.05) is None and shard.poll(0, zmq.POLLIN) != 0, WAIT_S)
        assert params.fetch(-1, "", 0.05) is None and recv_frames(ps, WAIT_S) is not None
        assert sampler.outstanding == 2 and params.disconnects() == 0
        shard.close(0)
        ps.close(0)
        wait_until(lambda: sampler.next(8, 0.05, ask=False) is None and sampler.outstanding == 0, WAIT_S)
        wait_until(lambda: params.disconnects() > 0, WAIT_S)
        sampler.close()
        params.close()
    finally:
        server.destroy(0)
        client.destroy(0)


def test_a_client_with_other_keys_reaches_nothing_and_the_server_counts_why(keys: CurveKeys) -> None:
    """Keys that differ (a client still holding the pair from before a rotation, or an impostor server a client
    is sent to) meet no handshake: the client gets nothing, and the server counts the refusal."""
    server, stale = WireContext(keys), WireContext(CurveKeys.generate())
    try:
        publisher_refusals: list[tuple[str, str]] = []
        publisher = ParamPublisher(
            server, "tcp://127.0.0.1:0", on_refused=lambda s, r: publisher_refusals.append((s, r))
        )
        sub = param_subscriber(stale, publisher.sock.getsockopt_string(zmq.LAST_ENDPOINT))
        publisher.publish(BlobMeta(1, "i"), {"w": np.ones(4, np.float32)})

        def refused() -> bool:
            publisher.service()
            return bool(publisher_refusals)

        wait_until(refused, WAIT_S)
        assert publisher_refusals[0] == ("params", "wrong_server_key")
        assert sub.poll(0, zmq.POLLIN) == 0
        sub.close(0)
        publisher.close()
    finally:
        server.destroy(0)
        stale.destroy(0)


def test_a_plaintext_context_makes_plaintext_sockets_and_watches_nothing() -> None:
    ctx = zmq.Context()
    try:
        sock = bind_socket(ctx, zmq.PULL, "tcp://127.0.0.1:0")
        assert sock.getsockopt(zmq.MECHANISM) == zmq.NULL and HandshakeWatch.of(sock, "x") is None
        sock.close(0)
    finally:
        ctx.term()
    without_keys = WireContext(None)
    sock = bind_socket(without_keys, zmq.PULL, "tcp://127.0.0.1:0")
    assert sock.getsockopt(zmq.MECHANISM) == zmq.NULL and without_keys.gate is None
    sock.close(0)
    without_keys.term()


# -- live roles -----------------------------------------------------------------------------------------------


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """A role's /metrics as {(name, labels other than role/index): value}; {} while it is not up."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = frozenset((k, v) for k, v in sample.labels.items() if k not in ("role", "index"))
            out[(sample.name, labels)] = sample.value
    return out


def value(port: int, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in scrape(port).items() if n == f"surreal_{name}" and want <= lab)


# What a peer without the keys might change, role by role: the replay's size and what it took in, the ps's version
# and the blobs it took, the learner's counters, and every role's count of messages it dropped (nothing of the
# probes' may even reach a decoder).
WATCHED = {
    "replay": ["replay_size", "replay_transitions_in_total", "messages_dropped_total"],
    "ps": ["ps_param_version", "ps_updates_total", "ps_requests_total", "messages_dropped_total"],
    "learner": [
        "learner_env_steps",
        "learner_updates",
        "learner_param_version",
        "learner_stale_dropped",
        "messages_dropped_total",
    ],
}


def refusals(port: int, socket: str, reason: str) -> float:
    """How many handshakes a role refused on `socket` for `reason`; a peer that speaks no CURVE may hang up on the
    server's greeting before the server reads its own, and is then counted as `hung_up`."""
    also = ("hung_up",) if reason == "no_curve" else ()
    return sum(value(port, "handshakes_refused_total", socket=socket, reason=why) for why in (reason, *also))


def probe_credentials(keys: CurveKeys) -> dict[str, dict[int, bytes]]:
    """Socket options of the three peers without the keys, by the reason the server refuses each: one that speaks
    no CURVE; one with a key pair of its own that knows the server's public key (public keys leak: the server admits
    the experiment's client key only); one that does not know the server key."""
    own_public, own_secret = zmq.curve_keypair()
    guessed_server = zmq.curve_keypair()[0]
    own = {zmq.CURVE_PUBLICKEY: own_public, zmq.CURVE_SECRETKEY: own_secret}
    return {
        "no_curve": {},
        "unknown_client_key": {zmq.CURVE_SERVERKEY: keys.server_public, **own},
        "wrong_server_key": {zmq.CURVE_SERVERKEY: guessed_server, **own},
    }


@pytest.mark.system
def test_a_peer_without_the_keys_gets_nothing_and_changes_nothing(roles, tmp_path: Path) -> None:
    """Replay, ps, learner and an actor over CURVE (TCP, as in a cluster) train DDPG to the end and hold. Then probes
    without the keys connect to every port (PUSH on the experience port, DEALER on the sample and ps ports, SUB on
    the learner's) and send what an honest peer would: each is refused at the handshake, counted by socket and
    reason, gets nothing, and the replay's size, the ps's version and the learner's counters stay as they were."""
    keys_dir = launch_keys(tmp_path / "private")
    keys = CurveKeys.load(keys_dir)
    config = tmp_path / "config.yaml"
    overrides = ["algo=ddpg", "env=Pendulum-v1", "replay.mode=uniform", "algo.batch_size=32"]
    overrides += ["algo.learning_starts=64", "steps=384", "actor.chunk_steps=32", "learner.eval_episodes=1"]
    save_config(load_config(overrides), config)
    env = {"SURREAL_CONFIG": str(config), "SURREAL_HOLD_WHEN_DONE": "1"}
    s = loopback_settings(run_dir=tmp_path / "run", curve_dir=keys_dir)
    metrics = dict(zip(("replay", "ps", "learner", "actor"), free_ports(4), strict=True))
    for role, port in metrics.items():
        roles.start(role, replace(s, metrics_port=port), extra_env=env)

    honest = WireContext(keys)
    client = ParamClient(honest, s.ps_addrs, Limits())
    probes: list[tuple[str, zmq.Socket]] = []
    plain = zmq.Context()
    try:
        # Every channel works over CURVE: the actor's experience taught the learner, whose final blob (`done`)
        # reached the ps, which serves it to a client holding the keys.
        def final_blob() -> Params | None:
            for process in roles.procs:
                assert process.poll() is None, f"a role exited: {process.args}"
            reply = client.fetch(-1, "", 1.0)
            return reply if isinstance(reply, Params) and reply.blob.done else None

        final = wait_until(final_blob, 240)
        assert isinstance(final, Params)
        # Quiet: the actor holds the final blob and all it sent has reached the shard.
        wait_until(lambda: value(metrics["actor"], "actor_param_version") == final.blob.version, WAIT_S)
        sent = value(metrics["actor"], "actor_env_steps_total")
        assert sent > 0
        wait_until(lambda: value(metrics["replay"], "replay_transitions_in_total") == sent, WAIT_S)
        before = {role: {name: value(metrics[role], name) for name in names} for role, names in WATCHED.items()}
        assert before["learner"]["learner_updates"] > 0 and before["replay"]["replay_size"] == sent

        ports = {
            "experience": (
                "replay",
                zmq.PUSH,
                s.replay[0].experience,
                frames_of(encode_chunk(Chunk(arrays(), 0, 0), "")),
            ),
            "sample": ("replay", zmq.DEALER, s.replay[0].sample, frames_of(SampleRequest(8, 1).to_message())),
            "ps": ("ps", zmq.DEALER, s.ps_addrs[0], frames_of(ParamsRequest(-1, "").to_message())),
            "params": ("learner", zmq.SUB, s.learner_addr, None),
        }
        for socket_name, (role, kind, address, message) in ports.items():
            for reason, options in probe_credentials(keys).items():
                counted = refusals(metrics[role], socket_name, reason)
                probe = make_socket(plain, kind)
                for option, setting in options.items():
                    probe.setsockopt(option, setting)
                if kind == zmq.SUB:
                    probe.setsockopt(zmq.SUBSCRIBE, b"")
                probe.connect(address)
                if message is not None:
                    probe.send_multipart(message, zmq.NOBLOCK)  # queued: it leaves only after a handshake
                probes.append((f"{socket_name}/{reason}", probe))
                wait_until(
                    lambda r=role, n=socket_name, why=reason, c=counted: refusals(metrics[r], n, why) > c, WAIT_S
                )
        got = [name for name, probe in probes if probe.poll(0, zmq.POLLIN)]
        assert not got, f"probes without the keys received something: {got}"
        after = {role: {name: value(metrics[role], name) for name in names} for role, names in WATCHED.items()}
        assert after == before
        # The roles serve on: a peer holding the keys still gets the final blob.
        again = client.fetch(-1, "", WAIT_S)
        assert isinstance(again, Params) and again.blob.version == final.blob.version
        for process in roles.procs:
            assert process.poll() is None, f"a role exited: {process.args}"
    finally:
        for _, probe in probes:
            probe.close(0)
        plain.term()
        client.close()
        honest.term()
