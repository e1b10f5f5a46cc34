"""CURVE on the wire: the experiment's two keys, the context whose sockets use them, and the count of peers refused.

Every socket between roles speaks ZeroMQ's CURVE (libzmq's CurveZMQ, on libsodium): the traffic is encrypted, and a
handshake completes only between peers that hold the experiment's keys. There are two keys, each a 32-byte
Curve25519 secret key whose public half every role derives:

- the **server** key: every socket that binds (a replay shard's experience and sample ports, a ps's port, the
  learner's parameter port) proves it, so a client talks only to the experiment's own servers;
- the **client** key: every socket that connects (actors, the evaluator, the learner's sample client, a ps's
  subscription) presents it, and a server's ZAP handler admits no other client key.

A peer without the keys is refused at the handshake, before any of its messages reaches a role: one that speaks no
CURVE (`no_curve`, or `hung_up` when it hangs up on the server's greeting before the server has read its own), one
that does not know the server key (`wrong_server_key`), one whose client key is not the experiment's
(`unknown_client_key`). A server counts each refusal by its socket and reason in
`surreal_handshakes_refused_total` (`HandshakeWatch`, read from the socket's monitor by the loop that serves it).

Where the keys come from (SURREAL_CURVE_DIR, settings.py): the chart's Secret (generated once per release, or one
you supply), or the folder `surreal run` makes for each launch. A key file holds the 32 raw bytes (what
`head -c 32 /dev/urandom` or Helm's `randBytes 32` give) or their 40-character Z85 text (what `zmq.curve_keypair`
gives). Torch-free.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

SERVER_KEY_FILE = "server.secret"
CLIENT_KEY_FILE = "client.secret"
KEY_BYTES = 32
ZAP_DOMAIN = "surreal"
# The counter a server exports its refusals in, labelled by socket and reason.
REFUSED_METRIC = "handshakes_refused_total"
REFUSED_HELP = "connections refused at the handshake (peers without the experiment's keys)"

# What a bound socket's monitor reports: the three ways a handshake fails.
HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


class CurveKeyError(ValueError):
    """A key file that is missing, unreadable or not a CURVE key."""


def _secret_from(data: bytes) -> bytes:
    """A secret key as Z85 text, from its 32 raw bytes or its Z85 text (surrounding whitespace ignored)."""
    if len(data) == KEY_BYTES:
        return z85.encode(data)
    text = data.strip()
    if len(text) == 40:
        try:
            z85.decode(text)
        except (KeyError, ValueError, struct.error):  # a character outside Z85's alphabet, a group out of range
            raise CurveKeyError("not Z85 text") from None
        return text
    raise CurveKeyError(f"{len(data)} bytes: a key is 32 raw bytes or 40 Z85 characters")


@dataclass(frozen=True)
class CurveKeys:
    """The experiment's server and client secret keys (Z85 text) and the public keys derived from them."""

    server_secret: bytes = field(repr=False)
    client_secret: bytes = field(repr=False)
    server_public: bytes = field(init=False)
    client_public: bytes = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "server_public", zmq.curve_public(self.server_secret))
        object.__setattr__(self, "client_public", zmq.curve_public(self.client_secret))

    @classmethod
    def generate(cls) -> CurveKeys:
        return cls(zmq.curve_keypair()[1], zmq.curve_keypair()[1])

    @classmethod
    def load(cls, folder: Path) -> CurveKeys:
        """The keys in `folder` (SERVER_KEY_FILE and CLIENT_KEY_FILE); CurveKeyError names the file that is wrong."""
        secrets = []
        for name in (SERVER_KEY_FILE, CLIENT_KEY_FILE):
            path = folder / name
            try:
                secrets.append(_secret_from(path.read_bytes()))
            except OSError as exc:
                raise CurveKeyError(f"{path}: {exc.strerror}") from None
            except CurveKeyError as exc:
                raise CurveKeyError(f"{path}: {exc}") from None
        return cls(*secrets)

    def write(self, folder: Path) -> Path:
        """Write both keys (raw bytes) into `folder`, created readable by this user only (0700, files 0600)."""
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.chmod(0o700)
        for name, secret in ((SERVER_KEY_FILE, self.server_secret), (CLIENT_KEY_FILE, self.client_secret)):
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(z85.decode(secret))
        return folder


