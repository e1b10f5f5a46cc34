"""`surreal role replay`: one replay shard.

    experience (PULL) ──► storage + sampler ──► sample replies (ROUTER)
                                      ▲
                    priority updates ─┘ (ROUTER)

With `replay.snapshot_interval_s` > 0 the shard keeps snapshots of what it holds in
`<run dir>/replay/shard-<i>/` (replay/snapshot.py): it restores the newest good one when it starts, writes
one every interval from a thread of its own (transition replays) and a last one when SIGTERM stops it.

A sample request the shard cannot answer yet (FIFO without a chunk, a transition replay holding fewer than
the request's `ready_at`, by default its batch size) is parked and answered as soon as data arrives, or with
an empty reply after `DEFER_S`, so the learner never polls and always hears back. A request the shard could
never serve (more than it holds, a reply over the learner's byte limit: `ReplayShard.refusal`) gets an error
reply at once, and nothing is allocated for it. Malformed messages are counted by reason and dropped; the loop
keeps serving. `ReplayCore` holds these decisions without a socket or a clock; the ZMQ shell `ReplayServer`
translates frames to it and its replies to frames, and serial mode (roles/ports.py `InProcessReplay`) and the
simulator (surreal/sim/) drive the same core. Torch-free.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from pathlib import Path

import zmq

from surreal.config import ExperimentConfig
from surreal.metrics import RateGauge, RoleMetrics
from surreal.proto.channels import accepting
from surreal.proto.codec import Limits, Message, ProtocolError
from surreal.proto.wire import (
    EXPERIENCE,
    PRIORITY_UPDATE,
    REPLAY_REQUESTS,
    EmptyReply,
    ErrorReply,
    FifoReply,
    PriorityUpdate,
    SampleRequest,
    TransitionReply,
    encode_sample_reply,
)
from surreal.replay.shard import ReplayShard, message_limits
from surreal.replay.snapshot import Snapshots, SnapshotStore, Written
from surreal.roles.common import StopFlag
from surreal.roles.parking import FairParking
from surreal.roles.server import Server, endpoint, serve_main
from surreal.runstore import open_mirror, replay_part
from surreal.settings import Settings

DEFER_S = 1.0
MAX_PENDING = 64
# Parked requests one client may hold (learners keep 2). With every place taken, a client holding fewer than another
# still gets one: that other's newest is answered `too_many_pending` (roles/parking.py), so peers that park many
# requests, several of them at their cap, never starve one that parks a few.
MAX_PENDING_PER_PEER = 16
PULL_HWM = 64  # chunks a shard's PULL queues from each actor
BURST = 64  # messages taken from one socket per poll: experience floods must let sample requests in
STOP_DRAIN_S = 0.5  # on SIGTERM, the longest it takes the chunks already at its socket before its last snapshot

log = logging.getLogger("surreal.replay")

Peer = Hashable  # a ROUTER identity, or the driver's name for a learner
ShardAnswer = FifoReply | TransitionReply | EmptyReply | ErrorReply


@dataclass
class _Pending:
    peer: Peer
    request: SampleRequest
    deadline: float


class ReplayCore:
    """One shard's decisions without a socket or a clock: chunks stored, priority updates applied, each sample request
    refused at once (`ReplayShard.refusal`, the fair parking rule: roles/parking.py), parked, or answered by `serve`
    once data can answer it (an empty reply once its deadline passed). `answer(peer, reply)` sends a typed reply;
    `drop(reason, peer)` counts what was refused. Times are the driver's clock, in seconds."""

    def __init__(
        self, shard: ReplayShard, answer: Callable[[Peer, ShardAnswer], None], drop: Callable[[str, Peer | None], None]
    ) -> None:
        self.shard, self.answer, self.drop = shard, answer, drop
        self.pending: deque[_Pending] = deque()
        self.parking: FairParking[Peer] = FairParking(MAX_PENDING, MAX_PENDING_PER_PEER)

    def on_experience(self, message: Message) -> int:
        """Store one experience message's chunk; its transitions, 0 when it was refused (and counted)."""
        try:
            return self.shard.add(message)
        except ProtocolError as exc:
            self.drop(exc.reason, None)
        except (ValueError, TypeError):
            self.drop("bad_chunk", None)
        return 0

    def on_request(self, peer: Peer, message: Message, now: float) -> None:
        """A priority update (applied) or a sample request (refused, or parked for `serve`)."""
        try:
            if message.kind == PRIORITY_UPDATE:
                update = PriorityUpdate.from_message(message)
                self.shard.update_priorities(update.slots, update.ids, update.priorities)
                return
            request = SampleRequest.from_message(message)
        except ProtocolError as exc:
            self._refuse(peer, exc.reason)
            return
        except (ValueError, IndexError):  # slots out of range, priorities for a uniform or FIFO replay
            self._refuse(peer, "bad_priorities")
            return
        refusal = self.shard.refusal(request)
        if refusal is not None:
            self._refuse(peer, refusal)
            return
        park, evict = self.parking.admit(peer)
        if not park:
            self._refuse(peer, "too_many_pending")
            return
        if evict is not None:  # every place taken: the peer holding the most gives up its newest
            self._evict_newest(evict)
        self.pending.append(_Pending(peer, request, now + DEFER_S))
        self.parking.add(peer)

    def _evict_newest(self, peer: Peer) -> None:
        for i in range(len(self.pending) - 1, -1, -1):
            if self.pending[i].peer == peer:
                del self.pending[i]
                self.parking.remove(peer)
                self._refuse(peer, "too_many_pending")
                return

    def serve(self, now: float) -> None:
        """Answer every parked request that data can answer now (in arrival order), and the overdue ones with an
        empty reply; the rest stay parked. No request waits behind one that asks for more."""
        waiting: deque[_Pending] = deque()
        for pending in self.pending:
            if self.shard.ready(pending.request.threshold):
                self.parking.remove(pending.peer)
                self._serve(pending)
            elif now >= pending.deadline:
                self.parking.remove(pending.peer)
                self.answer(pending.peer, self.shard.empty_reply(pending.request.episodes))
            else:
                waiting.append(pending)
        self.pending = waiting

    def next_event(self) -> float | None:
        """The earliest deadline of a parked request (None: none parked)."""
        return min((pending.deadline for pending in self.pending), default=None)

    def _serve(self, pending: _Pending) -> None:
        """Answer one parked request with data, or with an error: a shard without a declared layout learns it (and
        so a reply's size) only once data came, so a request parked before then is held to it now. An exception
        raised by the request's own content (a size, a value) answers its peer and is counted; the shard serves on.
        Any other (the storage itself broken) still ends the role."""
        refusal = self.shard.refusal(pending.request)
        if refusal is not None:
            self._refuse(pending.peer, refusal)
            return
        try:
            reply = self.shard.sample(pending.request.batch_size, pending.request.episodes)
        except (MemoryError, ValueError, IndexError) as exc:
            log.warning("a sample request failed (%r): answered with an error", exc)
            self._refuse(pending.peer, "serve_failed")
            return
        self.answer(pending.peer, reply)

    def _refuse(self, peer: Peer, reason: str) -> None:
        self.drop(reason, peer)
        self.answer(peer, ErrorReply(reason))


