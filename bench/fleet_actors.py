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
- the real actor's driver: `ActorDriver` over `ActorCore` on the ZMQ poller (roles/loop.py `ZmqLoop`), all of this
  process's actors on one loop, so flow control, the fetch cadence and each fetch's timing, backpressure and the
  SIGTERM flush are the real actor's own code, with its timings (`SEND_TIMEOUT_S`, `FLUSH_S`, `IDLE_S`).

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
import json
import math
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
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
from surreal.proto.channels import ExperienceSender, ParamClient
from surreal.proto.codec import Limits, Message
from surreal.proto.curve import WireContext
from surreal.proto.wire import Chunk, Params
from surreal.roles.actor import FLUSH_S, SEND_TIMEOUT_S, ActorCore, ActorDriver, ActorEvents, ActorSockets
from surreal.roles.loop import ZmqLoop
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
            ended = [self.episode_at[int(t)] for t in index.reshape(-1) if int(t) in self.episode_at]
            self._cache[start] = (self._arrays(raw), [r for r, _ in ended], [n for _, n in ended])
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


class RecordedActor(ActorEvents):
    """One simulated actor's rollout (chunks from the recording, `T * K / rate` seconds each) and what its driver
    tells this process's counters."""

    blocking = False

    def __init__(self, fleet: Fleet, index: int, position: int) -> None:
        self.fleet, self.index, self.position = fleet, index, position
        self.seconds = fleet.recording.T * fleet.recording.K / fleet.rate

    def collect(self, version: int, done: Callable[[Chunk], None]) -> None:
        self.fleet.loop.at(time.monotonic() + self.seconds, lambda: done(self._chunk(version)))

    def _chunk(self, version: int) -> Chunk:
        arrays, returns, lengths = self.fleet.recording.chunk(self.position)
        self.position += self.fleet.recording.T
        return Chunk(arrays, version, self.index, list(returns), list(lengths))

    def load(self, params: Params) -> None:
        del params  # no policy runs

    def sent(self, chunk: Chunk) -> None:
        c = self.fleet.c
        c["chunks_sent"] += 1
        c["env_steps_sent"] += chunk.env_steps
        if self.fleet.measuring:
            c["env_steps_sent_measured"] += chunk.env_steps

    def refused(self) -> None:
        self.fleet.c["send_blocked"] += 1

    def timed_out(self) -> None:
        self.fleet.c["fetch_timeouts"] += 1

    def finished(self, lost: Chunk | None) -> None:
        self.fleet.c["lost_on_stop"] += lost is not None


