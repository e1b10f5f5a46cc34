"""Simulated actors for bench.fleet: many full peers in one process, one event loop, no simulator, no torch.

    python -m bench.fleet_actors --process P --first I --count C --rate R --stats PATH [--delay-ms D]
    (with an actor's SURREAL_* variables; bench.fleet starts these)

Each simulated actor is what `roles/actor.py` is on the wire, minus the environment and the policy:

- its own sockets: an `ExperienceSender` (PUSH, round-robin over the replay shards) and a `ParamClient` (DEALER
  on every ps replica), the classes the real actor's ports use;
- chunks in the real wire format (`encode_chunk`): `chunk_steps` x `envs_per_actor` steps cut from a recorded
  HalfCheetah-v5 rollout (bench/rollouts.py) with the PPO or DDPG arrays and episode metadata an actor sends,
  ready `chunk_steps * envs_per_actor / rate` seconds after their stepping began (R: one actor's env steps/s)
  and stamped with the parameter version the actor holds;
- the real actor's decisions: `ActorCore`, event by event (its `next_action`: collect, send, ask the ps with or
  without a hold, finish), so flow control (shares and overdraft on-policy, the env-step budget off-policy), the
  fetch cadence, backpressure and the SIGTERM flush are the core's, with the real actor's timings
  (`SEND_TIMEOUT_S`, `FLUSH_S`, `IDLE_S`); a fetch waits up to `fetch_timeout_s` (plus its hold) and is asked
  again of the other replicas when a ps connection breaks (ParamClient's monitor socket), as `Actor` does.

What differs: no policy runs (a blob's arrays are decoded and validated, not loaded into a network) and chunks
repeat the recording. `--delay-ms` holds each fetch request and each reply in this process for that long (one
way, each direction): bench.fleet's emulated network where the kernel has no `tc netem`.

Every second (and at exit) a thread (`StatsFile`) writes the process's counters to `--stats` as JSON: actors,
how many hold parameters and have sent, chunks and env steps sent, fetches, the latency histogram of those the ps
answers at once (the cadence fetches after a chunk, and held fetches whose wake version the ps already held; from
the moment the file `<stats>.measure` appears) and, for held fetches a new blob answered, the delay from that
blob's first arrival in this process to this actor's (the ps's fan-out of a version to the parked actors it
wakes, a lower bound; every answer a poll finds is timed as it is taken off its socket, before any is decoded),
fetch timeouts, replies dropped by reason, seconds blocked, chunks lost on stop.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import os
import signal
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from bench.fleet_trace import LoopTrace
from bench.rollouts import FIELDS
from bench.rollouts import load as load_rollout
from surreal.config import ExperimentConfig, config_from_env
from surreal.config.schema import OffPolicyConfig
from surreal.fileio import atomic_write_text
from surreal.proto.channels import SEND_POLL_S, ExperienceSender, ParamClient, frames_of, send
from surreal.proto.codec import Limits
from surreal.proto.curve import WireContext
from surreal.proto.wire import Chunk, NotModified, Params, ParamsRequest
from surreal.roles.actor import FLUSH_S, IDLE_S, SEND_TIMEOUT_S, ActorCore, Collect, Fetch, Finish, Send
from surreal.runtime.limits import raise_open_files
from surreal.settings import Settings

# Fetch latency histogram: log-spaced bins from 10 us to 100 s.
HIST_LO_MS, HIST_HI_MS, HIST_BINS = 0.01, 100_000.0, 700
_HIST_SCALE = HIST_BINS / math.log(HIST_HI_MS / HIST_LO_MS)
STATS_EVERY_S = 1.0


def hist_bin(ms: float) -> int:
    return min(HIST_BINS - 1, max(0, int(math.log(max(ms, HIST_LO_MS) / HIST_LO_MS) * _HIST_SCALE)))


def hist_percentile(counts: np.ndarray, q: float) -> float | None:
    """The upper edge of the bin holding the q-th percentile (bins are ~1.6% wide): None without samples."""
    total = counts.sum()
    if total == 0:
        return None
    index = int(np.searchsorted(np.cumsum(counts), q / 100 * total))
    return float(HIST_LO_MS * math.exp((min(index, HIST_BINS - 1) + 1) / _HIST_SCALE))


# -- chunks from the recording ----------------------------------------------------------------------------


class Recording:
    """Chunks cut from a recorded rollout, cached by start step. The recording is trimmed to its last episode
    end, so it repeats from one episode's end into the next episode's first step."""

    def __init__(self, cfg: ExperimentConfig, data: dict[str, np.ndarray]) -> None:
        ends = np.flatnonzero(data["terminated"] | data["truncated"])
        length = int(ends[-1]) + 1 if len(ends) else len(data["rewards"])
        self.data = {k: v[:length] for k, v in data.items() if k in FIELDS}
        self.length = length
        self.steps_per_s = float(data["steps_per_s"])
        self.T, self.K = cfg.actor.chunk_steps, cfg.topology.envs_per_actor
        algo = cfg.algo
        self.off_policy = isinstance(algo, OffPolicyConfig)
        if self.off_policy and getattr(algo, "n_step", 1) != 1:
            raise SystemExit("bench.fleet simulates DDPG with n_step=1 only")
        self.gamma = float(getattr(algo, "gamma", 0.99))
        # Each episode's return and length, at its last step.
        self.episode_at: dict[int, tuple[float, int]] = {}
        start = 0
        for end in ends:
            self.episode_at[int(end)] = (float(self.data["rewards"][start : end + 1].sum()), int(end + 1 - start))
            start = int(end) + 1
        self._cache: dict[int, tuple[dict[str, np.ndarray], list[float], list[int]]] = {}

    def chunk(self, start: int) -> tuple[dict[str, np.ndarray], list[float], list[int]]:
        """The arrays ([T, K, ...]) and finished episodes of the chunk whose env k starts at step
        `start + k * length // K` of the recording."""
        start %= self.length
        if start not in self._cache:
            steps = [(start + k * (self.length // self.K) + np.arange(self.T)) % self.length for k in range(self.K)]
            index = np.stack(steps, axis=1)  # [T, K]
            raw = {k: np.ascontiguousarray(v[index]) for k, v in self.data.items()}
            returns, lengths = [], []
            for t in index.reshape(-1):
                if int(t) in self.episode_at:
                    r, n = self.episode_at[int(t)]
                    returns.append(r)
                    lengths.append(n)
            self._cache[start] = (self._arrays(raw), returns, lengths)
        return self._cache[start]

    def _arrays(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self.off_policy:  # PPO: what RolloutCollector records with PPOPolicy's `logprobs`
            return raw
        return {  # DDPG, n_step 1: what NStepCollector makes of a chunk
            "obs": raw["obs"],
            "actions": raw["actions"],
            "rewards": raw["rewards"],
            "next_obs": raw["next_obs"],
            "discounts": np.where(raw["terminated"], 0.0, self.gamma).astype(np.float32),
        }


# -- one simulated actor --------------------------------------------------------------------------------


@dataclass
class SimActor:
    """One simulated actor: the real `ActorCore`, its sockets, and what its event loop is waiting for."""

    index: int
    sender: ExperienceSender
    client: ParamClient
    core: ActorCore
    position: int
    collecting: bool = False
    fetching: int | None = None  # id of the fetch in flight
    request: list[Any] | None = None  # its frames (sent again if a ps connection breaks)
    fetch_sent_at: float = 0.0
    fetch_after: str = ""  # "wait": asked because the throttle held it; "sent": the cadence after a chunk
    blocked_since: float | None = None
    finished: bool = False
    late: list[Params | NotModified] = field(default_factory=list)  # answers to fetches that timed out
    outbox: list[tuple[float, Any, list[Any]]] = field(default_factory=list)  # requests to send, --delay-ms replies


class StatsFile:
    """The process's counters in a JSON file, replaced whole, written on a thread of its own. A rename can wait
    on the disk's journal (a replay shard fsyncing a snapshot to the same disk every 30 s), and an event loop
    stalled there takes its answers off their sockets late: the disk would be timed as fetch latency. One write
    at a time; one due while the last is still under way is skipped (the next carries newer counters), except
    the final one, which waits for it and is waited for."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleet-stats")
        self.pending: Future[None] | None = None

    def write(self, stats: dict[str, Any], final: bool = False) -> None:
        if self.pending is not None:
            if not (final or self.pending.done()):
                return
            self.pending.result()  # a failed write raises here, on the loop
        self.pending = self.executor.submit(atomic_write_text, self.path, json.dumps(stats))
        if final:
            self.pending.result()
            self.executor.shutdown()


