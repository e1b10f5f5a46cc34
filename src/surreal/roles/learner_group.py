"""A data-parallel learner group (`learner.replicas=K`): K learner processes training one model.

    rank 0 (roles/learner.py's LearnerCore) ──order: the update (on-policy its batch, off-policy its step count)──►
       │                                                                                       ranks 1..K-1
       │  update on its share ◄──── gradients all-reduced every minibatch step ────► update on their share
       └──► params to the ps, checkpoints, metrics.jsonl, evaluation (rank 0 only)

Each rank is started with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK), by
`surreal run` (launch/local.py), by the chart's indexed pods, or by torchrun itself. Rank 0 is the learner as it
is alone, and before every update it sends the other ranks an order over torch.distributed (`GroupOrder` in
proto/wire.py), so every rank runs the same `update` and each computes its 1/K of every minibatch
(algos/replica.py):

- on-policy, the order carries the batch's chunks and the schedule's progress: only rank 0 talks to the replay;
- off-policy, each rank samples its own minibatches. Rank 0's feed keeps the replay-ratio accounting and orders
  `steps` gradient steps; every rank holds its own sample requests at the replay shards (the same client as rank 0,
  for minibatches of its 1/K of `algo.batch_size`: the shards draw each request's transitions afresh, so the ranks'
  minibatches differ), waits for the samples an order needs (bounded by the group's timeout), steps on them, and
  sends their priorities home to their shards. The shards hand the finished episodes only to rank 0's requests
  (`SampleRequest.episodes`), which count them.

No rank but 0 talks to the ps or the run folder: at the group's start rank 0 sends them its learner's whole state
(restored from its checkpoint or fresh), so a group that restarts is one again from rank 0's last checkpoint.

Every collective has the group's timeout (`learner.group_timeout_s`, given to `init_process_group`): a rank lost
makes the others' next collective fail within it, they exit non-zero, and the supervisor restarts the whole group
(rank 0 with `--resume`). Rank 0 sends a heartbeat while it waits for data, so a healthy idle group never times
out. A stop on a signal is rank 0's to decide: it checkpoints and orders `stop` (the other ranks ignore SIGTERM and
follow); at the end of training it orders `finish` before it evaluates.
"""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from surreal.algos import get_algorithm
from surreal.algos.interface import OffPolicyLearner, OnPolicyLearner
from surreal.algos.replica import Replica, bytes_from_rank_0
from surreal.config import ExperimentConfig, algo_config
from surreal.envs import env_spaces, env_steps_bound
from surreal.metrics import RoleMetrics
from surreal.proto.channels import BackgroundBatches, ErrorSink, SampleClient
from surreal.proto.codec import Limits, decode, encode, pack_frames, unpack_frames
from surreal.proto.curve import WireContext
from surreal.proto.wire import GroupOrder, ReplyLayout, decode_group_order, encode_group_order
from surreal.replay.shard import message_limits
from surreal.roles.common import EXIT_STOPPED, count_errors
from surreal.runtime.regimes import Follower, Regime, regime_of
from surreal.settings import Settings

GROUP_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")
STATE_LIMIT_BYTES = 1 << 34  # a learner's state (weights, optimizer moments): far above any MLP's


@dataclass(frozen=True)
class GroupPlace:
    """Where this process stands in its group, from torchrun's variables."""

    rank: int
    size: int
    local_rank: int
    master_addr: str
    master_port: int

    @classmethod
    def from_env(cls, env: Mapping[str, str], replicas: int) -> GroupPlace:
        """The variables, checked against `learner.replicas`; a missing or bad one is one clear error."""
        missing = [name for name in GROUP_VARIABLES if name not in env and name != "LOCAL_RANK"]
        if missing:
            raise ValueError(f"learner.replicas={replicas} needs {', '.join(missing)} (torchrun's variables)")
        try:
            rank, size, port = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["MASTER_PORT"])
            local_rank = int(env.get("LOCAL_RANK", "0"))
        except ValueError as exc:
            raise ValueError(f"RANK, WORLD_SIZE, LOCAL_RANK and MASTER_PORT must be integers ({exc})") from None
        if size != replicas:
            raise ValueError(f"WORLD_SIZE={size} but learner.replicas={replicas}")
        if not 0 <= rank < size or not 0 < port < 65536 or local_rank < 0:
            raise ValueError(f"RANK={rank} of WORLD_SIZE={size}, LOCAL_RANK={local_rank}, MASTER_PORT={port}")
        return cls(rank, size, local_rank, env["MASTER_ADDR"], port)


def group_device(cfg: ExperimentConfig, place: GroupPlace) -> torch.device:
    """A rank's device: cuda:<LOCAL_RANK> where CUDA is asked for (or `auto` finds it), else the CPU. No timing
    race as `device=auto` alone runs: every rank must choose alike."""
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", place.local_rank)


