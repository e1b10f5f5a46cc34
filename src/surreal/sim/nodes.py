"""The roles in the simulator: each node is the loop its role's driver runs on (roles/loop.py), and drives the same
core its ZMQ shell does, on the simulated network; what is left here is what the simulator supplies instead.

    ActorNode      roles/actor.py      ActorDriver, ActorCore          a scripted rollout in place of the envs and the
                                                                       policy (central mode: a step asks a worker)
    ReplayNode     roles/replay.py     ReplayCore                      + replay/shard.py ReplayShard, SnapshotSchedule
    PsNode         roles/ps.py         PsCore
    InferenceNode  roles/inference.py  InferenceDriver, InferenceCore  a forward pass that costs virtual time
    LearnerNode    roles/learner.py    LearnerDriver, LearnerCore      + its feed (runtime/regimes/); a scripted learner
                                                                       whose update costs virtual time

Messages are proto/wire.py's, built by its encoders and read by its validating decoders on each side, as over ZMQ
(only the codec's bytes are skipped). A node's process is started, stopped by SIGTERM and killed by SIGKILL as the
scenario says; what follows an exit is the supervisor's `RestartPolicy` (launch/supervisor.py), as `surreal run`
supervises its roles.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from surreal.config import ExperimentConfig
from surreal.launch.supervisor import MAX_RESTARTS, RestartPolicy
from surreal.metrics import RoleMetrics
from surreal.proto.channels import (
    EXPERIENCE_HWM,
    LOST_AFTER_S,
    NOT_READY_PAUSE_S,
    PUBLISH_HWM,
    REPUBLISH_S,
    SUBSCRIBE_HWM,
    InferenceTurns,
    ShardRequests,
    reply_with_data,
)
from surreal.proto.codec import Message, ProtocolError, flatten
from surreal.proto.wire import (
    ERROR,
    EXPERIENCE,
    FIFO_REPLY,
    NO_VERSION,
    PARAMS,
    TRANSITION_REPLY,
    BlobMeta,
    Chunk,
    ErrorReply,
    Fields,
    FifoReply,
    GroupOrder,
    InferReply,
    InferRequest,
    NotModified,
    Params,
    ParamsRequest,
    PriorityUpdate,
    ReplyLayout,
    SampleReply,
    SampleRequest,
    decode_group_order,
    decode_params_reply,
    encode_group_order,
    encode_params,
    encode_sample_reply,
)
from surreal.replay.shard import ReplayShard
from surreal.replay.snapfile import ShardState
from surreal.replay.snapshot import SnapshotSchedule
from surreal.roles.actor import FLUSH_S, ActorCore, ActorDriver, ActorEvents
from surreal.roles.common import EXIT_STOPPED
from surreal.roles.inference import InferenceCore, InferenceDriver
from surreal.roles.learner import DONE, RECEIVE_TIMEOUT_S, LearnerCore, LearnerDriver
from surreal.roles.learner_group import FollowerCore, LeaderLearner, OrderPace, RankZeroOrders
from surreal.roles.ps import PsCore
from surreal.roles.replay import PULL_HWM, ReplayCore
from surreal.runtime.frame_chunks import FRAMES_FIELD, NEXT_INDEX, OBS_INDEX, pack
from surreal.runtime.regimes import regime_of
from surreal.sim.ledger import ChunkId, Ledger, chunk_id, chunks_in, tag, tagged_field
from surreal.sim.world import Network, Node, World

if TYPE_CHECKING:
    import gymnasium as gym

PUB_HWM = PUBLISH_HWM + SUBSCRIBE_HWM  # the learner's PUB and a ps's SUB: blobs a slow ps may have queued
PUSH_HWM = EXPERIENCE_HWM + PULL_HWM  # an actor's PUSH and a shard's PULL, per actor and shard
STOP_DRAIN_WINDOW_S = 0.005  # a stopping shard takes what reaches its socket this long (then it is empty)
SIGKILL = -9

log = logging.getLogger("surreal.sim")


EPISODE_STEPS = 200  # Pendulum-v1's time limit: the episodes of the scripted rollouts


def steps_bound(cfg: ExperimentConfig) -> int | None:
    """`envs.env_steps_bound` without making an env: the env steps one unit may claim."""
    return cfg.algo.max_env_steps_per_unit(EPISODE_STEPS)


def message_bytes(message: Message) -> int:
    """What a message weighs on a link: its arrays and a header's worth."""
    return 256 + sum(array.nbytes for _, array in flatten(message.arrays))


class Process(Node):
    """A node that is a supervised process: `sigterm`, `sigkill`, and the supervisor's `RestartPolicy` after each
    exit (`surreal run`'s policies: replay and ps always, learner and actors on failure)."""

    restart = "on-failure"

    def __init__(self, world: World, net: Network, name: str, ledger: Ledger) -> None:
        super().__init__(world, net, name)
        self.ledger = ledger
        self.timer_at: float | None = None  # when `arm`'s pending timer fires
        self.policy = RestartPolicy(self.restart, max_restarts=MAX_RESTARTS)  # type: ignore[arg-type]
        self.exits: list[int] = []
        self.group: ProcessGroup | None = None  # the processes it only works with (a learner group's ranks)
        self.generation = -1  # the group's generation it joined
        self.rendezvous_done = False  # that generation formed

    def boot(self, resumed: bool) -> None:
        """What the process does when it starts (a role's `main`)."""
        raise NotImplementedError

    def sigterm(self) -> None:
        self.exit(EXIT_STOPPED)

    def sigkill(self, on_purpose: bool = False) -> None:
        """`on_purpose`: by the supervisor, with its group (no failure of its own)."""
        self.held_lost("killed")
        self.kill()
        self.exit(SIGKILL, killed=True, on_purpose=on_purpose)

    def held_lost(self, why: str) -> None:
        """Tell the ledger which honest chunks die with this process (its memory and its pipes, both ways)."""
        self.ledger.lost([c for message in self.net.held(self) for c in chunks_in(message)], f"{self.name} {why}")

    def exit(self, code: int, killed: bool = False, on_purpose: bool = False) -> None:
        if not killed:
            self.held_lost("exited")  # what its pipes still carried (a linger or a drain that ended)
            self.kill()
        self.exits.append(code)
        exit = self.policy.on_exit(code, on_purpose)
        if self.group is not None:
            self.group.ended(self, exit.takes_group_down)
        if exit.delay_s is not None:
            self.world.after(exit.delay_s, self.restart_process)

    def restart_process(self) -> None:
        self.timer_at = None  # the old incarnation's timer dies with it: the new one arms its own
        self.start()
        self.boot(resumed=True)

    def arm(self, at: float | None) -> None:
        """Wake this incarnation at `at` (`on_timer`), unless a timer already wakes it sooner: one pending at most."""
        if at is not None and (self.timer_at is None or at < self.timer_at):
            self.timer_at = at
            self.world.at(at, self._fire, self.incarnation, at)

    def _fire(self, incarnation: int, at: float) -> None:
        if incarnation != self.incarnation or not self.alive or at != self.timer_at:
            return  # a timer of a dead incarnation, or one a sooner timer replaced
        self.timer_at = None
        self.on_timer()

    def on_timer(self) -> None:
        """What a role's core does when its timer fires."""
        raise NotImplementedError