class _AllowClient:
    """The ZAP handler's rule (zmq.auth's credentials provider): the experiment's client key, no other."""

    def __init__(self, client_public: bytes) -> None:
        self.client_public = client_public

    def callback(self, domain: str, key: bytes) -> bool:
        return domain == ZAP_DOMAIN and key == self.client_public


class WireContext(zmq.Context):
    """A ZMQ context whose sockets (made by proto/channels.py) speak CURVE with `keys`; None: plaintext.

    A socket it binds is a CURVE server, and the first one starts the context's ZAP handler (zmq.auth's, on a thread
    of its own), which admits only the experiment's client key; a socket it connects is a CURVE client that talks only
    to a server proving the server key. `term` and `destroy` stop the handler first."""

    keys: CurveKeys | None
    gate: ThreadAuthenticator | None

    def __init__(self, keys: CurveKeys | None = None) -> None:
        super().__init__()
        self.keys = keys
        self.gate = None

    def _close_gate(self) -> None:
        if self.gate is not None:
            self.gate.stop()
            self.gate = None

    def term(self) -> None:
        self._close_gate()
        super().term()

    def destroy(self, linger: int | None = None) -> None:
        self._close_gate()  # before its sockets are closed from this thread under the handler's feet
        super().destroy(linger)


def secure_server(ctx: zmq.Context, sock: zmq.Socket) -> None:
    """Make `sock`, not yet bound, a CURVE server behind the ZAP handler when `ctx` is a `WireContext` with keys; a
    plain zmq.Context's sockets stay plaintext."""
    if not isinstance(ctx, WireContext) or ctx.keys is None:
        return
    if ctx.gate is None:
        ctx.gate = ThreadAuthenticator(ctx)
        ctx.gate.start()
        ctx.gate.configure_curve_callback(ZAP_DOMAIN, _AllowClient(ctx.keys.client_public))
    sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, ctx.keys.server_public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, ctx.keys.server_secret)


def secure_client(ctx: zmq.Context, sock: zmq.Socket) -> None:
    """Make `sock`, not yet connected, a CURVE client of the experiment's servers when `ctx` is a `WireContext` with
    keys; a plain zmq.Context's sockets stay plaintext."""
    if not isinstance(ctx, WireContext) or ctx.keys is None:
        return
    sock.setsockopt(zmq.CURVE_SERVERKEY, ctx.keys.server_public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, ctx.keys.client_public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, ctx.keys.client_secret)


def refusal_reason(event: int, value: int) -> str:
    """What a monitor's handshake-failure event says of the peer refused."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return "unknown_client_key"  # the ZAP handler said no (value: its status code)
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return "no_curve"
        if value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
            return "wrong_server_key"  # its HELLO did not open with the server key
        return "protocol"
    # The connection failed mid-handshake (value: the errno), as a peer hangs up on a mechanism it lacks.
    return "hung_up"


class HandshakeWatch:
    """The handshakes a bound CURVE socket refused, from its monitor (a PAIR socket the socket's owner polls with its
    other sockets, so nothing is read across threads). `monitor` is what to poll; `reasons` reads what is there."""

    def __init__(self, sock: zmq.Socket, name: str) -> None:
        self.name = name
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.monitor = sock.get_monitor_socket(HANDSHAKE_FAILED)

    @classmethod
    def of(cls, sock: zmq.Socket, name: str) -> HandshakeWatch | None:
        """A watch on `sock` if it is a CURVE server; None for a plaintext one (no handshake refuses anyone)."""
        return cls(sock, name) if sock.getsockopt(zmq.MECHANISM) == zmq.CURVE else None

    @staticmethod
    def reason_of(frames: Sequence[Any]) -> str | None:
        """The refusal one monitor message reports (None: another event, or not a monitor message)."""
        try:
            message = parse_monitor_message([f.bytes if isinstance(f, zmq.Frame) else bytes(f) for f in frames])
        except (RuntimeError, ValueError):
            return None
        event = int(message["event"])
        return refusal_reason(event, int(message["value"])) if event & HANDSHAKE_FAILED else None

    def reasons(self) -> list[str]:
        """The refusals reported since the last call, without waiting."""
        found: list[str] = []
        while True:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return found
            reason = self.reason_of(frames)
            if reason is not None:
                found.append(reason)

    def close(self) -> None:
        self.monitor.close(0)