class OrderPace:
    """When rank 0 sends an empty order: once its last one is `heartbeat_s` old (a quarter of the group's timeout,
    5 s at most), so the other ranks' wait for the next stays within the timeout; on `clock` (the simulator's is
    virtual)."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.heartbeat_s, self.clock = min(5.0, timeout_s / 4), clock
        self.sent_at = clock()

    def sent(self) -> None:
        self.sent_at = self.clock()

    @property
    def due(self) -> bool:
        return self.clock() - self.sent_at >= self.heartbeat_s


class RankZeroOrders:
    """What rank 0 tells the other ranks, in terms of its `send` and `pace` (a `LearnerGroup`'s, or the simulator's
    group: sim/group.py): its update orders (sent by `LeaderLearner`), a heartbeat while it waits for data, and the
    end (`stop` after a checkpoint on a signal, `finish` at the end of training)."""

    pace: OrderPace

    def send(self, order: GroupOrder) -> None:
        raise NotImplementedError

    def heartbeat(self) -> None:
        """Rank 0, waiting for data: an empty order when `pace` says one is due."""
        if self.pace.due:
            self.send(GroupOrder("heartbeat"))

    def stop(self) -> None:
        """Rank 0 checkpointed on a signal: the others stop (started again with the group)."""
        self.send(GroupOrder("stop"))

    def finish(self) -> None:
        """Training is done: the others end before rank 0 evaluates."""
        self.send(GroupOrder("finish"))


class LearnerGroup(RankZeroOrders):
    """This process's membership: the process group (gradients: NCCL on CUDA, gloo on the CPU) and a gloo group
    for rank 0's orders, every collective bounded by `timeout_s`. `joined`: this process joined one, and so ends
    through `end_group_process`."""

    joined: ClassVar[bool] = False

    def __init__(
        self,
        place: GroupPlace,
        device: torch.device,
        timeout_s: float,
        limits: Limits,
        layout: ReplyLayout | None = None,
    ) -> None:
        """`layout`: what the chunks of an on-policy order must hold (the algorithm's fields; ranks 1..K-1)."""
        self.place, self.device, self.limits, self.layout = place, device, limits, layout
        timeout = timedelta(seconds=timeout_s)
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend,
            init_method=f"tcp://{place.master_addr}:{place.master_port}",
            rank=place.rank,
            world_size=place.size,
            timeout=timeout,
        )
        LearnerGroup.joined = True
        self.orders = None if backend == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
        self.replica = Replica(place.rank, place.size)
        self.pace = OrderPace(timeout_s)

    @property
    def leader(self) -> bool:
        return self.place.rank == 0

    # -- bytes from rank 0 to every rank ------------------------------------------------------------------

    def _from_rank_0(self, payload: bytes | None, limit: int) -> bytes:
        """`payload` (rank 0's) on every rank (algos/replica.py's `bytes_from_rank_0`), the time noted."""
        out = bytes_from_rank_0(payload, limit, self.orders)
        self.pace.sent()
        return out

    def send(self, order: GroupOrder) -> None:
        """Rank 0: the order to every other rank."""
        message = encode_group_order(order)
        self._from_rank_0(pack_frames(encode(message.kind, message.meta, message.arrays)), self._order_limit())

    def receive_order(self) -> GroupOrder:
        """Ranks 1..K-1: rank 0's next order, checked as any message is (with the group's `layout`, an on-policy
        order's chunks hold the algorithm's fields). Raises (a timeout, a peer gone, a bad order) rather than guess."""
        payload = self._from_rank_0(None, self._order_limit())
        return decode_group_order(decode(unpack_frames(payload, self.limits), self.limits), self.layout)

    def _order_limit(self) -> int:
        return self.limits.max_bytes + (self.limits.max_frames + 1) * 8 + 4

    # -- the learner's state at the group's start ---------------------------------------------------------

    def share_state(self, learner: Any) -> None:
        """Rank 0 sends its learner's state (as a checkpoint holds it); the others load it: identical ranks."""
        if self.leader:
            buffer = io.BytesIO()
            torch.save(learner.state_dict(), buffer)
            self._from_rank_0(buffer.getvalue(), STATE_LIMIT_BYTES)
        else:
            payload = self._from_rank_0(None, STATE_LIMIT_BYTES)
            learner.load_state_dict(torch.load(io.BytesIO(payload), map_location=self.device, weights_only=True))

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def replay_batches(
    cfg: ExperimentConfig,
    ctx: WireContext,
    addresses: list[str],
    layout: ReplyLayout,
    on_error: ErrorSink,
    episodes: bool = True,
) -> BackgroundBatches:
    """A learner's sample requests to the replay shards at `addresses`, on a thread of their own (rank 0's, a learner
    alone's, and off-policy every other rank's, which leaves the episodes to rank 0: `episodes=False`)."""
    return BackgroundBatches(
        lambda: SampleClient(
            ctx,
            addresses,
            message_limits(cfg.replay),
            cfg.learner.prefetch,
            on_error=on_error,
            ready_at=cfg.algo.batch_size,
            max_steps_per_unit=env_steps_bound(cfg),
            layout=layout,
            episodes=episodes,
        ),
        shards=len(addresses),
        batch_size=regime_of(cfg).sample_size,
        depth=cfg.learner.prefetch * len(addresses),
    )