class CollectiveFailed(Exception):
    """A learner group's collective could not complete: a rank is gone, or stalled past the group's timeout."""


class ProcessGroup:
    """Processes that only work together (a learner group's `size` ranks, `ProcessSpec.group`), as torch.distributed
    and the supervisor treat them. A generation forms once every member has joined since the last one ended (the
    `init_process_group` rendezvous, bounded by `timeout_s`); any member's exit ends it, so a survivor's next
    collective fails; and a failure takes the others down at once to start again with it (`Exit.takes_group_down`,
    the supervisor's own rule)."""

    def __init__(self, size: int, timeout_s: float) -> None:
        self.size, self.timeout_s = size, timeout_s
        self.members: list[Process] = []  # rank order
        self.generation = 0
        self.joined: dict[str, Callable[[], None]] = {}  # this generation's members: what each does once formed
        self.formed = False

    def join(self, node: Process, formed: Callable[[], None]) -> None:
        """`node`'s incarnation joins this generation; once all have, each one's `formed` runs on its loop. Not
        formed within the timeout, its rendezvous fails (exit 1)."""
        node.generation, node.rendezvous_done = self.generation, False
        self.joined[node.name] = formed
        node.at(node.now() + self.timeout_s, lambda: None if node.rendezvous_done else node.exit(1))
        if len(self.joined) == self.size:
            self.formed = True
            for member in self.members:
                member.rendezvous_done = True
                member.at(member.now(), self.joined[member.name])

    def holds(self, node: Process) -> bool:
        """`node` is in the generation that formed last, and it still stands."""
        return self.formed and node.generation == self.generation

    def ended(self, node: Process, takes_down: bool) -> None:
        if node.generation == self.generation:
            self.generation, self.formed = self.generation + 1, False
            self.joined.clear()
        if takes_down:
            for peer in self.members:
                if peer is not node and peer.alive:
                    peer.sigkill(on_purpose=True)

    def wait_s(self, node: Process) -> float:
        """How long `node`'s collective waits for the others (busy with their share, or paused); raises
        `CollectiveFailed` where one is gone, belongs to no generation of `node`'s, or would pass the timeout."""
        if not self.holds(node):
            raise CollectiveFailed(f"{node.name}'s group ended")
        now, wait = node.now(), 0.0
        for peer in self.members:
            if peer is not node:
                if not peer.alive or peer.generation != self.generation:
                    raise CollectiveFailed(f"{peer.name} is gone")
                wait = max(wait, peer.paused_until - now, peer.busy_until - now)
        if wait > self.timeout_s:
            raise CollectiveFailed(f"no answer within {self.timeout_s:g} s")
        return wait


@dataclass(frozen=True)
class ServiceCosts:
    """Seconds of a service's own time per event (sim/capacity.py sets them from measured rates; none by default):
    a transition into a shard and one out of it, a ps answer with the blob and one "not modified"."""

    ingest_s: float = 0.0
    egress_s: float = 0.0
    blob_s: float = 0.0
    not_modified_s: float = 0.0


# -- replay ----------------------------------------------------------------------------------------------


class ReplayNode(Process):
    restart = "always"

    def __init__(
        self,
        world: World,
        net: Network,
        index: int,
        cfg: ExperimentConfig,
        ledger: Ledger,
        snapshot_interval_s: float,
        costs: ServiceCosts = ServiceCosts(),
    ) -> None:
        super().__init__(world, net, f"replay-{index}", ledger)
        self.index, self.cfg, self.snapshot_interval_s, self.costs = index, cfg, snapshot_interval_s, costs
        self.egress_work_s = 0.0  # the part of `work_s` spent on samples out
        self.snapshot: ShardState | None = None  # what its disk holds
        self.boot(resumed=False)

    def boot(self, resumed: bool) -> None:
        cfg = self.cfg
        self.shard = ReplayShard.of(cfg.replay, cfg.seed + self.incarnation, self.index, steps_bound(cfg))
        if self.snapshot is not None:
            self.shard.restore(self.snapshot)
            if self.shard.storage.served_once:
                self.snapshot = None  # a FIFO's snapshot is removed once restored
        self.core = ReplayCore(self.shard, self._answer, lambda reason, peer: None)
        self.schedule = SnapshotSchedule.of(self.shard, self.snapshot_interval_s, self.world.now)
        self.stopping = False
        self._arm()

    def receive(self, src: Node, message: Message) -> None:
        if message.kind == EXPERIENCE:
            self.spend(self.core.on_experience(message) * self.costs.ingest_s)
        elif not self.stopping:  # a stopping shard serves no more (the requests go with it)
            self.core.on_request(src.name, message, self.world.now)
        self.core.serve(self.world.now)
        self._arm()

    def _answer(self, peer: Any, reply: Any) -> None:
        message = reply.to_message() if isinstance(reply, ErrorReply) else encode_sample_reply(reply)
        if message.kind in (FIFO_REPLY, TRANSITION_REPLY):  # the learner counts a data reply's report
            self.ledger.reports_sent[id(message)] = (self.index, self.incarnation, reply.report.env_steps)
            out = sum(c.size for c in reply.chunks) if message.kind == FIFO_REPLY else len(reply.transitions["slots"])
            self.spend(out * self.costs.egress_s)
            self.egress_work_s += out * self.costs.egress_s
        dst = self.net.nodes[peer]
        self.send(dst, message, message_bytes(message) if dst.bandwidth or self.bandwidth else 0)

    def _arm(self) -> None:
        """A timer for the next parked request's deadline or the next periodic snapshot."""
        at = self.core.next_event()
        if self.schedule.interval_s > 0:
            at = self.schedule.due if at is None else min(at, self.schedule.due)
        self.arm(at)

    def on_timer(self) -> None:
        now = self.world.now
        self.core.serve(now)
        if self.schedule.periodic(now):
            self._take_snapshot()
        self._arm()

    def _take_snapshot(self) -> None:
        captured = self.schedule.take(self.shard, guard=self.shard.capacity)
        if captured is not None:
            self.snapshot = captured.joined()

    def held_lost(self, why: str) -> None:
        super().held_lost(why)
        self.ledger.lost(fifo_chunks(self.shard), f"{self.name} {why}")

    def sigterm(self) -> None:
        """It stops serving, takes what reaches its socket for STOP_DRAIN_WINDOW_S (roles/replay.py drains what is
        queued there), writes its last snapshot (a FIFO's only one) and exits."""
        if self.alive and not self.stopping:
            self.stopping = True
            self.world.after(STOP_DRAIN_WINDOW_S, self._stopped, self.incarnation)

    def _stopped(self, incarnation: int) -> None:
        if incarnation == self.incarnation and self.alive:
            self._take_snapshot()
            super().sigterm()


