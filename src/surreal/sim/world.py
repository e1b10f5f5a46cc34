"""The simulator's world: a virtual clock, a seeded scheduler and a network of links, one thread, no sockets.

Every source of chance (delays, drops, which shard or ps replica a message goes to, fault times) draws from one
`random.Random(seed)` in the order the scheduler runs events, and events at one instant run in the order they were
scheduled, so a seed replays exactly: a failing run is rerun from its seed alone.

The network is what ZMQ over TCP does, reduced to what the roles can observe:

- A message from node a to node b travels on the pipe (a, b): it leaves once a's link has sent what was queued
  before it (`bandwidth` bytes/s; none: instant), arrives a's plus b's `latency_s` later plus a jitter drawn from
  `Network.jitter_s`, and never overtakes an earlier message of its pipe (TCP keeps order on a connection; messages
  on different pipes reorder freely).
- A pipe holds at most `cap` messages that b has not taken yet (ZMQ's high-water marks). A PUSH sender skips a
  full pipe (backpressure); a PUB sender drops the message (a slow subscriber loses blobs, as ZMQ's PUB does).
- A partition between two sets of nodes holds the messages that cross it (TCP retransmits) until it heals, then
  they arrive in order; a PUB pipe keeps only what its high-water marks allow.
- `drop_p` loses a message on a PUB pipe with that chance (the learner's blobs to the ps replicas: ZMQ's PUB is the
  one socket that drops on a live connection, and the learner sends its latest blob again every second). Every
  other pipe is a TCP connection: it loses nothing while both ends live, and everything when one ends.
- A killed node loses everything in its pipes, both ways; a message that arrives at a node restarted since it was
  sent is lost (the connection it came on is gone).

A node processes one message at a time: what it `spend`s on one (seconds of its own time: the measured cost of an
event, sim/capacity.py) the next waits for; what costs nothing is taken at once. `work_s` adds up what it spent, and
a node with a `bandwidth` counts the bytes through its link, so a run says how busy each part was.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from surreal.proto.codec import Message


class World:
    """The virtual clock and the scheduler: `at(t, fn, *args)` runs `fn(*args)` at virtual time t, events at one
    instant in the order they were scheduled. `rng` is the one source of chance."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.now = 0.0
        self.rng = random.Random(seed)
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._order = itertools.count()
        self.events = 0
        self.trace = 0  # every event's time folded in, in the order they ran: the run's trace, in one number

    def clock(self) -> float:
        return self.now

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._queue, (t if t > self.now else self.now, next(self._order), fn, args))

    def after(self, dt: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.now + dt, fn, *args)

    def pending(self) -> Iterator[tuple[Callable[..., None], tuple[Any, ...]]]:
        """The events still scheduled (in no order)."""
        for _, _, fn, args in self._queue:
            yield fn, args

    def run(self, until: float, done: Callable[[], bool] = lambda: False, every: int = 256) -> None:
        """Run events in time order until virtual time `until`, no events are left, or `done()` (asked every
        `every` events)."""
        queue, pop = self._queue, heapq.heappop
        while queue and queue[0][0] <= until:
            t, _, fn, args = pop(queue)
            self.now = t
            self.trace = hash((self.trace, t))  # a tuple of numbers hashes alike in every process (no salt)
            fn(*args)
            self.events += 1
            if not self.events % every and done():
                return
        self.now = max(self.now, min(until, queue[0][0]) if queue else until)


