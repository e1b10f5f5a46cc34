"""Emulated networks for bench.fleet: the simulated fleet in a network namespace of its own, joined to the box's
(where the services run, as in a cluster's service nodes) by a veth pair, both ends shaped by `tc`.

    datacenter   0.1 ms each way (0.2 ms RTT), 10 Gbit/s
    degraded     1 ms each way (2 ms RTT), 1 Gbit/s, 0.1 % of packets lost

Over TCP: the services bind the box's end of the pair (SURREAL_BIND_HOST) and the fleet connects to it. The
delay, rate and loss are `tc netem`'s where the kernel has it. Where it has not (sch_netem is a module some
kernels lack, this box's among them), the rate is a token bucket (`tc tbf`), the loss an `iptables`
statistic rule on each end, and the delay is added in the fleet's processes (bench.fleet_actors --delay-ms,
to every fetch request and reply); bench.fleet says so in one line. Where no namespace can be made (not
root, no `ip`), `emulated_network` says so in one line and yields None: the caller skips that profile.

Everything made is removed on the way out, on error and on KeyboardInterrupt too: the namespace (taking its
end of the pair with it), the box's end, the iptables rules.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SUBNET = "10.213"  # a /30 of 10.213.0.0/16 per run, from its pid


@dataclass(frozen=True)
class Profile:
    delay_ms: float  # one way
    rate_mbit: int
    loss_pct: float


PROFILES = {
    "datacenter": Profile(delay_ms=0.1, rate_mbit=10_000, loss_pct=0.0),
    "degraded": Profile(delay_ms=1.0, rate_mbit=1_000, loss_pct=0.1),
}


@dataclass(frozen=True)
class Link:
    """A made network: the fleet runs under `exec_prefix`, the services bind `host` and the fleet connects to it;
    `fleet_delay_ms` is the one-way delay the fleet's processes add themselves (0 where netem does it)."""

    namespace: str
    host: str
    peer: str
    fleet_delay_ms: float
    shaping: str  # what does the shaping, for the results

    @property
    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]