class ReplayServer(Server):
    """The ZMQ shell: the actors' PULL and the learner's ROUTER into a `ReplayCore`, its replies out, its metrics and
    snapshots."""

    def __init__(
        self,
        ctx: zmq.Context,
        experience_bind: str,
        sample_bind: str,
        replay: ReplayShard,
        limits: Limits | None = None,
        metrics: RoleMetrics | None = None,
        snapshots: Snapshots | None = None,
    ) -> None:
        super().__init__(metrics or RoleMetrics("replay", replay.shard))
        limits = limits or Limits()
        self.replay = replay
        self.core = ReplayCore(replay, self._answer, self.drop)
        self.snapshots = snapshots
        self.experience_limits = accepting(limits, frozenset({EXPERIENCE}))
        self.pull = self.bind(ctx, zmq.PULL, experience_bind, EXPERIENCE, limits, rcvhwm=PULL_HWM)
        self.listen(self.pull, self._on_experience, BURST)
        router = self.bind(ctx, zmq.ROUTER, sample_bind, "sample", limits, sndhwm=64, rcvhwm=256)
        self.serve_requests(router, BURST, accepting(limits, REPLAY_REQUESTS), self._answer)
        m = self.metrics
        self.m_in = m.counter("replay_transitions_in_total", "transitions received")
        self.chunks_in = 0  # experience messages taken (the shut-down line reports them beside the actors' sent)
        self.m_out = m.counter("replay_transitions_out_total", "transitions served in sample replies")
        self.m_dropped = m.counter("replay_transitions_dropped_total", "transitions evicted or refused")
        self.m_size = m.gauge("replay_size", "transitions held")
        self.m_capacity = m.gauge("replay_capacity", "capacity in transitions")
        self.m_pending = m.gauge("replay_pending_requests", "sample requests waiting for data")
        self.rate_in = RateGauge(m.gauge("replay_transitions_in_per_second", "transitions in per second"))
        self.rate_out = RateGauge(m.gauge("replay_transitions_out_per_second", "transitions out per second"))
        self.m_capacity.set(replay.capacity)
        stats = replay.stats()
        self.m_size.set(stats["size"])  # a restored shard starts with what its snapshot held
        self.served, self.dropped = stats["served"], stats["dropped"]
        self.m_snapshots = m.counter("replay_snapshots_total", "snapshots written")
        self.m_snapshot_s = m.gauge(
            "replay_snapshot_seconds", "the last snapshot: seconds from capture to rename (and upload, with a bucket)"
        )
        self.m_snapshot_pause = m.gauge("replay_snapshot_pause_seconds", "the last snapshot: seconds the loop paused")
        self.m_snapshot_bytes = m.gauge("replay_snapshot_bytes", "the last snapshot's size on disk")
        self.m_snapshot_held = m.gauge("replay_snapshot_transitions", "transitions in the last snapshot")

    # -- the loop -------------------------------------------------------------------------------------

    def poll_once(self, timeout_s: float) -> None:
        super().poll_once(timeout_s)
        now = time.monotonic()
        self.core.serve(now)
        self.m_pending.set(len(self.core.pending))
        self.rate_in.tick(now)
        self.rate_out.tick(now)
        if self.snapshots is not None:
            self._written(self.snapshots.tick(now), "")

    def run(self, stop: StopFlag) -> None:
        """Serve until stopped, take the chunks already at its socket (they would go with the process), then put
        what the shard holds on disk before the sockets close."""
        super().run(stop)
        deadline = time.monotonic() + STOP_DRAIN_S
        while time.monotonic() < deadline and self.pull.poll(0):
            self._on_experience(self.pull.recv_multipart(copy=False))
        if self.snapshots is not None:
            self._written(self.snapshots.final(), "final ")

    def close(self) -> None:
        if self.snapshots is not None:
            self.snapshots.close()
        super().close()

    def final_state(self) -> str:
        return f"{self.chunks_in} chunks received; " + super().final_state()

    def describe(self) -> str:
        where = f", snapshots in {self.snapshots.store.directory}" if self.snapshots is not None else ""
        where += self.replay.storage.describe()
        return (
            f"shard {self.replay.shard} ({self.replay.mode}, capacity {self.replay.capacity}{where}) "
            f"experience {endpoint(self.pull)} sample {endpoint(self.router)}"
        )

    def _written(self, written: Written | None, which: str) -> None:
        if written is None:
            return
        self.m_snapshots.inc()
        self.m_snapshot_s.set(written.total_s)
        self.m_snapshot_pause.set(written.pause_s)
        self.m_snapshot_bytes.set(written.nbytes)
        self.m_snapshot_held.set(written.transitions)
        log.info(
            "%ssnapshot %s: %d transitions, %.1f MB in %.2f s (loop paused %.1f ms)",
            *(which, written.path.name, written.transitions, written.nbytes / 1e6, written.total_s),
            written.pause_s * 1e3,
        )

    # -- translation ----------------------------------------------------------------------------------

    def _on_experience(self, frames: list[zmq.Frame]) -> None:
        message = self.decoded(frames, self.experience_limits)
        n = 0 if message is None else self.core.on_experience(message)
        if n:
            self.chunks_in += 1
            self.m_in.inc(n)
            self.rate_in.add(n)
            self._count()

    def on_request(self, identity: bytes, message: Message) -> None:
        self.core.on_request(identity, message, time.monotonic())

    def _answer(self, peer: Peer, reply: ShardAnswer) -> None:
        message = reply.to_message() if isinstance(reply, ErrorReply) else encode_sample_reply(reply)
        assert isinstance(peer, bytes)  # the core answers the identities this shell gave it
        self.reply(peer, message)
        self._count()

    def _count(self) -> None:
        """The shard's books since the last message into the metrics: served, evicted, held."""
        stats = self.replay.stats()
        served, self.served = stats["served"] - self.served, stats["served"]
        self.m_out.inc(served)
        self.rate_out.add(served)
        self.m_dropped.inc(stats["dropped"] - self.dropped)
        self.dropped = stats["dropped"]
        self.m_size.set(stats["size"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=["fifo", "uniform", "prioritized"], help="default: replay.mode of the config")
    parser.add_argument("--capacity", type=int, help="transitions; default: replay.capacity of the config")


def open_snapshots(
    cfg: ExperimentConfig,
    run_dir: Path,
    shard: ReplayShard,
    run_uri: str | None = None,
    metrics: RoleMetrics | None = None,
) -> Snapshots:
    """The shard's snapshot folder, after restoring the newest good snapshot in it into `shard`. With `run_uri`
    (SURREAL_RUN_URI) the folder is a cache of the bucket's: snapshots it lacks are pulled first (checked whole:
    surreal/runstore.py), and each snapshot written, or cleared, is mirrored there (its pushes on `metrics`).

    A snapshot belongs to one experiment (algorithm, env), one buffer (kind, capacity) and one shard index;
    anything else found there is foreign and set aside. A FIFO snapshot is removed once restored (its chunks
    are served once) and a FIFO writes one only on SIGTERM (replay/snapshot.py says why)."""
    identity = {
        "algo": cfg.algo.name,
        "env": cfg.env.id,
        "env_kwargs": cfg.env.kwargs,
        "mode": shard.mode,
        "capacity": shard.capacity,
        "shard": shard.shard,
    }
    mirror = open_mirror(run_uri, run_dir, replay_part(shard.shard), metrics)
    folder = run_dir / "replay" / f"shard-{shard.shard}"
    store = SnapshotStore(folder, identity, on_change=mirror.push if mirror else None)
    if mirror is not None:
        mirror.pull()
    start = time.perf_counter()
    restored = store.restore(shard.restore, log)
    if restored is None:
        log.info("no replay snapshot to restore in %s: starting empty", store.directory)
    else:
        held = shard.stats()["size"]
        log.info("restored %d transitions from %s in %.2f s", held, restored, time.perf_counter() - start)
        if shard.storage.served_once:
            store.clear()
    return Snapshots(store, shard, cfg.replay.snapshot_interval_s, log)


def main(args: argparse.Namespace) -> int:
    def build(ctx: zmq.Context, settings: Settings, cfg: ExperimentConfig) -> ReplayServer:
        # --mode and --capacity override the config's; the learner decodes replies with the same limits.
        config = replace(cfg.replay, mode=args.mode or cfg.replay.mode, capacity=args.capacity or cfg.replay.capacity)
        limits = message_limits(config)
        # Torch- and gymnasium-free: the env's episode limit is unknown here (ES checks at the learner).
        shard = ReplayShard.of(config, cfg.seed, settings.index, cfg.algo.max_env_steps_per_unit(None))
        if config.mode != "fifo" and config.layout is None:
            log.warning(
                "no replay.layout in the config (surreal run and surreal helm-values resolve it): the first chunk "
                "that arrives lays this shard out, and chunks unlike it are refused"
            )
        metrics = RoleMetrics("replay", shard.shard)
        snapshots = None
        if cfg.replay.snapshot_interval_s > 0:
            snapshots = open_snapshots(cfg, settings.run_dir, shard, settings.run_uri, metrics)
        return ReplayServer(
            ctx,
            settings.bind(settings.experience_port),
            settings.bind(settings.sample_port),
            shard,
            limits=limits,
            metrics=metrics,
            snapshots=snapshots,
        )

    return serve_main("replay", build)