def fifo_chunks(shard: ReplayShard) -> list[ChunkId]:
    """The honest chunks a FIFO shard holds (none for a transition replay)."""
    held = getattr(shard.storage, "items", ())  # a FIFO's
    return [c for item in held if (c := chunk_id(item.chunk.arrays)) is not None]


# -- ps -------------------------------------------------------------------------------------------------


class PsNode(Process):
    restart = "always"

    def __init__(
        self, world: World, net: Network, index: int, ledger: Ledger, costs: ServiceCosts = ServiceCosts()
    ) -> None:
        super().__init__(world, net, f"ps-{index}", ledger)
        self.learners: list[LearnerNode] = []
        self.costs = costs
        self.boot(resumed=False)

    def boot(self, resumed: bool) -> None:
        self.core: PsCore[Message] = PsCore(self._answer, lambda reason, peer: None)
        self.restarted = True
        self.blob_at = 0.0  # when the held blob came
        self.asked: dict[str, list[tuple[float, ParamsRequest]]] = {}  # honest actors' requests unanswered: hold ends
        for learner in self.learners:  # a (re)subscribing ps gets the latest blob at once (XPUB_VERBOSE)
            learner.params_out.joined(self)

    def receive(self, src: Node, message: Message) -> None:
        now = self.world.now
        if message.kind == PARAMS:
            if self.core.on_blob(message, message, now):
                self.ledger.ps_accepted(self.name, self.core.version, self.core.incarnation, self.restarted, now)
                self.restarted, self.blob_at = False, now
        else:
            if isinstance(src, ActorNode):
                request = ParamsRequest.from_message(message)
                self.asked.setdefault(src.name, []).append((now + request.hold_ms / 1000, request))
            self.core.on_request(src.name, message, now)
        self.arm(self.core.next_event())

    def on_timer(self) -> None:
        self.core.on_time(self.world.now)
        next_at = self.core.next_event()
        self.arm(None if next_at is None else max(next_at, self.world.now))

    def _answer(self, peer: Any, reply: Message | NotModified | ErrorReply) -> None:
        asked = self.asked.get(peer)
        if asked:  # an actor's fetch that timed out left its request here: which one this answers is not said
            if isinstance(reply, Message):
                held, quiet_s = (self.core.version, self.core.incarnation), self.world.now - self.blob_at
                asked.remove(self.ledger.woke(peer, asked, *held, quiet_s))
            else:
                asked.remove(min(asked, key=lambda entry: entry[0]))  # "not modified": the hold that ended first
        message = reply if isinstance(reply, Message) else reply.to_message()
        self.spend(self.costs.blob_s if isinstance(reply, Message) else self.costs.not_modified_s)
        dst = self.net.nodes[peer]
        self.send(dst, message, message_bytes(message) if dst.bandwidth or self.bandwidth else 0)


# -- inference workers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InferenceCosts:
    """Virtual seconds a worker's forward pass takes: a fixed part and one per observation; `slow` multiplies them
    (a slow worker: a loaded GPU, a noisy neighbour)."""

    batch_s: float = 0.001
    per_env_s: float = 0.00002
    slow: float = 1.0


class InferenceNode(Process):
    """An inference worker: `InferenceDriver` (roles/inference.py) on this node's loop; its policy is a script
    whose forward pass costs `InferenceCosts` (the node is busy meanwhile: requests queue), its ps requests go to the
    next ps replica up."""

    restart = "always"

    def __init__(
        self,
        world: World,
        net: Network,
        index: int,
        cfg: ExperimentConfig,
        ps: Sequence[Node],
        ledger: Ledger,
        obs_dim: int,
        act_dim: int,
        costs: InferenceCosts,
    ) -> None:
        super().__init__(world, net, f"inference-{index}", ledger)
        self.cfg, self.ps, self.obs_dim, self.act_dim, self.costs = cfg, ps, obs_dim, act_dim, costs
        self.boot(resumed=False)

    def boot(self, resumed: bool) -> None:
        self.next_ps = self.world.rng.randrange(len(self.ps))
        core = InferenceCore.of(self.cfg, self._act, self._answer, self._ask, lambda params: None)
        self.driver = InferenceDriver(core, self)
        self.driver.start()

    def _act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        costs = self.costs
        self.spend(costs.slow * (costs.batch_s + costs.per_env_s * len(obs)))
        actions = np.zeros((len(obs), self.act_dim), np.float32)
        return actions, {"actions": actions, "logprobs": np.zeros(len(obs), np.float32)}

    def _answer(self, peer: Any, reply: Any) -> None:
        self.send(self.net.nodes[peer], reply.to_message())

    def _ask(self, request: ParamsRequest) -> bool:
        replicas = len(self.ps)
        for i in range(replicas):
            ps = self.ps[(self.next_ps + i) % replicas]
            if ps.alive:
                self.next_ps = (self.next_ps + i + 1) % replicas
                return self.net.send(self, ps, request.to_message())
        return False

    def receive(self, src: Node, message: Message) -> None:
        if src in self.ps:
            with contextlib.suppress(ProtocolError):
                self.driver.on_reply(decode_params_reply(message))
            return
        try:
            request = InferRequest.from_message(message, self.obs_dim)
        except ProtocolError:
            return
        self.driver.on_request(src.name, request)

    def disconnected(self, peer: Node) -> None:
        if peer in self.ps:
            self.driver.on_disconnect()


# -- learner --------------------------------------------------------------------------------------------


