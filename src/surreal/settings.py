"""The ``SURREAL_*`` environment variables: the one contract between a role and whatever started it.

`surreal run` (local processes), the Helm chart (pods) and the tests all start a role the same way:
``surreal role <name>`` with these variables set. Defaults are loopback addresses, so a role started by
hand on a laptop finds its peers on 127.0.0.1 with the default ports.

| variable                  | read by                 | meaning                                                      | default |
|---------------------------|-------------------------|--------------------------------------------------------------|---------|
| SURREAL_INDEX             | every role              | index within its role: actor index, replay shard, ps replica | 0 (or the StatefulSet ordinal in the hostname) |
| SURREAL_BIND_HOST         | replay, ps, learner     | interface servers bind to (0.0.0.0 in a pod)                 | 127.0.0.1 |
| SURREAL_EXPERIENCE_PORT   | replay                  | port of its experience PULL socket                           | 7001 |
| SURREAL_SAMPLE_PORT       | replay                  | port of its sample ROUTER socket                             | 7002 |
| SURREAL_PARAMS_PUB_PORT   | learner                 | port of its parameter PUB socket                             | 7003 |
| SURREAL_PS_PORT           | ps                      | port of its parameter-serving ROUTER socket                  | 7004 |
| SURREAL_METRICS_PORT      | every role              | Prometheus /metrics port; 0 disables the endpoint            | 9100 |
| SURREAL_REPLAY_ADDRS      | actor, learner          | comma list of replay hosts (``host`` or ``host:exp:sample``) | 127.0.0.1 |
| SURREAL_LEARNER_ADDR      | ps                      | ``host`` or ``host:port`` of the learner's PUB socket        | 127.0.0.1 |
| SURREAL_PS_ADDRS          | actor, inference        | comma list of ps hosts (``host`` or ``host:port``)           | 127.0.0.1 |
| SURREAL_INFERENCE_PORT    | inference               | port of its observation-serving ROUTER socket                | 7005 |
| SURREAL_INFERENCE_ADDRS   | actor                   | comma list of inference workers (``host`` or ``host:port``); read with topology.inference=central | unset: none |
| SURREAL_CONFIG            | every role              | path of the resolved experiment config (YAML)                | unset: built-in defaults |
| SURREAL_RUN_DIR           | learner, actor, replay  | run folder: checkpoints, metrics.jsonl, eval.json, replay/   | ./runs/default |
| SURREAL_RUN_URI           | learner, replay, evaluator | the run folder's mirror in a bucket (`s3://`, `gs://`, `az://`) | unset: local disk only |
| SURREAL_HOLD_WHEN_DONE    | learner, actor          | 1: once training is done, stay up idle until SIGTERM         | 0 |
| SURREAL_IPC_DIR           | replay, ps, learner, actor | set: every ZMQ address `tcp://host:port` becomes `ipc://<dir>/<port>` | unset: TCP |
| SURREAL_CURVE_DIR         | every role              | folder of the CURVE keys `server.secret`, `client.secret`    | unset: plaintext |

SURREAL_HOLD_WHEN_DONE is for orchestrators that restart a container whenever it exits (the chart's
StatefulSets): a finished learner or actor that exited would be started again, forever. With it set, the role
keeps serving /metrics (and the learner its final `done` parameters) until it is stopped; `surreal run`
leaves it unset, because there a finished learner's exit is what ends the run.

A replay shard keeps its snapshots in ``<SURREAL_RUN_DIR>/replay/shard-<i>/`` (the chart mounts a volume for
them), so a shard restarted with the same run folder comes back with what it held.

With SURREAL_RUN_URI set, SURREAL_RUN_DIR is a cache of the bucket (surreal/runstore.py): the learner mirrors its
checkpoints, policy, metrics and TensorBoard there at every checkpoint, a replay shard each snapshot it writes, the
evaluator its rows; a role that starts on a folder lacking them pulls them first.

SURREAL_IPC_DIR is for processes on one machine (`surreal run` sets it to a folder of its own): ports are then
only names of Unix sockets in that folder, so a restarted replay or ps always gets its address back, whatever
else took the TCP port meanwhile. /metrics stays on TCP.

SURREAL_CURVE_DIR turns on CURVE (proto/curve.py): a role reads both keys when it starts (a missing or malformed
key is one line naming the file), and a peer without them is refused at the handshake and counted in
`surreal_handshakes_refused_total`. The chart mounts its Secret there; `surreal run` makes a pair for each launch
in a private folder of its own (never in the run folder, which is copied, shared and synced to buckets). Every
role of an experiment must agree: a role without the variable speaks plaintext, which the others refuse.

A replay shard's address list entry may carry its own ports (``replay-1.replay:7001:7002``); otherwise the
default ports above apply, which is what the chart's headless Service gives every shard.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from surreal.proto.curve import CurveKeyError, CurveKeys

DEFAULT_EXPERIENCE_PORT = 7001
DEFAULT_SAMPLE_PORT = 7002
DEFAULT_PARAMS_PUB_PORT = 7003
DEFAULT_PS_PORT = 7004
DEFAULT_INFERENCE_PORT = 7005
DEFAULT_METRICS_PORT = 9100


class SettingsError(ValueError):
    """A SURREAL_* variable holds a value the role cannot use."""


@dataclass(frozen=True)
class ReplayEndpoint:
    """Where one replay shard listens: actors push to `experience`, the learner samples from `sample`."""

    host: str
    experience_port: int = DEFAULT_EXPERIENCE_PORT
    sample_port: int = DEFAULT_SAMPLE_PORT

    @property
    def experience(self) -> str:
        return f"tcp://{self.host}:{self.experience_port}"

    @property
    def sample(self) -> str:
        return f"tcp://{self.host}:{self.sample_port}"

    def to_entry(self) -> str:
        return f"{self.host}:{self.experience_port}:{self.sample_port}"


@dataclass(frozen=True)
class Settings:
    """Everything a role learns from its environment, parsed and checked once at start."""

    index: int = 0
    bind_host: str = "127.0.0.1"
    experience_port: int = DEFAULT_EXPERIENCE_PORT
    sample_port: int = DEFAULT_SAMPLE_PORT
    params_pub_port: int = DEFAULT_PARAMS_PUB_PORT
    ps_port: int = DEFAULT_PS_PORT
    inference_port: int = DEFAULT_INFERENCE_PORT
    metrics_port: int = DEFAULT_METRICS_PORT
    replay: tuple[ReplayEndpoint, ...] = (ReplayEndpoint("127.0.0.1"),)
    learner_addr: str = f"tcp://127.0.0.1:{DEFAULT_PARAMS_PUB_PORT}"
    ps_addrs: tuple[str, ...] = (f"tcp://127.0.0.1:{DEFAULT_PS_PORT}",)
    inference_addrs: tuple[str, ...] = ()
    config_path: Path | None = None
    run_dir: Path = field(default_factory=lambda: Path("runs") / "default")
    hold_when_done: bool = False
    ipc_dir: Path | None = None
    curve_dir: Path | None = None
    run_uri: str | None = None

    @cached_property
    def curve_keys(self) -> CurveKeys | None:
        """The experiment's CURVE keys from `curve_dir`, read once when a role opens its sockets; None: plaintext.
        SettingsError names a missing or malformed key file."""
        if self.curve_dir is None:
            return None
        try:
            return CurveKeys.load(self.curve_dir)
        except CurveKeyError as exc:
            raise SettingsError(f"SURREAL_CURVE_DIR: {exc}") from None

    def bind(self, port: int) -> str:
        """ZMQ endpoint a server of this process binds to."""
        return self.connect(f"tcp://{self.bind_host}:{port}")

    def connect(self, address: str) -> str:
        """The ZMQ endpoint for a `tcp://host:port` address: itself, or with SURREAL_IPC_DIR its Unix socket."""
        if self.ipc_dir is None:
            return address
        return f"ipc://{self.ipc_dir / address.rpartition(':')[2]}"

    @property
    def experience_addrs(self) -> list[str]:
        return [self.connect(r.experience) for r in self.replay]

    @property
    def sample_addrs(self) -> list[str]:
        return [self.connect(r.sample) for r in self.replay]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        return cls(
            index=_index(env),
            bind_host=_bind_host(env.get("SURREAL_BIND_HOST", "127.0.0.1")),
            experience_port=_port(env, "SURREAL_EXPERIENCE_PORT", DEFAULT_EXPERIENCE_PORT),
            sample_port=_port(env, "SURREAL_SAMPLE_PORT", DEFAULT_SAMPLE_PORT),
            params_pub_port=_port(env, "SURREAL_PARAMS_PUB_PORT", DEFAULT_PARAMS_PUB_PORT),
            ps_port=_port(env, "SURREAL_PS_PORT", DEFAULT_PS_PORT),
            inference_port=_port(env, "SURREAL_INFERENCE_PORT", DEFAULT_INFERENCE_PORT),
            metrics_port=_port(env, "SURREAL_METRICS_PORT", DEFAULT_METRICS_PORT, allow_zero=True),
            replay=tuple(_replay_entry(e) for e in _split(env, "SURREAL_REPLAY_ADDRS")),
            learner_addr=_host_port(env.get("SURREAL_LEARNER_ADDR", "127.0.0.1"), DEFAULT_PARAMS_PUB_PORT),
            ps_addrs=tuple(_host_port(e, DEFAULT_PS_PORT) for e in _split(env, "SURREAL_PS_ADDRS")),
            inference_addrs=tuple(
                _host_port(e.strip(), DEFAULT_INFERENCE_PORT)
                for e in env.get("SURREAL_INFERENCE_ADDRS", "").split(",")
                if e.strip()
            ),
            config_path=Path(env["SURREAL_CONFIG"]) if env.get("SURREAL_CONFIG") else None,
            run_dir=Path(env.get("SURREAL_RUN_DIR", str(Path("runs") / "default"))),
            hold_when_done=_flag(env, "SURREAL_HOLD_WHEN_DONE"),
            ipc_dir=Path(env["SURREAL_IPC_DIR"]) if env.get("SURREAL_IPC_DIR") else None,
            curve_dir=Path(env["SURREAL_CURVE_DIR"]) if env.get("SURREAL_CURVE_DIR") else None,
            run_uri=_run_uri(env.get("SURREAL_RUN_URI", "")),
        )

    def to_env(self) -> dict[str, str]:
        """The inverse of `from_env`: what a launcher puts in a child's environment."""
        env = {
            "SURREAL_INDEX": str(self.index),
            "SURREAL_BIND_HOST": self.bind_host,
            "SURREAL_EXPERIENCE_PORT": str(self.experience_port),
            "SURREAL_SAMPLE_PORT": str(self.sample_port),
            "SURREAL_PARAMS_PUB_PORT": str(self.params_pub_port),
            "SURREAL_PS_PORT": str(self.ps_port),
            "SURREAL_METRICS_PORT": str(self.metrics_port),
            "SURREAL_REPLAY_ADDRS": ",".join(r.to_entry() for r in self.replay),
            "SURREAL_LEARNER_ADDR": self.learner_addr.removeprefix("tcp://"),
            "SURREAL_PS_ADDRS": ",".join(a.removeprefix("tcp://") for a in self.ps_addrs),
            "SURREAL_INFERENCE_PORT": str(self.inference_port),
            "SURREAL_INFERENCE_ADDRS": ",".join(a.removeprefix("tcp://") for a in self.inference_addrs),
            "SURREAL_RUN_DIR": str(self.run_dir),
            "SURREAL_HOLD_WHEN_DONE": "1" if self.hold_when_done else "0",
            # Always written, "" when off: a child never inherits a stale folder from the launcher's environment.
            "SURREAL_CURVE_DIR": str(self.curve_dir) if self.curve_dir is not None else "",
        }
        if self.config_path is not None:
            env["SURREAL_CONFIG"] = str(self.config_path)
        if self.ipc_dir is not None:
            env["SURREAL_IPC_DIR"] = str(self.ipc_dir)
        if self.run_uri is not None:
            env["SURREAL_RUN_URI"] = self.run_uri
        return env