class Fleet:
    def __init__(
        self,
        settings: Settings,
        cfg: ExperimentConfig,
        first: int,
        count: int,
        rate: float,
        stats_path: Path,
        delay_s: float,
    ) -> None:
        self.cfg = cfg
        self.rate = rate
        self.stats_file = StatsFile(stats_path)
        self.measure_flag = stats_path.with_suffix(".measure")
        self.delay_s = delay_s
        self.recording = Recording(cfg, load_rollout(cfg.env.id))
        self.ctx = WireContext(settings.curve_keys)  # CURVE when the services speak it (SURREAL_CURVE_DIR)
        self.ctx.set(zmq.MAX_SOCKETS, max(1024, 4 * count + 64))  # a context option (setsockopt is a socket default)
        self.limits = Limits(max_bytes=cfg.ps.max_message_bytes)
        self.drops: Counter[str] = Counter()
        ps_addrs = [settings.connect(a) for a in settings.ps_addrs]
        stride = self.recording.T * 7 + 13  # spread the actors over the recording
        self.actors = [
            SimActor(
                i,
                ExperienceSender(self.ctx, settings.experience_addrs),
                ParamClient(self.ctx, ps_addrs, self.limits, on_error=self._drop),
                ActorCore.of(cfg, i),
                position=i * stride,
            )
            for i in range(first, first + count)
        ]
        self.by_dealer = {a.client.sock: a for a in self.actors}
        self.by_monitor = {a.client.monitor: a for a in self.actors}
        self.by_pusher = {a.sender.sock: a for a in self.actors}
        self.poller = zmq.Poller()
        for a in self.actors:
            self.poller.register(a.client.sock, zmq.POLLIN)
            self.poller.register(a.client.monitor, zmq.POLLIN)
        self.timers: list[tuple[float, int, str, SimActor, int]] = []
        self._seq = itertools.count()
        self._fetch_ids = itertools.count(1)
        self.stopping = False
        self.started = time.time()
        self.hist = np.zeros(HIST_BINS, np.int64)  # fetches the ps answered at once: request to answer
        self.fanout = np.zeros(HIST_BINS, np.int64)  # held fetches answered by a new blob: first arrival to this one
        self.first_seen: dict[tuple[str, int], float] = {}
        self.measuring = False
        self.c: Counter[str] = Counter()
        self.trace = LoopTrace()  # slow fetches and what this process was doing (bench/fleet_trace.py)

    def _drop(self, reason: str) -> None:
        self.drops[reason] += 1

    # -- timers -------------------------------------------------------------------------------------------

    def at(self, when: float, what: str, actor: SimActor, token: int = 0) -> None:
        heapq.heappush(self.timers, (when, next(self._seq), what, actor, token))

    # -- ActorCore, event by event --------------------------------------------------------------------

    def step(self, a: SimActor, now: float) -> None:
        """Do what the core says next, unless a chunk is being stepped, a fetch or a blocked send is pending."""
        if a.finished or a.collecting or a.fetching is not None or a.blocked_since is not None:
            return
        action = a.core.next_action()
        if isinstance(action, Collect):
            a.collecting = True
            self.at(now + self.recording.T * self.recording.K / self.rate, "collected", a)
        elif isinstance(action, Send):
            self.try_send(a, now, action)
        elif isinstance(action, Fetch):
            self.fetch(a, now, action)
        else:
            assert isinstance(action, Finish)
            a.finished = True
            self.c["lost_on_stop"] += action.lost is not None

    def collected(self, a: SimActor, now: float) -> None:
        a.collecting = False
        arrays, returns, lengths = self.recording.chunk(a.position)
        a.position += self.recording.T
        a.core.collected(Chunk(arrays, a.core.version, a.index, list(returns), list(lengths)))
        self.step(a, now)

    def try_send(self, a: SimActor, now: float, action: Send) -> None:
        if not a.sender.send(action.chunk, action.incarnation, 0.0):
            if a.blocked_since is None:
                a.blocked_since = now
                self.poller.register(a.sender.sock, zmq.POLLOUT)
                self.at(now + SEND_TIMEOUT_S, "blocked", a, a.core.chunks_sent)
            return
        if a.blocked_since is not None:
            self.c["blocked_s"] += now - a.blocked_since  # type: ignore[assignment]
            a.blocked_since = None
            self.poller.unregister(a.sender.sock)
        chunk = a.core.sent(True)
        assert chunk is not None
        self.c["chunks_sent"] += 1
        self.c["env_steps_sent"] += chunk.env_steps
        if self.measuring:
            self.c["env_steps_sent_measured"] += chunk.env_steps
        self.step(a, now)

    def blocked(self, a: SimActor, now: float, sent_then: int) -> None:
        """SEND_TIMEOUT_S after a refused chunk: still refused is one refused try, as `Actor` counts it (the core
        then decides: wait on, or, stopping, give the chunk up)."""
        if a.blocked_since is None or a.core.chunks_sent != sent_then:
            return
        self.c["send_blocked"] += 1
        a.core.sent(False)
        action = a.core.next_action()
        if isinstance(action, Finish):
            self.poller.unregister(a.sender.sock)
            a.blocked_since, a.finished = None, True
            self.c["lost_on_stop"] += action.lost is not None
            return
        self.at(now + SEND_TIMEOUT_S, "blocked", a, sent_then)

    # -- parameters -------------------------------------------------------------------------------------

    def fetch(self, a: SimActor, now: float, action: Fetch) -> None:
        a.fetching, a.fetch_sent_at = next(self._fetch_ids), now
        a.fetch_after = "wait" if action.hold_s > 0 else "sent"
        hold_ms = math.ceil(action.hold_s * 1000) if action.hold_s > 0 else 0
        a.request = frames_of(
            ParamsRequest(action.version, action.incarnation, hold_ms, action.wake_version).to_message()
        )
        a.client.disconnects()  # those before this request took none of it
        a.outbox.append((now, a.fetching, a.request))
        self.at(now + self.delay_s, "send_request", a, a.fetching)
        self.at(now + self.cfg.actor.fetch_timeout_s + hold_ms / 1000, "fetch_timeout", a, a.fetching)
        if a.late:  # a late answer waiting in the socket is what this fetch reads first, as ParamClient's does
            self.answered(a, a.late.pop(0), now)

    def send_request(self, a: SimActor, token: int, now: float) -> None:
        """Send a fetch's request; a socket with no ps connected yet is tried again every SEND_POLL_S until the
        fetch times out, as `channels.send` retries within ParamClient's timeout."""
        for item in [x for x in a.outbox if x[1] == token]:
            a.outbox.remove(item)
            if a.fetching != token:
                continue
            if not send(a.client.sock, item[2], 0.0):
                self.c["fetch_send_retries"] += 1
                a.outbox.append(item)
                self.at(now + SEND_POLL_S, "send_request", a, token)
            else:
                a.fetch_sent_at = time.monotonic()  # when it left, not when this loop got to it

    def on_reply(self, a: SimActor, frames: list[Any], now: float) -> None:
        reply = a.client.decode(frames)
        if reply is None:
            return
        if isinstance(reply, Params) and (reply.blob.version, reply.blob.incarnation) != (
            a.core.version,
            a.core.incarnation,
        ):
            self.c["blobs"] += 1
            first = self.first_seen.setdefault((reply.blob.incarnation, reply.blob.version), now)
            if len(self.first_seen) > 64:
                self.first_seen.pop(next(iter(self.first_seen)))
            # A held fetch whose blob reached this process before the request left was answered from what
            # the ps held (its wake version had come): timed as a fetch answered at once, not as fan-out.
            if a.fetching is not None and a.fetch_after == "wait" and first >= a.fetch_sent_at and self.measuring:
                self.fanout[hist_bin((now - first) * 1000)] += 1
                self.trace.fetch(first, now, "fanout")
        if a.fetching is None:  # a late answer to a fetch that timed out: the next fetch takes it
            a.late.append(reply)
            return
        at_once = a.fetch_after != "wait" or (
            isinstance(reply, Params)
            and self.first_seen.get((reply.blob.incarnation, reply.blob.version), now) < a.fetch_sent_at
        )
        if at_once and self.measuring:  # the service time of a fetch the ps answers from what it holds
            self.hist[hist_bin((now - a.fetch_sent_at) * 1000)] += 1
            self.trace.fetch(a.fetch_sent_at, now, "at_once")
        self.answered(a, reply, now)

    def answered(self, a: SimActor, reply: Params | NotModified | None, now: float) -> None:
        """The core takes the fetch's outcome; a held fetch that brought nothing newer pauses IDLE_S, as the
        shell pauses after `Actor.step` returned False."""
        assert a.fetching is not None
        self.c["fetches"] += 1
        if a.fetch_after == "wait":
            self.c["held_fetches"] += 1
        held, a.fetching = a.fetch_after == "wait", None
        if not a.core.answered(reply) and held:
            self.at(now + IDLE_S, "step", a)
        else:
            self.step(a, now)

    def fetch_timeout(self, a: SimActor, now: float, token: int) -> None:
        if a.fetching != token:
            return
        self.c["fetch_timeouts"] += 1
        self.c["fetches"] -= 1  # `answered` counts what came back
        self.answered(a, None, now)

    def disconnected(self, a: SimActor) -> None:
        """A ps connection broke: a fetch waiting may have gone with it, and is asked of the others again."""
        if a.client.disconnects() and a.fetching is not None and a.request is not None:
            send(a.client.sock, a.request, 0.0)

    # -- the loop ---------------------------------------------------------------------------------------

    def run(self, stop: list[bool]) -> None:
        now = time.monotonic()
        for i, a in enumerate(self.actors):  # actors start over the first second, as processes would
            self.at(now + i / max(1, len(self.actors)), "step", a)
        next_stats = now
        flush_until: float | None = None
        while True:
            now = time.monotonic()
            if stop[0] and not self.stopping:
                self.stopping = True
                for a in self.actors:  # SIGTERM: the core finishes the chunk being stepped and flushes
                    a.core.stop()
                    a.fetching = None  # nothing more to wait for from the ps
                    self.step(a, now)
            if self.stopping and all(a.finished or a.core.done for a in self.actors):
                break
            if self.stopping and flush_until is None:
                flush_until = now + max(SEND_TIMEOUT_S, self.recording.T * self.recording.K / self.rate) + 2.0
            if flush_until is not None and now > flush_until:
                self.c["lost_on_stop"] += sum(1 for a in self.actors if a.core.unsent is not None)
                break
            if not self.stopping and all(a.core.done for a in self.actors):
                break
            timeout = 0.05 if not self.timers else min(0.05, max(0.0, self.timers[0][0] - now))
            asked_until = now + math.ceil(timeout * 1000) / 1000
            ready = self.poller.poll(math.ceil(timeout * 1000))
            woke = time.monotonic()
            # Every answer is taken off its socket, and timed, before any is handled: an actor's answer is not
            # late for the other simulated actors' blobs this process decodes first (each real actor has a
            # process of its own).
            arrived: list[tuple[float, SimActor, list[Any]]] = []
            for sock, event in ready:
                if event & zmq.POLLIN and sock in self.by_dealer:
                    a = self.by_dealer[sock]
                    while True:
                        try:
                            frames = sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        arrived.append((time.monotonic(), a, frames))
            for sock, event in ready:
                if event & zmq.POLLIN and sock in self.by_monitor:
                    self.disconnected(self.by_monitor[sock])
                if event & zmq.POLLOUT and sock in self.by_pusher:
                    a = self.by_pusher[sock]
                    action = a.core.next_action() if a.core.unsent is not None else None
                    if isinstance(action, Send):
                        self.try_send(a, time.monotonic(), action)
            for at, a, frames in arrived:
                if self.delay_s > 0:
                    self.at(at + self.delay_s, "reply", a, 0)
                    a.outbox.append((at + self.delay_s, -1, frames))
                else:
                    self.on_reply(a, frames, at)
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now:
                _, _, what, a, token = heapq.heappop(self.timers)
                now = max(now, time.monotonic())
                if what == "step":
                    self.step(a, now)
                elif what == "collected":
                    self.collected(a, now)
                elif what == "blocked":
                    self.blocked(a, now, token)
                elif what == "fetch_timeout":
                    self.fetch_timeout(a, now, token)
                elif what == "send_request":
                    self.send_request(a, token, now)
                elif what == "reply":
                    item = next(x for x in a.outbox if x[1] == -1)
                    a.outbox.remove(item)
                    self.on_reply(a, item[2], item[0])  # arrived when its delay ended
            self.trace.turn(asked_until, woke, time.monotonic())
            if now >= next_stats:
                self.measuring = self.measuring or self.measure_flag.exists()
                self.write_stats()
                next_stats = now + STATS_EVERY_S

    def write_stats(self, final: bool = False) -> None:
        stats = {
            "pid": os.getpid(),
            "final": final,
            "actors": len(self.actors),
            "with_params": sum(a.core.version >= 0 for a in self.actors),
            "have_sent": sum(a.core.chunks_sent > 0 for a in self.actors),
            "done": sum(a.core.done for a in self.actors),
            "measuring": self.measuring,
            "counters": dict(self.c),
            "dropped": dict(self.drops),
            "fetch_hist": self.hist.tolist(),
            "fanout_hist": self.fanout.tolist(),
            "rate": self.rate,
        }
        if final:
            stats["trace"] = self.trace.to_json()
        self.stats_file.write(stats, final)

    def close(self) -> None:
        for a in self.actors:
            a.client.close()
            a.sender.close(FLUSH_S)  # queued chunks get FLUSH_S to reach a shard, as a stopping actor's do
        self.ctx.term()
        self.write_stats(final=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--process", type=int, default=0, help="this process's number (names it in bench.fleet)")
    parser.add_argument("--first", type=int, required=True, help="index of the first simulated actor")
    parser.add_argument("--count", type=int, required=True, help="simulated actors in this process")
    parser.add_argument("--rate", type=float, required=True, help="env steps per second of one actor")
    parser.add_argument("--stats", type=Path, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay added to fetches and replies")
    args = parser.parse_args()
    stop = [False]

    def on_signal(signum: int, frame: object) -> None:
        del signum, frame
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    raise_open_files()
    fleet = Fleet(
        Settings.from_env(), config_from_env(), args.first, args.count, args.rate, args.stats, args.delay_ms / 1000
    )
    try:
        fleet.run(stop)
    finally:
        fleet.close()


if __name__ == "__main__":
    main()