@dataclass
class Costs:
    """Virtual seconds a learner's work takes: an on-policy update per unit of its batch, an off-policy gradient
    step, plus a fixed part; `slow` multiplies them (a slow learner)."""

    update_s: float = 0.2
    per_unit_s: float = 0.0
    gradient_step_s: float = 0.004
    slow: float = 1.0

    def of_update(self, batch: Any, steps: int, ranks: int) -> float:
        """An update's seconds on one of `ranks` (a learner group's ranks each compute their share): a batch of
        whole chunks (the versions regime's), or `steps` gradient steps on a sample."""
        if isinstance(batch, list):
            work = self.update_s + self.per_unit_s * sum(chunk.size for chunk in batch)
        else:
            work = self.update_s + self.gradient_step_s * steps
        return self.slow * work / ranks


class ScriptedLearner:
    """The algorithm's learner as the simulator runs it: what the feeds and `LearnerCore` call (`update`, `params`,
    `state_dict`), the update learning nothing but costing virtual time, and telling the ledger what it learned."""

    def __init__(self, node: LearnerNode, params: dict[str, Any]) -> None:
        self.node, self._params = node, params
        self.updates = 0

    def update(self, batch: Any, arg: Any) -> Any:
        ledger, now, counters = self.node.ledger, self.node.world.now, self.node.core.counters
        self.updates += 1
        if isinstance(batch, list):  # the versions regime's batch of whole chunks, not a sample's arrays
            ledger.chunks_learned(batch, counters.version, now)
        else:
            ledger.updates_learned(counters.updates + int(arg), counters.env_steps, now)
            ledger.transitions_learned += len(batch["slots"])
        return scripted_update(self.node, batch, arg)

    def params(self) -> dict[str, Any]:
        return self._params

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.updates = int(state["updates"])


def scripted_update(node: LearnerNode | FollowerNode, batch: Any, arg: Any) -> Any:
    """A scripted update on `node` (any rank): its share of the update's virtual time, and what the algorithm's
    update returns: a batch of chunks one loss; a sample `arg` steps' losses and its transitions' new priorities (a
    prioritized replay's updates)."""
    node.spend(node.costs.of_update(batch, int(arg), node.cfg.learner.replicas))
    if isinstance(batch, list):
        return {"loss": 0.0}
    return [{"loss": 0.0}] * int(arg), 0.5 + 0.5 * np.asarray(batch["rewards"], np.float64).reshape(-1) ** 2


class SimBatches:
    """The learner's batches-in port on the simulated network: channels.SampleClient's books (`ShardRequests`,
    `reply_with_data`) and BackgroundBatches' queue of `depth` replies, filled as replies arrive. `episodes`: rank
    0's requests (or a learner alone's), whose replies hand it the shards' episodes and env steps; a later rank's
    leave them."""

    def __init__(
        self, node: LearnerNode | FollowerNode, shards: list[Node], layout: ReplyLayout, episodes: bool = True
    ) -> None:
        cfg = node.cfg
        self.node, self.shard_nodes, self.layout, self.episodes = node, shards, layout, episodes
        self.ready_at = cfg.algo.batch_size
        self.books = [ShardRequests(cfg.learner.prefetch, LOST_AFTER_S) for _ in shards]
        self.index = {shard.name: i for i, shard in enumerate(shards)}
        self.depth = cfg.learner.prefetch * len(shards)
        self.batch_size = regime_of(cfg).sample_size
        self.replies: deque[SampleReply] = deque()
        self.reports: dict[int, tuple[int, int, int]] = {}  # id(reply) -> (shard, its incarnation, env steps)
        self.asking = True
        self.errors: dict[str, int] = {}

    @property
    def shards(self) -> int:
        return len(self.shard_nodes)

    @property
    def outstanding(self) -> int:
        return sum(books.inflight for books in self.books)

    def top_up(self) -> None:
        if not self.asking or len(self.replies) >= self.depth:
            return
        node, now = self.node, self.node.world.now
        request = SampleRequest(self.batch_size, self.ready_at, self.episodes).to_message()
        for shard, books in zip(self.shard_nodes, self.books, strict=True):
            for _ in range(books.wanted(now)):
                if not node.net.connected(node, shard):
                    break  # not connected now: asked again at the next call
                node.send(shard, request)
                books.sent(now)

    def take(self, src: Node, message: Message) -> None:
        i = self.index[src.name]
        self.books[i].replied(self.node.world.now)
        if message.kind == ERROR:  # the ledger keeps the shard's reason (too_many_pending, ...)
            self.node.ledger.learner_refused[ErrorReply.from_message(message).reason[:64]] += 1
        reply = reply_with_data(message, i, self._error, steps_bound(self.node.cfg), self.layout)
        report = self.node.ledger.reports_sent.pop(id(message), None) if self.episodes else None
        if reply is not None:
            self.node.ledger.learner_data_replies += 1
            if report is not None:
                self.reports[id(reply)] = report
            self.replies.append(reply)
        self.top_up()

    def _error(self, reason: str) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1

    def stop_asking(self) -> None:
        self.asking = False

    def next(self, batch_size: int, timeout_s: float) -> SampleReply | None:
        del batch_size, timeout_s
        self.top_up()
        return self._taken(self.replies.popleft()) if self.replies else None

    def _taken(self, reply: SampleReply) -> SampleReply:
        """The feed takes `reply`: the ledger hears what its shard reported (what the feed counts)."""
        report = self.reports.pop(id(reply), None)
        if report is not None:
            self.node.ledger.shard_reported(*report)
        return reply

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        self.node.send(self.shard_nodes[shard], PriorityUpdate(slots, ids, priorities).to_message())

    def close(self) -> None:
        self.stop_asking()

    def drain(self, timeout_s: float) -> list[SampleReply]:
        del timeout_s  # the node waited (virtual time) for what was on its way before it stopped
        taken, self.replies = [self._taken(reply) for reply in self.replies], deque()
        return taken


class SimParamsOut:
    """The learner's parameters-out port: channels.ParamPublisher's PUB to every ps (a full pipe drops a blob),
    its latest blob again every REPUBLISH_S and to every ps that (re)subscribes. A blob leaves when the update that
    made it ends."""

    def __init__(self, node: LearnerNode, ps: list[PsNode]) -> None:
        self.node, self.ps = node, ps
        self.latest: Message | None = None
        self.sent_at = -math.inf

    def publish(self, blob: BlobMeta, arrays: dict[str, Any]) -> None:
        self.latest = encode_params(Params(blob, arrays))
        self.node.ledger.blob(blob, self.node.world.now)
        self.node.world.at(self.node.busy_until, self._send_all, self.latest, self.node.incarnation)

    def _send_all(self, message: Message, incarnation: int) -> None:
        if incarnation != self.node.incarnation or not self.node.alive:
            return
        self.sent_at = self.node.world.now
        for ps in self.ps:
            self.node.send(ps, message)

    def service(self) -> None:
        if self.latest is not None and self.node.world.now - self.sent_at >= REPUBLISH_S:
            self._send_all(self.latest, self.node.incarnation)

    def joined(self, ps: PsNode) -> None:
        if self.latest is not None and self.node.alive:
            self.node.send(ps, self.latest)