class MeasuredSockets(ActorSockets):
    """A simulated actor's `ActorSockets`, its fetches timed (from its request leaving to its answer coming off
    the socket), the seconds its chunks waited for room counted, and with `--delay-ms` each request and reply held
    that long in this process."""

    def __init__(self, fleet: Fleet, experience: ExperienceSender, params: ParamClient) -> None:
        super().__init__(fleet.loop, experience, params)
        self.fleet = fleet
        self.asked_at = 0.0  # when the request of the fetch out left
        self.held = False  # whether it is a held fetch (a long poll)
        self.blocked_since: float | None = None

    def send_chunk(self, message: Message) -> bool:
        ok = super().send_chunk(message)
        now = time.monotonic()
        if not ok and self.blocked_since is None:
            self.blocked_since = now
        elif ok and self.blocked_since is not None:
            self.fleet.c["blocked_s"] += now - self.blocked_since  # type: ignore[assignment]
            self.blocked_since = None
        return ok

    def ask_ps(self, message: Message) -> bool:
        self.held = bool(message.meta.get("hold_ms"))
        if self.fleet.delay_s <= 0:
            return self._ask(message)
        self.loop.at(time.monotonic() + self.fleet.delay_s, lambda: self._delayed(message))
        return True

    def _ask(self, message: Message) -> bool:
        ok = super().ask_ps(message)
        if ok:
            self.asked_at = time.monotonic()  # when it left, not when this loop got to it
        else:
            self.fleet.c["fetch_send_retries"] += 1
        return ok

    def _delayed(self, message: Message) -> None:
        if not self._ask(message) and self.driver is not None:
            self.driver.core.asked(False)
            self.driver.kick()

    def on_frames(self, frames: list[zmq.Frame]) -> None:
        arrived = self.loop.arrived_at
        if self.fleet.delay_s > 0:
            self.loop.at(arrived + self.fleet.delay_s, lambda: self._measured(frames, arrived + self.fleet.delay_s))
        else:
            self._measured(frames, arrived)

    def _measured(self, frames: list[zmq.Frame], now: float) -> None:
        reply = self.params.decode(frames)
        driver = self.driver
        if reply is None or driver is None:
            return
        fleet, core = self.fleet, driver.core
        first = now
        if isinstance(reply, Params) and (reply.blob.version, reply.blob.incarnation) != (
            core.version,
            core.incarnation,
        ):
            fleet.c["blobs"] += 1
            first = fleet.first_seen.setdefault((reply.blob.incarnation, reply.blob.version), now)
            if len(fleet.first_seen) > 64:
                fleet.first_seen.pop(next(iter(fleet.first_seen)))
            # A held fetch whose blob reached this process before the request left was answered from what
            # the ps held (its wake version had come): timed as a fetch answered at once, not as fan-out.
            if core.fetch is not None and self.held and first >= self.asked_at and fleet.measuring:
                fleet.fanout[hist_bin((now - first) * 1000)] += 1
                fleet.trace.fetch(first, now, "fanout")
        if core.fetch is not None:  # else a late answer to a fetch that timed out: the next fetch takes it
            fleet.c["fetches"] += 1
            fleet.c["held_fetches"] += self.held
            if (not self.held or first < self.asked_at) and fleet.measuring:  # the ps answered from what it held
                fleet.hist[hist_bin((now - self.asked_at) * 1000)] += 1
                fleet.trace.fetch(self.asked_at, now, "at_once")
        driver.on_reply(reply)


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
    """This process's simulated actors: each an `ActorDriver` with its own sockets, all on one `ZmqLoop`."""

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
        self.cfg, self.rate, self.delay_s = cfg, rate, delay_s
        self.stats_file = StatsFile(stats_path)
        self.measure_flag = stats_path.with_suffix(".measure")
        self.recording = Recording(cfg, load_rollout(cfg.env.id))
        self.ctx = WireContext(settings.curve_keys)  # CURVE when the services speak it (SURREAL_CURVE_DIR)
        self.ctx.set(zmq.MAX_SOCKETS, max(1024, 4 * count + 64))  # a context option (setsockopt is a socket default)
        self.drops: Counter[str] = Counter()
        self.c: Counter[str] = Counter()
        self.hist = np.zeros(HIST_BINS, np.int64)  # fetches the ps answered at once: request to answer
        self.fanout = np.zeros(HIST_BINS, np.int64)  # held fetches answered by a new blob: first arrival to this one
        self.first_seen: dict[tuple[str, int], float] = {}
        self.measuring = False
        self.trace = LoopTrace()  # slow fetches and what this process was doing (bench/fleet_trace.py)
        self.loop = ZmqLoop()
        limits = Limits(max_bytes=cfg.ps.max_message_bytes)
        ps_addrs = [settings.connect(a) for a in settings.ps_addrs]
        stride = self.recording.T * 7 + 13  # spread the actors over the recording
        self.sockets: list[MeasuredSockets] = []
        self.drivers: list[ActorDriver] = []
        for i in range(first, first + count):
            experience = ExperienceSender(self.ctx, settings.experience_addrs)
            sockets = MeasuredSockets(self, experience, ParamClient(self.ctx, ps_addrs, limits, on_error=self._drop))
            actor = RecordedActor(self, i, position=i * stride)
            core = ActorCore.of(cfg, i, self.loop.now)
            self.drivers.append(sockets.attach(ActorDriver(core, self.loop, sockets, actor, actor)))
            self.sockets.append(sockets)

    def _drop(self, reason: str) -> None:
        self.drops[reason] += 1

    def run(self, stop: list[bool]) -> None:
        now = time.monotonic()
        for i, driver in enumerate(self.drivers):  # actors start over the first second, as processes would
            self.loop.at(now + i / max(1, len(self.drivers)), driver.kick)
        self._stats()
        flush_until: float | None = None
        while not all(driver.finished for driver in self.drivers):
            if stop[0] and flush_until is None:  # SIGTERM: each core finishes the chunk being stepped and flushes
                flush_until = time.monotonic() + max(SEND_TIMEOUT_S, self.recording.T * self.recording.K / self.rate)
                flush_until += 2.0
                for driver in self.drivers:
                    driver.stop()
            if flush_until is not None and time.monotonic() > flush_until:
                self.c["lost_on_stop"] += sum(1 for d in self.drivers if not d.finished and d.core.unsent is not None)
                break
            self.loop.turn()
            self.trace.turn(self.loop.asked_until, self.loop.woke_at, time.monotonic())

    def _stats(self) -> None:
        self.measuring = self.measuring or self.measure_flag.exists()
        self.write_stats()
        self.loop.at(time.monotonic() + STATS_EVERY_S, self._stats)

    def write_stats(self, final: bool = False) -> None:
        cores = [driver.core for driver in self.drivers]
        stats = {
            "pid": os.getpid(),
            "final": final,
            "actors": len(cores),
            "with_params": sum(core.version >= 0 for core in cores),
            "have_sent": sum(core.chunks_sent > 0 for core in cores),
            "done": sum(core.done for core in cores),
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
        for sockets in self.sockets:
            sockets.params.close()
            sockets.experience.close(FLUSH_S)  # queued chunks get FLUSH_S to reach a shard, as a stopping actor's do
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