class LeaderLearner:
    """Rank 0's learner: before each update, the same update ordered to the other ranks (the regime says what the
    order carries: `update_order`). Everything else is the algorithm's learner's (parameters, checkpoints,
    statistics)."""

    def __init__(self, learner: OnPolicyLearner | OffPolicyLearner, group: RankZeroOrders, regime: Regime[Any]) -> None:
        self.learner, self.group, self.regime = learner, group, regime

    def update(self, data: Any, arg: Any) -> Any:
        self.group.send(self.regime.update_order(data, arg))
        return self.learner.update(data, arg)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.learner, name)


def make_rank_learner(cfg: ExperimentConfig, spaces: tuple[Any, Any], device: torch.device, group: LearnerGroup) -> Any:
    """The algorithm's learner as this rank of the group."""
    algo = get_algorithm(cfg.algo.name)
    return algo.make_learner(*spaces, algo_config(cfg), device, compile=cfg.learner.compile, replica=group.replica)


class FollowerCore:
    """Ranks 1..K-1's decisions, written once for the process (`follow`) and the simulator's follower node: each of
    rank 0's orders carried out on `work` (the regime's follower) and counted on `metrics`; `stop` and `finish` end
    the rank (`on_order` returns the op), a heartbeat only shows that rank 0 is there."""

    def __init__(self, rank: int, work: Follower, log: logging.Logger, metrics: RoleMetrics) -> None:
        self.rank, self.work, self.log = rank, work, log
        self.m_updates = metrics.counter("learner_group_updates_total", "updates made as a rank of the group")
        self.m_sampled = None
        if work.sampled is not None:
            self.m_sampled = metrics.counter(
                "learner_group_sampled_transitions_total", "transitions this rank sampled from the replay itself"
            )
        self.updates, self.counted = 0, 0

    def on_order(self, order: GroupOrder) -> str | None:
        work = self.work
        if order.op == "update":
            work.update(order)
            self.updates += 1
            self.m_updates.inc()
            if self.m_sampled is not None and work.sampled is not None:
                self.m_sampled.inc(work.sampled - self.counted)
                self.counted = work.sampled
            if self.updates == 1 or self.updates % 100 == 0:
                self.log.info("rank %d: %d updates%s", self.rank, self.updates, _sampled_note(work))
        elif order.op in ("stop", "finish"):
            self.log.info("rank %d: %s after %d updates%s", self.rank, order.op, self.updates, _sampled_note(work))
            return order.op
        return None


def follow(group: LearnerGroup, core: FollowerCore) -> str:
    """Ranks 1..K-1: carry out rank 0's orders until it says `stop` or `finish` (returned). A timeout or a lost peer
    raises out of here: the process exits non-zero and the group starts again."""
    while (end := core.on_order(group.receive_order())) is None:
        pass
    return end


def _sampled_note(work: Follower) -> str:
    return "" if work.sampled is None else f", {work.sampled} transitions sampled from the replay"


def place_from_env(cfg: ExperimentConfig) -> GroupPlace | None:
    """This process's place in the learner group; None for a learner alone (`learner.replicas=1`)."""
    if cfg.learner.replicas == 1:
        return None
    return GroupPlace.from_env(os.environ, cfg.learner.replicas)


def run_follower(
    cfg: ExperimentConfig, place: GroupPlace, settings: Settings, log: logging.Logger, metrics: RoleMetrics
) -> int:
    """The process of rank 1..K-1: join, take rank 0's state, follow its orders (counted on `metrics`, which also
    answer a pod's probes); off-policy, sampling its own minibatches from the replay shards of `settings` (with the
    experiment's CURVE keys, as rank 0). Exit code: 0 after `finish`, EXIT_STOPPED after `stop` (started again with
    the group); a failure raises (the group restarts)."""
    spaces, regime = env_spaces(cfg), regime_of(cfg)
    layout = regime.reply_layout(get_algorithm(cfg.algo.name).chunk_fields(*spaces, algo_config(cfg)))
    device = group_device(cfg, place)
    group = LearnerGroup(place, device, cfg.learner.group_timeout_s, message_limits(cfg.replay), layout)
    log.info(
        "rank %d of %d joined the learner group at %s:%d on %s",
        place.rank,
        place.size,
        place.master_addr,
        place.master_port,
        device,
    )
    learner = make_rank_learner(cfg, spaces, device, group)
    contexts: list[WireContext] = []
    on_error = count_errors(metrics)

    def open_source() -> BackgroundBatches:
        contexts.append(WireContext(settings.curve_keys))
        wire = "CURVE" if contexts[-1].keys is not None else "plaintext (no SURREAL_CURVE_DIR)"
        log.info("rank %d samples its own minibatches from %d replay shard(s) over %s", place.rank, shards, wire)
        return replay_batches(cfg, contexts[-1], settings.sample_addrs, layout, on_error, episodes=False)

    shards = len(settings.replay)
    work = regime.follower(learner, open_source, shards)
    try:
        group.share_state(learner)
        op = follow(group, FollowerCore(place.rank, work, log, metrics))
    finally:
        work.close()
        for ctx in contexts:
            ctx.term()
    group.close()
    return 0 if op == "finish" else EXIT_STOPPED