class LearnerNode(Process):
    """A learner: `LearnerDriver` (roles/learner.py) on this node's loop, its core on the simulated ports with a
    scripted learner whose updates cost virtual time (its next step waits for them), no evaluation at the end. A
    SIGTERM drains and checkpoints as the process does; the supervisor restarts it with `--resume`."""

    def __init__(
        self,
        world: World,
        net: Network,
        cfg: ExperimentConfig,
        run_dir: Path,
        spaces: tuple[gym.Space, gym.Space],
        fields: Fields,
        params: dict[str, Any],
        shards: list[Node],
        ps: list[PsNode],
        ledger: Ledger,
        costs: Costs,
        group: ProcessGroup | None = None,
    ) -> None:
        """`group`: rank 0 of this learner group (`learner.replicas` > 1; the other ranks are `FollowerNode`s)."""
        super().__init__(world, net, "learner", ledger)
        self.cfg, self.run_dir, self.spaces, self.params, self.costs = cfg, run_dir, spaces, params, costs
        self.group = group
        if group is not None:
            group.members.append(self)
        self.shard_nodes, self.ps = shards, ps
        self.layout = regime_of(cfg).reply_layout(fields)
        for p in ps:
            p.learners.append(self)
            net.pipe(self, p, cap=PUB_HWM, lossy=True)
        self.updates_seen = 0
        self.released = True  # no core yet
        self.progressed: Callable[[], None] | None = None  # told after each step that moved the counters on
        self.boot(resumed=False)

    @property
    def finished(self) -> bool:
        return self.driver.state == DONE

    def boot(self, resumed: bool) -> None:
        self.release()  # a killed incarnation's writers, which its process would have taken with it
        cfg = self.cfg
        self.batches = SimBatches(self, self.shard_nodes, self.layout)
        self.params_out = SimParamsOut(self, self.ps)
        self.scripted = ScriptedLearner(self, self.params)
        self.followers = None if self.group is None else SimFollowers(self, self.group)
        learner: Any = self.scripted
        if self.followers is not None:  # rank 0: each update ordered to the other ranks first
            learner = LeaderLearner(self.scripted, self.followers, regime_of(cfg))
        metrics = RoleMetrics("learner", 0)
        self.core = LearnerCore(
            cfg, self.run_dir, self.batches, self.params_out, metrics, resumed, log, self.spaces,
            algo_learner=learner, clock=self.world.clock,
        )  # fmt: skip
        self.core.incarnation = f"learner-{self.incarnation}"  # a seed replays exactly: no random names
        self.core.on_checkpoint = self._checkpointed
        self.released, self.failing, self.formed, self.stop_asked = False, False, self.group is None, False
        c = self.core.counters
        if not resumed:
            self._checkpointed()  # the fresh learner's first checkpoint
        elif self.exits and self.exits[-1] not in (0, EXIT_STOPPED):  # no checkpoint of its own at its end
            killed = f"learner-{self.incarnation - 1}"
            self.updates_seen = self.ledger.rolled_back(killed, c.updates, c.env_steps, self.world.now)
        self.ledger.updates_written(self.updates_seen, c.updates, self.world.now)
        self.updates_at_start = c.updates  # a group's ranks make every update after it with rank 0
        self.driver = LearnerDriver(
            self.core, self, idle_s=RECEIVE_TIMEOUT_S, step_turns=True, evaluate=None, linger_s=math.inf,
            service_s=REPUBLISH_S, followers=self.followers, on_step=self._stepped, on_end=self._ended,
        )  # fmt: skip
        if self.group is None:
            self.driver.start()
        else:  # its driver starts once the group has formed (its rendezvous)
            self.group.join(self, self._formed)

    def _formed(self) -> None:
        self.formed = True
        self.driver.start()
        if self.stop_asked:
            self.driver.stop()

    def _checkpointed(self) -> None:
        c = self.core.counters
        self.ledger.checkpointed(c.updates, c.env_steps, c.version)

    def at(self, when: float, fn: Callable[[], None]) -> None:
        """The loop, where a collective that fails in `fn` (`CollectiveFailed`: a learner group's rank gone or
        stalled) ends the process as its exception does, once the group's timeout has passed."""
        super().at(when, lambda: self._unless_failing(fn))

    def _unless_failing(self, fn: Callable[[], None]) -> None:
        if self.failing:
            return
        try:
            fn()
        except CollectiveFailed as exc:
            assert self.group is not None
            log.debug("t=%.1f: %s: %s", self.world.now, self.name, exc)
            self.failing = True
            self.world.at(self.world.now + self.group.timeout_s, self._failed, self.incarnation)

    def _failed(self, incarnation: int) -> None:
        if incarnation == self.incarnation and self.alive:
            self.exit(1)

    def _stepped(self, stepped: bool) -> None:
        if stepped:
            self._note_counters()

    def _ended(self, finished: bool) -> None:
        if not finished:  # stopped: checkpointed, its process exits (a group's rank 0 once its `stop` is delivered)
            self._note_counters()
            self.release()
            if self.group is None:
                self.exit(EXIT_STOPPED)
            else:
                super().at(self.world.now, lambda: self.exit(EXIT_STOPPED))

    def _note_counters(self) -> None:
        c = self.core.counters
        self.ledger.updates_written(self.updates_seen, c.updates, self.world.now)
        self.updates_seen = c.updates
        self.ledger.learner_counted = c.env_steps
        if self.progressed is not None:
            self.progressed()

    def disconnected(self, peer: Node) -> None:
        i = self.batches.index.get(peer.name)
        if i is not None:
            self.batches.books[i].disconnected()  # SampleClient's monitor socket

    def receive(self, src: Node, message: Message) -> None:
        self.batches.take(src, message)
        if self.formed:
            self.driver.wake()

    def sigterm(self) -> None:
        """A preemption: the update in progress ends, the replies on their way are taken, a checkpoint, exit (a
        group's rank 0 still at its rendezvous: once the group has formed)."""
        if self.alive:
            self.stop_asked = True
            if self.formed:
                self.driver.stop()

    def release(self) -> None:
        """Close the core's run-folder writers (the metrics file, TensorBoard's thread) once: on a stop, when the
        next incarnation starts, and at the end of a run that never stopped it."""
        if not self.released:
            self.released = True
            self.core.close()

    def held_chunks(self) -> list[ChunkId]:
        """The honest chunks taken from the shards and not learned from yet: in the port's queue and the feed's."""
        chunks = [chunk for reply in self.batches.replies if isinstance(reply, FifoReply) for chunk in reply.chunks]
        chunks += list(getattr(self.core.feed, "chunks", ()))  # an on-policy feed's queue (none off-policy)
        return [c for chunk in chunks if (c := chunk_id(chunk.arrays)) is not None]

    def held_lost(self, why: str) -> None:
        super().held_lost(why)
        self.ledger.lost(self.held_chunks(), f"learner {why}")


