"""The loop a role's driver runs on: the time (`now`), a call at a time (`at`), and the messages its host hands it.

A role's decisions are its core's; its timing rules around the core (a fetch's deadline, a late reply, the pause
after an empty hold, a send's retry, the learner's drain and linger) are its driver's, written once against this
interface and run on three loops:

    ZmqLoop      the ZMQ poller: sockets read as messages arrive, a socket watched for room, timers on the monotonic
                 clock (a role's process; bench.fleet's many simulated actors in one process)
    InlineLoop   one thread taking turns (serial mode): a call waits for the next turn, whatever its time
    sim's Node   the simulator's world (sim/world.py): a virtual clock, a seeded scheduler, one node's incarnation

A driver sends through its ports (a socket, a simulated pipe, an in-process core) and is told what arrives by its
host (`on_reply`, `on_room`, ...), so the loop itself only knows time.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import zmq

STOP_POLL_S = 0.05  # the longest a ZmqLoop waits before it asks again whether its process stops


class Loop(Protocol):
    def now(self) -> float:
        """The loop's clock, in seconds."""
        ...

    def at(self, when: float, fn: Callable[[], None]) -> None:
        """Call `fn()` once `when` has come (at once if it has)."""
        ...


class Alarm:
    """One wake-up a driver keeps on its loop: `set(when)` replaces the one before (None: none), so a wait that
    ended another way never fires. Moved on lazily: a later time waits for the call already on the loop, which then
    goes again for it (most waits end by a message first, and their call would only be stale)."""

    def __init__(self, loop: Loop, fn: Callable[[], None]) -> None:
        self.loop, self.fn = loop, fn
        self.when: float | None = None
        self._pending: float | None = None  # the time of the call on the loop

    def set(self, when: float | None) -> None:
        self.when = when
        if when is not None and (self._pending is None or when < self._pending):
            self._pending = when
            self.loop.at(when, lambda: self._fire(when))

    def _fire(self, at: float) -> None:
        if at != self._pending:
            return  # a sooner call replaced it
        self._pending = None
        if self.when is None:
            return
        if self.when > at:
            self.set(self.when)
            return
        self.when = None
        self.fn()


Handler = Callable[[list[zmq.Frame]], None]


class ZmqLoop:
    """The ZMQ poller as a loop: each socket `listen`ed to hands its messages to its handler (at most `burst` per
    turn; every message of a turn is taken off its socket before any is handled, and `arrived_at` says when it was),
    `on_writable` calls once when a socket has room, timers run at their time on the monotonic clock. `run` turns
    until `done()`, waiting at most STOP_POLL_S a turn so that a stop flag is seen at once."""

    def __init__(self) -> None:
        self.poller = zmq.Poller()
        self._readers: dict[zmq.Socket, tuple[Handler, int | None]] = {}
        self._writers: dict[zmq.Socket, Callable[[], None]] = {}
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.arrived_at = 0.0  # when the message being handled was taken off its socket
        self.asked_until = self.woke_at = 0.0  # the last turn's poll: asked to return by then, returned then

    def now(self) -> float:
        return time.monotonic()

    def at(self, when: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (when, next(self._order), fn))

    def listen(self, sock: zmq.Socket, handler: Handler, burst: int | None = None) -> None:
        self._readers[sock] = (handler, burst)
        self._register(sock)

    def on_writable(self, sock: zmq.Socket, fn: Callable[[], None]) -> None:
        self._writers[sock] = fn
        self._register(sock)

    def forget(self, sock: zmq.Socket) -> None:
        self._readers.pop(sock, None)
        self._writers.pop(sock, None)
        self._register(sock)

    def _register(self, sock: zmq.Socket) -> None:
        flags = (zmq.POLLIN if sock in self._readers else 0) | (zmq.POLLOUT if sock in self._writers else 0)
        if flags:
            self.poller.register(sock, flags)
        elif sock in self.poller:
            self.poller.unregister(sock)

    def turn(self, max_wait_s: float = STOP_POLL_S) -> None:
        """Wait for a message, room or the next timer (at most `max_wait_s`), then handle what came and what is due."""
        wait_s = max_wait_s if not self._timers else min(max_wait_s, max(0.0, self._timers[0][0] - time.monotonic()))
        wait_ms = math.ceil(wait_s * 1000)
        self.asked_until = time.monotonic() + wait_ms / 1000
        if self._readers or self._writers:
            ready = self.poller.poll(wait_ms)
        else:
            time.sleep(wait_ms / 1000)
            ready = []
        self.woke_at = time.monotonic()
        arrived: list[tuple[float, Handler, list[zmq.Frame]]] = []
        for sock, event in ready:
            if event & zmq.POLLIN and sock in self._readers:
                handler, burst = self._readers[sock]
                taken = 0
                while burst is None or taken < burst:
                    try:
                        frames = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    arrived.append((time.monotonic(), handler, frames))
                    taken += 1
        for sock, event in ready:
            if event & zmq.POLLOUT and sock in self._writers:
                fn = self._writers.pop(sock)
                self._register(sock)
                fn()
        for self.arrived_at, handler, frames in arrived:
            handler(frames)
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            heapq.heappop(self._timers)[2]()

    def run(self, done: Callable[[], bool]) -> None:
        while not done():
            self.turn()


class InlineLoop:
    """One thread taking turns (serial mode): `at` queues a call for the next turn whatever its time (waiting is
    letting the others run; nothing else can happen meanwhile), and `turn` makes the calls queued before it, in the
    order they were queued. `now` is the wall clock, as the cores' timers read it elsewhere."""

    def __init__(self) -> None:
        self.now = time.monotonic
        self._queue: deque[Callable[[], None]] = deque()

    def at(self, when: float, fn: Callable[[], None]) -> None:
        del when
        self._queue.append(fn)

    def turn(self) -> None:
        for _ in range(len(self._queue)):
            self._queue.popleft()()