class Node:
    """A simulated process: `receive` is handed each message it takes, one at a time, `cost(message)` seconds of
    its own time each. `kill` loses what it holds in its pipes; `incarnation` counts its starts."""

    def __init__(self, world: World, net: Network, name: str, latency_s: float = 0.0005) -> None:
        self.world, self.net, self.name = world, net, name
        self.latency_s = latency_s
        self.bandwidth: float | None = None  # bytes/s of its link; None: no limit
        self.link_free_at = 0.0
        self.alive = True
        self.paused_until = 0.0  # a paused process (SIGSTOP, a stalled VM) takes nothing in until then
        self.incarnation = 0
        self.inbox: deque[tuple[Node, Message, Pipe]] = deque()
        self.pipes: dict[str, Pipe] = {}  # the pipes from this node, by destination
        self.busy_until = 0.0
        self.work_s = 0.0  # seconds spent so far (`spend`)
        self.bytes_out = self.bytes_in = 0  # through its link, counted where it has a `bandwidth`
        self.running = False
        net.nodes[name] = self

    def now(self) -> float:
        return self.world.now

    def at(self, when: float, fn: Callable[[], None]) -> None:
        """The loop a role's driver runs on in this node (roles/loop.py): `fn()` at `when`, once the node's work and
        any pause are over, unless the process it belongs to (this incarnation) has ended by then."""
        self.world.at(when, self._call, self.incarnation, fn)

    def _call(self, incarnation: int, fn: Callable[[], None]) -> None:
        if incarnation != self.incarnation or not self.alive:
            return
        if self.world.now < max(self.busy_until, self.paused_until):
            self.world.at(max(self.busy_until, self.paused_until), self._call, incarnation, fn)
            return
        fn()

    def spend(self, seconds: float) -> None:
        """Work of `seconds` from now (or from the end of the work before): messages wait until it is done."""
        self.busy_until = max(self.world.now, self.busy_until) + seconds
        self.work_s += seconds

    def disconnected(self, peer: Node) -> None:
        """The connection to `peer` broke (its process ended): what a ZMQ socket monitor reports."""

    def receive(self, src: Node, message: Message) -> None:
        raise NotImplementedError

    def deliver(self, src: Node, message: Message, pipe: Pipe) -> None:
        if not self.running and self.world.now >= self.busy_until and self.world.now >= self.paused_until:
            pipe.taken()  # idle: taken at once
            self.receive(src, message)
            return
        self.inbox.append((src, message, pipe))
        if not self.running:
            self.running = True
            self.world.at(max(self.busy_until, self.paused_until), self._run)

    def _run(self) -> None:
        """Take the next message, then come back once what it spent is done (or at once, costing nothing)."""
        world = self.world
        while self.inbox:
            if not self.alive:
                self.inbox.clear()
                break
            if world.now < self.paused_until:
                world.at(self.paused_until, self._run)
                return
            src, message, pipe = self.inbox.popleft()
            pipe.taken()
            self.receive(src, message)
            if self.busy_until > world.now and self.inbox:
                world.at(self.busy_until, self._run)
                return
        self.running = False

    def send(self, dst: Node, message: Message, nbytes: int = 0) -> bool:
        return self.net.send(self, dst, message, nbytes)

    def kill(self) -> None:
        """SIGKILL: gone at once, with what it holds and what its pipes hold."""
        self.alive = False
        self.inbox.clear()
        self.running = False
        self.net.reset(self)

    def start(self) -> None:
        """Start again (a new process: nothing of the old one's connections)."""
        self.alive = True
        self.incarnation += 1
        self.busy_until = self.world.now


@dataclass
class Pipe:
    """The messages from `src` to `dst` not yet taken: at most `cap` (None: no bound); `last_arrival` keeps them in
    order; `held` are those a partition holds."""

    src: Node
    dst: Node
    cap: int | None = None
    lossy: bool = False  # PUB: a full pipe drops what is sent
    queued: int = 0
    last_arrival: float = 0.0
    held: list[tuple[Message, int]] = field(default_factory=list)
    generation: int = 0  # bumped by a reset: what was on the wire before is lost

    @property
    def full(self) -> bool:
        return self.cap is not None and self.queued >= self.cap

    def taken(self) -> None:
        self.queued = max(0, self.queued - 1)


class Network:
    """The pipes between nodes, their delays, partitions and drops (module docstring)."""

    def __init__(self, world: World, jitter_s: float = 0.0002, drop_p: float = 0.0) -> None:
        self.world = world
        self.jitter_s, self.drop_p = jitter_s, drop_p
        self.nodes: dict[str, Node] = {}
        self.pipes: dict[tuple[str, str], Pipe] = {}
        self.cuts: list[tuple[frozenset[str], frozenset[str]]] = []
        self.lost: Callable[[Pipe, Message], None] = lambda pipe, message: None  # the ledger's hook
        self.dropped = 0

    def pipe(self, src: Node, dst: Node, cap: int | None = None, lossy: bool = False) -> Pipe:
        pipe = src.pipes.get(dst.name)
        if pipe is None:
            pipe = src.pipes[dst.name] = self.pipes[(src.name, dst.name)] = Pipe(src, dst, cap, lossy)
        return pipe

    def connected(self, src: Node, dst: Node) -> bool:
        """What ZMQ's IMMEDIATE sees: the peer's process is up (a partition is not noticed: TCP just waits)."""
        return dst.alive

    def blocked(self, a: str, b: str) -> bool:
        return any((a in one and b in other) or (b in one and a in other) for one, other in self.cuts)

    def send(self, src: Node, dst: Node, message: Message, nbytes: int = 0) -> bool:
        """Put `message` on the pipe (src, dst); False where a full pipe refused it (PUSH backpressure) or dropped
        it (PUB)."""
        pipe = src.pipes.get(dst.name) or self.pipe(src, dst)
        if pipe.full:
            if pipe.lossy:
                self.dropped += 1
                self.lost(pipe, message)
            return False
        if pipe.lossy and self.drop_p and self.world.rng.random() < self.drop_p:
            self.dropped += 1
            return True  # sent, and lost on the way
        pipe.queued += 1
        if self.cuts and self.blocked(src.name, dst.name):
            pipe.held.append((message, nbytes))
            return True
        self._transmit(pipe, message, nbytes)
        return True

    def _transmit(self, pipe: Pipe, message: Message, nbytes: int) -> None:
        world, src, dst = self.world, pipe.src, pipe.dst
        leaves = world.now
        if src.bandwidth is not None and nbytes:
            leaves = max(leaves, src.link_free_at) + nbytes / src.bandwidth
            src.link_free_at = leaves
            src.bytes_out += nbytes
        arrives = leaves + src.latency_s + dst.latency_s
        if self.jitter_s:
            arrives += world.rng.random() * self.jitter_s
        if dst.bandwidth is not None and nbytes:
            arrives += nbytes / dst.bandwidth
            dst.bytes_in += nbytes
        if arrives < pipe.last_arrival:
            arrives = pipe.last_arrival
        pipe.last_arrival = arrives
        world.at(arrives, self._arrive, pipe, pipe.generation, dst.incarnation, message)

    def _arrive(self, pipe: Pipe, generation: int, incarnation: int, message: Message) -> None:
        dst = pipe.dst
        if generation != pipe.generation or incarnation != dst.incarnation or not dst.alive:
            if generation == pipe.generation:
                pipe.taken()
            self.lost(pipe, message)
            return
        dst.deliver(pipe.src, message, pipe)

    def reset(self, node: Node) -> None:
        """Every pipe from and to `node` loses what it carries (its process is gone); its peers hear of it."""
        peers = []
        for pipe in self.pipes.values():
            if node in (pipe.src, pipe.dst):
                for message, _ in pipe.held:
                    self.lost(pipe, message)
                pipe.held.clear()
                pipe.generation += 1
                pipe.queued = 0
                peers.append(pipe.dst if pipe.src is node else pipe.src)
        for peer in dict.fromkeys(peers):
            if peer.alive and not self.blocked(peer.name, node.name):  # a partition hides the reset too
                peer.disconnected(node)

    def in_flight(self) -> Iterator[tuple[Pipe, Message]]:
        """The messages on the wire: scheduled to arrive, their pipe not reset since."""
        for fn, args in self.world.pending():
            if fn == self._arrive and args[1] == args[0].generation:
                yield args[0], args[3]

    def held(self, node: Node | None = None) -> Iterator[Message]:
        """The messages not taken yet: in an inbox, held by a partition or on the wire; with `node`, those in its
        inbox and on its pipes, both ways."""
        for n in self.nodes.values() if node is None else [node]:
            yield from (message for _, message, _ in n.inbox)
        for pipe in self.pipes.values():
            if node is None or node in (pipe.src, pipe.dst):
                yield from (message for message, _ in pipe.held)
        for pipe, message in self.in_flight():
            if node is None or node in (pipe.src, pipe.dst):
                yield message

    def partition(self, one: set[str], other: set[str]) -> None:
        self.cuts.append((frozenset(one), frozenset(other)))

    def heal(self) -> None:
        """Every partition ends: what they held is sent on, in order."""
        self.cuts.clear()
        for pipe in self.pipes.values():
            held, pipe.held = pipe.held, []
            for message, nbytes in held:
                self._transmit(pipe, message, nbytes)