class SimFollowers(RankZeroOrders):
    """Rank 0's orders to the other ranks of its group (`LearnerGroup`'s, on the simulated network): each a
    broadcast that waits for every rank to be free to take it (`ProcessGroup.wait_s`: one busy with its share of
    the last update, or paused) and returns once it has reached them; a rank gone or stalled past the timeout
    fails it (`CollectiveFailed`)."""

    def __init__(self, node: LearnerNode, group: ProcessGroup) -> None:
        self.node, self.group = node, group
        self.pace = OrderPace(group.timeout_s, node.world.clock)

    def send(self, order: GroupOrder) -> None:
        node = self.node
        node.spend(self.group.wait_s(node))
        message = encode_group_order(order)
        ranks = self.group.members[1:]
        for rank in ranks:
            node.send(rank, message, message_bytes(message) if node.bandwidth or rank.bandwidth else 0)
        node.spend(max(node.latency_s + rank.latency_s for rank in ranks) + node.net.jitter_s)  # until it arrives
        self.pace.sent()


class ScriptedRank:
    """A later rank's learner as the simulator runs it: its share of rank 0's update, costing virtual time.
    `updates`: counted as rank 0's counters count them (a batch of chunks one, a sample's gradient steps each)."""

    def __init__(self, node: FollowerNode) -> None:
        self.node = node
        self.updates = 0

    def update(self, batch: Any, arg: Any) -> Any:
        self.updates += 1 if isinstance(batch, list) else int(arg)
        return scripted_update(self.node, batch, arg)


class FollowerNode(Process):
    """Rank `rank` (1..K-1) of a learner group: `FollowerCore` (roles/learner_group.py) with the regime's follower
    on a `ScriptedRank`; rank 0's orders come over its pipe, and in the replay-ratio regime its own samples from the
    shards (`SimBatches` leaving the episodes to rank 0). An update order waits until its samples are here
    (`Follower.ready`). It ends with rank 0's `stop` (EXIT_STOPPED, started again at once) or `finish` (0), and
    fails (exit 1) as its process's collective times out: no order within the group's timeout of its last (rank 0
    gone or stalled), or no samples for one."""

    def __init__(
        self,
        world: World,
        net: Network,
        rank: int,
        cfg: ExperimentConfig,
        group: ProcessGroup,
        shards: list[Node],
        layout: ReplyLayout,
        costs: Costs,
        ledger: Ledger,
    ) -> None:
        super().__init__(world, net, f"learner-{rank}", ledger)
        self.rank, self.cfg, self.shard_nodes, self.layout, self.costs = rank, cfg, shards, layout, costs
        self.group = group
        group.members.append(self)
        self.boot(resumed=False)

    def boot(self, resumed: bool) -> None:
        del resumed  # it holds no state of its own: the group starts from rank 0's
        self.batches: SimBatches | None = None
        self.scripted = ScriptedRank(self)
        work = regime_of(self.cfg).follower(self.scripted, self._open_batches, len(self.shard_nodes))
        self.core = FollowerCore(self.rank, work, log, RoleMetrics("learner", self.rank))
        self.orders: deque[GroupOrder] = deque()
        self.waiting_since = math.inf  # for rank 0's next order (or, one held, its samples)
        assert self.group is not None
        self.group.join(self, self._wait)

    def _open_batches(self) -> SimBatches:
        self.batches = SimBatches(self, self.shard_nodes, self.layout, episodes=False)
        self.batches.top_up()
        return self.batches

    def _wait(self) -> None:
        """Wait for rank 0's next order, or the samples of the one held, from the end of its own work."""
        self.waiting_since = max(self.world.now, self.busy_until)
        self.arm(self.waiting_since + self.cfg.learner.group_timeout_s)

    def receive(self, src: Node, message: Message) -> None:
        if self.batches is not None and src in self.shard_nodes:
            self.batches.take(src, message)
        else:
            self.orders.append(decode_group_order(message, self.layout))
            self._wait()  # for it to be done (its samples), or for the next
        self._advance()

    def _advance(self) -> None:
        while self.orders:
            order = self.orders[0]
            if order.op == "update" and not self.core.work.ready(order):
                return  # its samples are on their way (`_wait` since the last order times them)
            self.orders.popleft()
            end = self.core.on_order(order)
            if end is not None:
                self.core.work.close()
                self.exit(0 if end == "finish" else EXIT_STOPPED)
                return
            self._wait()

    def disconnected(self, peer: Node) -> None:
        if self.batches is not None and peer in self.shard_nodes:
            self.batches.books[self.batches.index[peer.name]].disconnected()

    def on_timer(self) -> None:
        due = max(self.waiting_since + self.cfg.learner.group_timeout_s, self.busy_until, self.paused_until)
        if self.world.now < due or self.inbox:
            self.arm(max(due, self.world.now + RECEIVE_TIMEOUT_S))
        else:
            self.exit(1)  # its collective timed out


# -- actors ---------------------------------------------------------------------------------------------