def _split(env: Mapping[str, str], name: str) -> list[str]:
    value = env.get(name, "127.0.0.1")
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise SettingsError(f"{name}={value!r} is an empty address list")
    return items


def _index(env: Mapping[str, str]) -> int:
    """SURREAL_INDEX, else the ordinal a StatefulSet puts at the end of the pod's hostname."""
    if "SURREAL_INDEX" in env:
        value = _int("SURREAL_INDEX", env["SURREAL_INDEX"])
    else:
        match = re.search(r"-(\d+)$", env.get("HOSTNAME", ""))
        value = int(match.group(1)) if match else 0
    if value < 0:
        raise SettingsError(f"SURREAL_INDEX must be >= 0, got {value}")
    return value


def _int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise SettingsError(f"{name}={value!r} is not an integer") from None


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "0").strip().lower()
    if value not in ("0", "1", "true", "false"):
        raise SettingsError(f"{name}={value!r}: use 1 or 0")
    return value in ("1", "true")


def _port(env: Mapping[str, str], name: str, default: int, allow_zero: bool = False) -> int:
    value = _int(name, env.get(name, str(default)))
    if not (0 if allow_zero else 1) <= value <= 65535:
        raise SettingsError(f"{name}={value} is not a valid port")
    return value


def _bind_host(value: str) -> str:
    """SURREAL_BIND_HOST, checked by binding a throwaway socket to it: an address that is not this machine's (a
    chart value meant for another host) is one line naming the variable, not a ZMQ traceback later."""
    if value == "*":  # ZMQ's own spelling of every interface
        return value
    try:
        family, kind, proto, _, address = socket.getaddrinfo(value, 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(address)
    except OSError as exc:  # gaierror (no such name) included
        raise SettingsError(f"SURREAL_BIND_HOST={value!r} is not an address of this machine: {exc.strerror}") from None
    return value


def _run_uri(value: str) -> str | None:
    from surreal.runstore import uri_problem  # torch- and fsspec-free: fsspec is imported only when a bucket is used

    if not value.strip():
        return None
    problem = uri_problem(value.strip())
    if problem is not None:
        raise SettingsError(f"SURREAL_RUN_URI: {problem}")
    return value.strip().rstrip("/")


def _host_port(entry: str, default_port: int) -> str:
    host, _, port = entry.removeprefix("tcp://").partition(":")
    if not host:
        raise SettingsError(f"address {entry!r} has no host")
    return f"tcp://{host}:{_int(f'port of address {entry!r}', port) if port else default_port}"


def _replay_entry(entry: str) -> ReplayEndpoint:
    parts = entry.removeprefix("tcp://").split(":")
    if len(parts) == 1:
        return ReplayEndpoint(parts[0])
    if len(parts) == 3 and parts[0]:
        where = f"port of replay address {entry!r}"
        return ReplayEndpoint(parts[0], _int(where, parts[1]), _int(where, parts[2]))
    raise SettingsError(f"replay address {entry!r} is neither 'host' nor 'host:experience_port:sample_port'")


def group_env(rank: int, size: int, master_addr: str, master_port: int) -> dict[str, str]:
    """torchrun's variables for rank `rank` of `size` on one machine (LOCAL_RANK = RANK)."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": str(rank),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }
