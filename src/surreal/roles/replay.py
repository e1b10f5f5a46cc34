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
keeps serving. Torch-free.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

import zmq

from surreal.config import ExperimentConfig
from surreal.metrics import RateGauge, RoleMetrics
from surreal.proto.channels import accepting
from surreal.proto.codec import Limits, ProtocolError, decode
from surreal.proto.wire import (
    EXPERIENCE,
    PRIORITY_UPDATE,
    REPLAY_REQUESTS,
    ErrorReply,
    PriorityUpdate,
    SampleRequest,
    encode_sample_reply,
)
from surreal.replay.shard import ReplayShard, message_limits
from surreal.replay.snapshot import Snapshots, SnapshotStore, Written, restore
from surreal.roles.common import StopFlag
from surreal.roles.server import Server, endpoint, serve_main
from surreal.settings import Settings

DEFER_S = 1.0
MAX_PENDING = 64
MAX_PENDING_PER_PEER = 16  # parked requests one client may hold, so one cannot starve another (learners keep 2)
BURST = 64  # messages taken from one socket per poll: experience floods must let sample requests in

log = logging.getLogger("surreal.replay")


@dataclass
class _Pending:
    identity: bytes
    request: SampleRequest
    deadline: float


class ReplayServer(Server):
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
        self.snapshots = snapshots
        self.experience_limits = accepting(limits, frozenset({EXPERIENCE}))
        self.request_limits = accepting(limits, REPLAY_REQUESTS)
        self.pull = self.bind(ctx, zmq.PULL, experience_bind, "experience", limits, rcvhwm=64)
        self.listen(self.pull, self._on_experience, BURST)
        router = self.bind(ctx, zmq.ROUTER, sample_bind, "sample", limits, sndhwm=64, rcvhwm=256)
        self.serve_requests(router, BURST)
        self.pending: deque[_Pending] = deque()
        m = self.metrics
        self.m_in = m.counter("replay_transitions_in_total", "transitions received")
        self.m_out = m.counter("replay_transitions_out_total", "transitions served in sample replies")
        self.m_dropped = m.counter("replay_transitions_dropped_total", "transitions evicted or refused")
        self.m_size = m.gauge("replay_size", "transitions held")
        self.m_capacity = m.gauge("replay_capacity", "capacity in transitions")
        self.m_pending = m.gauge("replay_pending_requests", "sample requests waiting for data")
        self.rate_in = RateGauge(m.gauge("replay_transitions_in_per_second", "transitions in per second"))
        self.rate_out = RateGauge(m.gauge("replay_transitions_out_per_second", "transitions out per second"))
        self.m_capacity.set(replay.capacity)
        self.m_size.set(replay.stats()["size"])  # a restored shard starts with what its snapshot held
        self.m_snapshots = m.counter("replay_snapshots_total", "snapshots written")
        self.m_snapshot_s = m.gauge("replay_snapshot_seconds", "the last snapshot: seconds from capture to rename")
        self.m_snapshot_pause = m.gauge("replay_snapshot_pause_seconds", "the last snapshot: seconds the loop paused")
        self.m_snapshot_bytes = m.gauge("replay_snapshot_bytes", "the last snapshot's size on disk")
        self.m_snapshot_held = m.gauge("replay_snapshot_transitions", "transitions in the last snapshot")

    # -- the loop -------------------------------------------------------------------------------------

    def poll_once(self, timeout_s: float) -> None:
        super().poll_once(timeout_s)
        self._serve_pending()
        now = time.monotonic()
        self.rate_in.tick(now)
        self.rate_out.tick(now)
        if self.snapshots is not None:
            self._written(self.snapshots.tick(now), "")

    def run(self, stop: StopFlag) -> None:
        """Serve until stopped, then put what the shard holds on disk before the sockets close."""
        super().run(stop)
        if self.snapshots is not None:
            self._written(self.snapshots.final(), "final ")

    def close(self) -> None:
        if self.snapshots is not None:
            self.snapshots.close()
        super().close()

    def describe(self) -> str:
        where = f", snapshots in {self.snapshots.store.directory}" if self.snapshots is not None else ""
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

    # -- handlers -------------------------------------------------------------------------------------

    def _on_experience(self, frames: list[zmq.Frame]) -> None:
        before = self.replay.stats()["dropped"]
        try:
            n = self.replay.add(decode(frames, self.experience_limits))
        except ProtocolError as exc:
            self.drop(exc.reason)
            return
        except (ValueError, TypeError):
            self.drop("bad_chunk")
            return
        stats = self.replay.stats()
        self.m_in.inc(n)
        self.rate_in.add(n)
        self.m_dropped.inc(stats["dropped"] - before)
        self.m_size.set(stats["size"])

    def on_request(self, identity: bytes, frames: list[zmq.Frame]) -> None:
        try:
            message = decode(frames, self.request_limits)
            if message.kind == PRIORITY_UPDATE:
                update = PriorityUpdate.from_message(message)
                self.replay.update_priorities(update.slots, update.ids, update.priorities)
                return
            request = SampleRequest.from_message(message)
        except ProtocolError as exc:
            self._refuse(identity, exc.reason)
            return
        except (ValueError, IndexError):  # slots out of range, priorities for a uniform or FIFO replay
            self._refuse(identity, "bad_priorities")
            return
        # A request that could never be answered with data is refused now, not parked (shard.py says which).
        refusal = self.replay.refusal(request)
        if refusal is not None:
            self._refuse(identity, refusal)
            return
        parked_by_peer = sum(pending.identity == identity for pending in self.pending)
        if len(self.pending) >= MAX_PENDING or parked_by_peer >= MAX_PENDING_PER_PEER:
            self._refuse(identity, "too_many_pending")
            return
        self.pending.append(_Pending(identity, request, time.monotonic() + DEFER_S))

    def _serve(self, pending: _Pending) -> None:
        """Answer one parked request with data, or with an error: the shard learns its layout (and so a reply's
        size) only once data came, so a request parked before then is held to it now. An exception raised by the
        request's own content (a size, a value) answers its peer and is counted; the shard serves on. Any other
        (the storage itself broken) still ends the role."""
        refusal = self.replay.refusal(pending.request)
        if refusal is not None:
            self._refuse(pending.identity, refusal)
            return
        served_before = self.replay.stats()["served"]
        try:
            message = encode_sample_reply(self.replay.sample(pending.request.batch_size))
        except (MemoryError, ValueError, IndexError) as exc:
            log.warning("a sample request failed (%r): answered with an error", exc)
            self._refuse(pending.identity, "serve_failed")
            return
        stats = self.replay.stats()
        served = stats["served"] - served_before
        self.m_out.inc(served)
        self.rate_out.add(served)
        self.m_size.set(stats["size"])
        self.reply(pending.identity, message)

    def _refuse(self, identity: bytes, reason: str) -> None:
        self.drop(reason, identity)
        self.reply(identity, ErrorReply(reason).to_message())

    def _serve_pending(self) -> None:
        """Answer every parked request that data can answer now (in arrival order), and the overdue ones
        with an empty reply; the rest stay parked. No request waits behind one that asks for more."""
        now = time.monotonic()
        waiting: deque[_Pending] = deque()
        for pending in self.pending:
            if self.replay.ready(pending.request.threshold):
                self._serve(pending)
            elif now >= pending.deadline:
                self.reply(pending.identity, encode_sample_reply(self.replay.empty_reply()))
            else:
                waiting.append(pending)
        self.pending = waiting
        self.m_pending.set(len(self.pending))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=["fifo", "uniform", "prioritized"], help="default: replay.mode of the config")
    parser.add_argument("--capacity", type=int, help="transitions; default: replay.capacity of the config")


def snapshot_dir(run_dir: Path, shard: int) -> Path:
    return run_dir / "replay" / f"shard-{shard}"


def open_snapshots(cfg: ExperimentConfig, run_dir: Path, shard: ReplayShard) -> Snapshots:
    """The shard's snapshot folder, after restoring the newest good snapshot in it into `shard`.

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
    store = SnapshotStore(snapshot_dir(run_dir, shard.shard), identity)
    start = time.perf_counter()
    restored = store.restore(lambda state: restore(shard.replay, state), log)
    if restored is None:
        log.info("no replay snapshot to restore in %s: starting empty", store.directory)
    else:
        held = shard.stats()["size"]
        log.info("restored %d transitions from %s in %.2f s", held, restored, time.perf_counter() - start)
        if shard.mode == "fifo":
            store.clear()
    interval_s = 0.0 if shard.mode == "fifo" else cfg.replay.snapshot_interval_s
    return Snapshots(store, shard.replay, interval_s, log)


def main(args: argparse.Namespace) -> int:
    def build(ctx: zmq.Context, settings: Settings, cfg: ExperimentConfig) -> ReplayServer:
        # --mode and --capacity override the config's; the learner decodes replies with the same limits.
        config = replace(cfg.replay, mode=args.mode or cfg.replay.mode, capacity=args.capacity or cfg.replay.capacity)
        limits = message_limits(config)
        # Torch- and gymnasium-free: the env's episode limit is unknown here (ES checks at the learner).
        shard = ReplayShard.of(config, cfg.seed, settings.index, cfg.algo.max_env_steps_per_unit(None))
        snapshots = open_snapshots(cfg, settings.run_dir, shard) if cfg.replay.snapshot_interval_s > 0 else None
        return ReplayServer(
            ctx,
            settings.bind(settings.experience_port),
            settings.bind(settings.sample_port),
            shard,
            limits=limits,
            snapshots=snapshots,
        )

    return serve_main("replay", build)