class ScriptedChunks:
    """Chunks as the algorithm's collector makes them (its `chunk_fields`: names, dtypes, shapes), `T` steps of `K`
    envs (ES: one row of `K` pairs, each two whole episodes), episodes of EPISODE_STEPS ending inside them; each
    tagged (ledger.py `tag`) so its fate can be followed. `env_steps`: a chunk's steps.

    Image observations (fields with frames and indices, runtime/frame_chunks.py) are packed as an actor packs them:
    `pixel_rollout`'s stacks of distinct frames through `pack`, so a chunk carries each frame once, the S-1 frames
    before it and one more per episode end, exactly the frames and indices the real actor sends for the same
    episodes. The packing depends on where the chunk's steps fall in their episodes only, so it is done once per
    phase (`first step % EPISODE_STEPS`)."""

    def __init__(self, fields: Fields, steps: int, envs: int, pairs: bool) -> None:
        self.T, self.K, self.pairs = (1, envs, True) if pairs else (steps, envs, False)
        self.env_steps = 2 * EPISODE_STEPS * envs if pairs else steps * envs
        self.fields = fields
        self.pixels = FRAMES_FIELD in fields
        frames = (FRAMES_FIELD, OBS_INDEX, NEXT_INDEX) if self.pixels else ()  # what `pack` makes (`_frames`)
        plain = {name: f for name, f in fields.items() if name not in frames}
        self.template = {name: np.full((self.T, envs, *f.shape), f.low or 0, f.dtype) for name, f in plain.items()}
        self.packed: dict[int, dict[str, Any]] = {}  # a phase's frames and indices (PER_CHUNK and the index fields)
        self.tagged = tagged_field(fields)

    def chunk(self, actor: int, serial: int, version: int) -> Chunk:
        arrays = dict(self.template)
        if self.pixels:
            arrays.update(self._frames(serial * self.T % EPISODE_STEPS))
        arrays[self.tagged] = self.template[self.tagged].copy()
        tag(arrays, actor, serial)
        if self.pairs:
            return Chunk(arrays, version, actor, steps=self.env_steps)
        first, last = serial * self.T, (serial + 1) * self.T
        episodes = (last // EPISODE_STEPS - first // EPISODE_STEPS) * self.K
        return Chunk(arrays, version, actor, [-1.0] * episodes, [EPISODE_STEPS] * episodes)

    def _frames(self, phase: int) -> dict[str, Any]:
        if phase not in self.packed:
            obs, next_obs = pixel_rollout(self.fields, self.T, self.K, phase)
            frame = self.fields[FRAMES_FIELD].shape
            self.packed[phase] = pack({"obs": obs, "next_obs": next_obs}, frame[0] if len(frame) == 3 else 1)
        return self.packed[phase]


def pixel_rollout(fields: Fields, steps: int, envs: int, phase: int) -> tuple[np.ndarray, np.ndarray]:
    """`obs` and `next_obs` ([T, K, S, *frame] uint8) of `envs` envs stacking S frames as FrameStackObservation does,
    from step `phase` of an episode of EPISODE_STEPS: every env step renders a new frame, a reset's stack is its
    first frame S times, an episode's last next observation is its final stack. Each frame is distinct (its number
    in its first bytes), as a real game's frames are, so none is shared by chance."""
    frame_shape, stack = fields[FRAMES_FIELD].shape, fields[OBS_INDEX].shape[0]
    g = phase + np.arange(steps)  # each row's step since the first episode's start
    episode, j = g // EPISODE_STEPS, g % EPISODE_STEPS
    per_episode = EPISODE_STEPS + 1  # frames 0..EPISODE_STEPS: the last is the final observation's
    first_episode = int(episode[0])
    offsets = np.arange(stack) - (stack - 1)  # the stack's frames relative to its newest

    def ids(at: np.ndarray) -> np.ndarray:  # [T, S]: the frames of the stack whose newest frame is `at`
        return (episode - first_episode)[:, None] * per_episode + np.maximum(at[:, None] + offsets[None, :], 0)

    obs_ids, next_ids = ids(j), ids(j + 1)
    episodes = int(episode[-1]) - first_episode + 1
    per_env = episodes * per_episode
    bank = np.zeros((envs * per_env, int(np.prod(frame_shape))), np.uint8)
    numbers = np.arange(len(bank), dtype="<u4").view(np.uint8).reshape(len(bank), 4)
    bank[:, :4] = numbers
    bank = bank.reshape(len(bank), *frame_shape)
    env_base = (np.arange(envs) * per_env)[None, :, None]  # [1, K, 1]
    obs = bank[obs_ids[:, None, :] + env_base]
    next_obs = bank[next_ids[:, None, :] + env_base]
    if len(frame_shape) == 3:  # frames of several planes (RGB): the observation is their planes stacked
        obs = obs.reshape(steps, envs, stack * frame_shape[0], *frame_shape[1:])
        next_obs = next_obs.reshape(obs.shape)
    return obs, next_obs


class ScriptedActor(ActorEvents):
    """An actor's envs and policy as the simulator scripts them (`ScriptedChunks`, each taking `T * K / rate`
    virtual seconds of the actor's work; a restarted actor's chunks get new serials), and what its driver tells the
    ledger: each chunk sent, a chunk lost on stop; a stopped actor's PUSH lingers FLUSH_S, then its process ends."""

    blocking = False

    def __init__(self, node: ActorNode, chunks: ScriptedChunks, rate: float) -> None:
        self.node, self.chunks = node, chunks
        self.seconds = chunks.env_steps / rate
        self.serial = 0

    def collect(self, version: int, done: Callable[[Chunk], None]) -> None:
        self.node.work_s += self.seconds  # stepping its envs: the actor's work
        self.node.at(self.node.now() + self.seconds, lambda: done(self._chunk(version)))

    def _chunk(self, version: int) -> Chunk:
        self.serial += 1
        return self.chunks.chunk(self.node.index, self.serial - 1, version)

    def load(self, params: Params) -> None:
        del params  # no policy runs

    def sent(self, chunk: Chunk) -> None:
        node = self.node
        node.ledger.chunk_sent(chunk, node.core.incarnation, node.fleet.alive, node.world.now)

    def finished(self, lost: Chunk | None) -> None:
        node = self.node
        if lost is not None:
            node.ledger.lost_on_stop += 1
        if node.core.flush_tries is not None:
            node.at(node.world.now + FLUSH_S, lambda: node.exit(0))


class RemoteScriptedActor(ScriptedActor):
    """A central-mode actor's rollout (`topology.inference=central`): each of a chunk's T steps asks an inference
    worker for its K actions (`InferenceTurns`, as `InferenceClient` keeps them: its worker while it answers, the
    next one after `request_timeout_s`, the same one again after NOT_READY_PAUSE_S while it holds no parameters),
    then steps its envs for its share of the chunk's time; the chunk is labelled with the oldest version that acted.
    Stopping, a step that no worker answered abandons the chunk and ends the process (roles/actor.py
    `InferenceStopped`)."""

    def __init__(self, node: ActorNode, chunks: ScriptedChunks, rate: float, workers: Sequence[Node]) -> None:
        super().__init__(node, chunks, rate)
        self.workers, self.turns = workers, InferenceTurns.of(node.index, len(workers))
        self.timeout_s = node.cfg.inference.request_timeout_s
        self.step_s = self.seconds / chunks.T
        self.obs = np.zeros((chunks.K, node.obs_dim), np.float32)
        self.asked: int | None = None  # the request out
        self.steps, self.oldest, self.version = 0, NO_VERSION, NO_VERSION
        self.done: Callable[[Chunk], None] = lambda chunk: None

    def collect(self, version: int, done: Callable[[Chunk], None]) -> None:
        self.version, self.done, self.steps, self.oldest = version, done, 0, version
        self._ask()

    def _ask(self) -> None:
        node = self.node
        request_id = self.turns.next_request()
        self.asked = request_id
        request = InferRequest(node.index, request_id, node.core.version, node.core.incarnation, self.obs)
        node.net.send(node, self.workers[self.turns.turn], request.to_message())
        node.at(node.now() + self.timeout_s, lambda: self._timed_out(request_id))

    def on_reply(self, message: Message) -> None:
        node, request_id = self.node, self.asked
        if request_id is None:
            return
        try:
            reply = InferReply.from_message(message, self.chunks.K)
        except ProtocolError as exc:
            if exc.reason == "error_reply":  # the worker holds no parameters yet: it is asked again shortly
                self.asked = None
                node.at(node.now() + NOT_READY_PAUSE_S, self._ask)
            return
        if reply.request != request_id:
            return  # a late reply to a request that timed out
        self.asked, self.steps, self.oldest = None, self.steps + 1, min(self.oldest, reply.version)
        node.work_s += self.step_s  # stepping its envs with these actions
        if self.steps < self.chunks.T:
            node.at(node.now() + self.step_s, self._ask)
            return
        chunk = self._chunk(self.version)
        chunk.version = min(chunk.version, self.oldest)
        node.at(node.now() + self.step_s, lambda: self.done(chunk))

    def _timed_out(self, request_id: int) -> None:
        if self.asked != request_id:
            return
        self.asked = None
        self.turns.failed()
        if self.node.core.flush_tries is not None:  # stopping, and no worker answered: the chunk is abandoned
            self.node.exit(0)
        else:
            self._ask()


class ActorNode(Process):
    """An actor: `ActorDriver` (roles/actor.py) on this node's loop with a `SimRollout`; its ports are the
    simulated pipes: a chunk goes to the next shard whose pipe has room (ZMQ's PUSH round-robin over the shards
    connected and not full; none: backpressure), a request to the next ps replica up (DEALER round-robin). A
    replica that ends tells it (a broken connection); the ledger hears of each chunk sent and each lost on stop."""

    def __init__(
        self,
        world: World,
        net: Network,
        index: int,
        cfg: ExperimentConfig,
        chunks: ScriptedChunks,
        shards: Sequence[Node],
        ps: Sequence[Node],
        ledger: Ledger,
        rate: float,
        fleet: Fleet,
        start_at: float = 0.0,
        workers: Sequence[Node] = (),
        obs_dim: int = 0,
    ) -> None:
        super().__init__(world, net, f"actor-{index}", ledger)
        self.index, self.cfg, self.shards, self.ps, self.fleet = index, cfg, shards, ps, fleet
        self.workers, self.obs_dim = workers, obs_dim
        self.scripted = (
            RemoteScriptedActor(self, chunks, rate, workers) if workers else ScriptedActor(self, chunks, rate)
        )
        for shard in shards:
            net.pipe(self, shard, cap=PUSH_HWM)
        self.driver: ActorDriver | None = None
        self.alive = False
        world.at(start_at, self._first_start)

    @property
    def finished(self) -> bool:
        return self.driver is not None and self.driver.finished

    @property
    def core(self) -> ActorCore:
        assert self.driver is not None
        return self.driver.core

    def _first_start(self) -> None:
        self.start()
        self.boot(resumed=False)

    def boot(self, resumed: bool) -> None:
        core = ActorCore.of(self.cfg, self.index, self.world.clock)
        self.driver = ActorDriver(core, self, self, self.scripted, self.scripted)
        self.fleet.changed(+1)
        self.next_shard = self.world.rng.randrange(len(self.shards))
        self.next_ps = self.world.rng.randrange(len(self.ps))
        self.driver.kick()

    # -- its ports --------------------------------------------------------------------------------------

    def send_chunk(self, message: Message) -> bool:
        for i in range(len(self.shards)):
            shard = self.shards[(self.next_shard + i) % len(self.shards)]
            if self.net.connected(self, shard) and not self.net.pipe(self, shard).full:
                self.next_shard = (self.next_shard + i + 1) % len(self.shards)
                return self.send(shard, message, message_bytes(message) if self.bandwidth or shard.bandwidth else 0)
        return False

    def ask_ps(self, message: Message) -> bool:
        replicas = len(self.ps)
        for i in range(replicas):
            ps = self.ps[(self.next_ps + i) % replicas]
            if ps.alive:  # DEALER: the next connected replica
                self.next_ps = (self.next_ps + i + 1) % replicas
                return self.net.send(self, ps, message)
        return False

    def watch_room(self) -> None:
        pass  # the window's end tries again

    # -- what it hears ----------------------------------------------------------------------------------

    def receive(self, src: Node, message: Message) -> None:
        if src in self.workers and isinstance(self.scripted, RemoteScriptedActor):
            self.scripted.on_reply(message)
            return
        try:
            reply = decode_params_reply(message)
        except ProtocolError:
            return
        if self.driver is not None:
            self.driver.on_reply(reply)

    def disconnected(self, peer: Node) -> None:
        if peer in self.ps and self.driver is not None:
            self.driver.on_disconnect()  # ParamClient's monitor: the request may have gone with that replica

    def sigterm(self) -> None:
        """Finish the chunk being collected, send it (a refused one gets one more try), linger, exit 0."""
        if self.alive and self.driver is not None and not self.driver.finished:
            self.driver.stop()

    def exit(self, code: int, killed: bool = False, on_purpose: bool = False) -> None:
        if not killed and not self.alive:
            return
        self.fleet.changed(-1)
        super().exit(code, killed, on_purpose)


class Fleet:
    """How many honest actors are up, kept as they start and exit, and its history (the live-actor check's)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.alive = 0
        self.history: list[tuple[float, int]] = [(0.0, 0)]

    def changed(self, delta: int) -> None:
        self.alive += delta
        self.history.append((self.world.now, self.alive))