@dataclass(frozen=True)
class Plan:
    """The commands that make a link, and those that undo it (run in reverse, each whatever the others did)."""

    namespace: str
    host_dev: str
    peer_dev: str
    host: str
    peer: str

    @classmethod
    def for_pid(cls, pid: int) -> Plan:
        block = (pid % 16384) * 4  # the /30's first address, within the /16
        base = f"{SUBNET}.{block // 256}."
        host, peer = f"{base}{block % 256 + 1}", f"{base}{block % 256 + 2}"
        return cls(f"surreal-fleet-{pid}", f"sfh{pid}"[:15], f"sfn{pid}"[:15], host, peer)

    def in_namespace(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]

    def make(self) -> list[list[str]]:
        return [
            ["ip", "netns", "add", self.namespace],
            ["ip", "link", "add", self.host_dev, "type", "veth", "peer", "name", self.peer_dev],
            ["ip", "link", "set", self.peer_dev, "netns", self.namespace],
            ["ip", "addr", "add", f"{self.host}/30", "dev", self.host_dev],
            ["ip", "link", "set", self.host_dev, "up"],
            self.in_namespace("ip", "addr", "add", f"{self.peer}/30", "dev", self.peer_dev),
            self.in_namespace("ip", "link", "set", self.peer_dev, "up"),
            self.in_namespace("ip", "link", "set", "lo", "up"),
        ]

    def unmake(self) -> list[list[str]]:
        """The namespace's removal takes its end of the pair, and with it the box's end; the box's end is removed
        by name too, for a namespace never made."""
        return [["ip", "link", "del", self.host_dev], ["ip", "netns", "del", self.namespace]]

    def netem(self, profile: Profile) -> list[list[str]]:
        """Delay, rate and loss by netem on both ends (each direction leaves through one of them)."""
        qdisc = ["root", "netem", "delay", f"{profile.delay_ms}ms", "rate", f"{profile.rate_mbit}mbit"]
        if profile.loss_pct:
            qdisc += ["loss", f"{profile.loss_pct}%"]
        return [
            ["tc", "qdisc", "replace", "dev", self.host_dev, *qdisc],
            self.in_namespace("tc", "qdisc", "replace", "dev", self.peer_dev, *qdisc),
        ]

    def tbf(self, profile: Profile) -> list[list[str]]:
        """The rate by a token bucket, on both ends. Its burst holds 10 ms at the rate (a 250 Hz kernel's tick
        is 4 ms), and its queue up to 20 ms more before it drops."""
        burst = max(64 * 1024, profile.rate_mbit * 1_000_000 // 8 // 100)
        qdisc = ["root", "tbf", "rate", f"{profile.rate_mbit}mbit", "burst", str(burst), "latency", "20ms"]
        return [
            ["tc", "qdisc", "replace", "dev", self.host_dev, *qdisc],
            self.in_namespace("tc", "qdisc", "replace", "dev", self.peer_dev, *qdisc),
        ]

    def loss_rules(self, profile: Profile, add: bool) -> list[list[str]]:
        """Random loss by iptables on each end's outgoing packets; `add` False: the rules' removal."""
        if not profile.loss_pct:
            return []
        op = "-A" if add else "-D"

        def rule(dev: str) -> list[str]:
            share = f"{profile.loss_pct / 100:.6f}"
            match = ["-m", "statistic", "--mode", "random", "--probability", share]
            return ["iptables", op, "OUTPUT", "-o", dev, *match, "-j", "DROP"]

        return [rule(self.host_dev), self.in_namespace(*rule(self.peer_dev))]


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")


def _shape(plan: Plan, name: str, profile: Profile, undo: list[list[str]]) -> Link | None:
    """netem where the kernel has it, else tbf + iptables + the fleet's own delay (its removal put in `undo`);
    None where neither can drop the profile's packets."""
    try:
        for cmd in plan.netem(profile):
            _run(cmd)
        return Link(plan.namespace, plan.host, plan.peer, 0.0, "tc netem")
    except OSError as exc:
        if "unknown" not in str(exc).lower():
            raise
    if profile.loss_pct and shutil.which("iptables") is None:
        print(
            f"bench.fleet: this kernel has no tc netem and this box no iptables to drop {name}'s packets:"
            f" {name} skipped (apt-get install iptables)",
            file=sys.stderr,
        )
        return None
    for cmd in plan.tbf(profile):
        _run(cmd)
    undo[:0] = plan.loss_rules(profile, add=False)
    for cmd in plan.loss_rules(profile, add=True):
        _run(cmd)
    print(
        f"bench.fleet: this kernel has no tc netem: {name}'s rate by tc tbf, its loss by iptables, its delay added"
        " by the fleet processes",
        file=sys.stderr,
    )
    shaping = "tc tbf rate" + (", iptables loss" if profile.loss_pct else "") + ", delay in the fleet processes"
    return Link(plan.namespace, plan.host, plan.peer, profile.delay_ms, shaping)


@contextmanager
def emulated_network(name: str) -> Iterator[Link | None]:
    """The network `name` (a PROFILES key) made for the duration; None where no namespace can be made or the
    profile cannot be shaped (said in one line)."""
    profile = PROFILES[name]
    plan = Plan.for_pid(os.getpid())
    undo = plan.unmake()
    try:
        try:
            if shutil.which("ip") is None or shutil.which("tc") is None:
                raise OSError("no ip/tc command")
            for cmd in plan.make():
                _run(cmd)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"bench.fleet: no network namespace can be made here ({exc}): {name} skipped", file=sys.stderr)
            link = None
        else:
            link = _shape(plan, name, profile, undo)
        yield link
    finally:
        for cmd in undo:  # every step tried, whatever the one before did
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(cmd, capture_output=True, timeout=30, check=False)
