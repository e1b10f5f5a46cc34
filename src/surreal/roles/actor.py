"""`surreal role actor`: steps K environments with the latest policy and pushes experience.

    ps ──params──► policy ──► K envs ──chunk (tagged with the param version)──► replay shards

`ActorCore` is the actor's decisions without a socket, a clock, an env or a policy: what to do next (`next_action`:
collect a chunk, send it, ask the ps, load a blob, wait, or finish) and what follows each outcome (a chunk collected,
sent or refused, a reply, a wait over, a broken connection). Its timing rules are its own: a fetch's deadline (its
timeout plus its hold), a late reply kept for the next fetch, the pause after a held fetch that brought nothing
newer (`IDLE_S`), asking again after a ps connection broke or when no replica took the request, and a refused chunk's
window of `SEND_TIMEOUT_S` (it goes as soon as there is room; a window that runs out is one refused try). `ActorDriver`
runs it on a loop (roles/loop.py), written once: the process on the ZMQ poller, bench.fleet's simulated actors on
the same, serial mode inline, the simulator (surreal/sim/) on its world.

Stateless: everything an actor holds is rebuilt from the ps on start, so a killed actor is simply started
again. On SIGTERM (a spot node's preemption notice, `kubectl delete pod`) it finishes the chunk it is stepping,
gives a chunk that backpressure refused one more try (`stop`), lets its queued chunks reach the replay for up to
`FLUSH_S` and exits: a chunk's steps plus about 3 s, well inside the chart's grace period. Backpressure blocks it (a
full or unreachable replay stops the stepping rather than growing a queue), and the flow-control rule of the
algorithm's regime (runtime/regimes/) holds it to what the learner can use; while held, it asks the ps with a long
poll for the version that frees it (the throttle's `wait`: the ps answers when that blob arrives or the hold ends),
so a thousand waiting actors neither flood the ps nor each download every version. Torch is imported by the shell
only: the core's drivers in bench/ run without it.
"""

from __future__ import annotations

import argparse
import math
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol, TypedDict

import numpy as np
import zmq

from surreal.algos import get_algorithm
from surreal.algos.interface import Collector
from surreal.config import ExperimentConfig, algo_config, config_from_env
from surreal.envs import make_vec_env
from surreal.envstate import EnvState, load_vec_env_state, vec_env_state
from surreal.metrics import RoleMetrics
from surreal.proto.channels import ExperienceSender, InferenceClient, ParamClient, ParamFetch, frames_of, send
from surreal.proto.codec import Message
from surreal.proto.curve import WireContext
from surreal.proto.wire import NO_VERSION, BlobMeta, Chunk, NotModified, Params, ParamsRequest, encode_chunk
from surreal.roles.common import StopFlag, count_errors, hold_until_stopped, param_client, setup_logging
from surreal.roles.loop import Alarm, Loop, ZmqLoop
from surreal.runtime.regimes import ActorThrottle, regime_of
from surreal.runtime.rollout import RolloutCollector
from surreal.settings import Settings

SEND_TIMEOUT_S = 1.0  # how long a refused chunk waits for room before the try counts as refused
FLUSH_S = 2.0  # on SIGTERM: how long queued chunks may take to reach the replay
IDLE_S = 0.01  # pause before asking the ps again when a held fetch brought nothing newer
ENV_SEED_STRIDE = 10_007  # far enough apart that actors' env seeds never overlap

# What an `Idle` waits for, and what `on_timeout` says ran out.
REPLY, RETRY, PAUSE, ROOM = "reply", "retry", "pause", "room"


@dataclass(frozen=True)
class Collect:
    """Step the envs for one chunk with the parameters of `version`; `collected` takes it."""

    version: int


@dataclass(frozen=True)
class Send:
    """Offer `chunk`, made with learner `incarnation`'s parameters, without waiting; `sent` takes the outcome."""

    chunk: Chunk
    incarnation: str


@dataclass(frozen=True)
class Fetch:
    """Send `request` to a ps replica (again, when asked again); `asked` takes whether one took it, `on_reply` the
    answer."""

    request: ParamsRequest


@dataclass(frozen=True)
class Load:
    """The policy runs `params` from now on."""

    params: Params


@dataclass(frozen=True)
class Idle:
    """Nothing to do until `until` (then `on_timeout`), a reply (`on_reply`), a broken ps connection
    (`disconnected`) or, with `room`, room on the experience link (`on_room`)."""

    until: float
    room: bool = False


@dataclass(frozen=True)
class Finish:
    """Nothing more to do: training is done, or the actor was stopped (`lost`: a chunk backpressure kept)."""

    lost: Chunk | None = None


Action = Collect | Send | Fetch | Load | Idle | Finish
Reply = Params | NotModified


class SavedParams(TypedDict):
    """A parameter blob in a checkpoint (an actor's loaded one, the in-process ps's held one)."""

    blob: dict[str, Any]  # `BlobMeta`'s fields
    arrays: dict[str, Any]


def saved_params(params: Params | None) -> SavedParams | None:
    return None if params is None else {"blob": asdict(params.blob), "arrays": params.arrays}


def loaded_params(saved: SavedParams | None) -> Params | None:
    return None if saved is None else Params(BlobMeta(**saved["blob"]), saved["arrays"])


class ActorCoreState(TypedDict):
    """What an actor's decisions continue from: its throttle's counts, the chunks sent, a chunk backpressure kept
    (`Chunk`'s fields). Not its waits: they end with its process (a serial run resumes between turns)."""

    throttle: dict[str, Any]
    chunks_sent: int
    unsent: dict[str, Any] | None


class ActorState(ActorCoreState):
    """Everything an actor's next step continues from, for an exact resume in serial mode (a process actor needs
    none of it: it is rebuilt from the ps): its envs mid-episode, its collector's state (the algorithm's), the
    parameters its policy runs."""

    envs: list[EnvState]
    collector: dict[str, Any]
    loaded: SavedParams | None


class ActorCore:
    """One actor's decisions: the throttle (shares, overdraft, the env-step budget) asked before each chunk, the
    fetch cadence and each fetch's timing (`ParamFetch`, a late reply kept for the next), the pause after a fruitless
    hold, backpressure (a refused chunk is sent before anything else, within its window) and the SIGTERM flush.
    `clock` times the waits and the throttle's stalls: the driver's loop's."""

    def __init__(
        self,
        index: int,
        throttle: ActorThrottle,
        fetch_interval: int,
        fetch_timeout_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.index, self.throttle, self.fetch_interval = index, throttle, fetch_interval
        self.fetch_timeout_s, self.clock = fetch_timeout_s, clock
        self.version, self.incarnation, self.done = NO_VERSION, "", False
        self.chunks_sent = 0
        self.unsent: Chunk | None = None  # a chunk backpressure refused, sent before anything else
        self.fetch_due = False  # the cadence's "newer than v?" after a chunk sent
        self.refused = False  # the unsent chunk was refused at least once
        self.flush_tries: int | None = None  # after `stop`: tries left for a chunk refused before
        self.fetch: ParamFetch | None = None  # the request out at the ps
        self.late: deque[Reply] = deque()  # answers that came with no fetch out: the next fetch reads them first
        self.to_load: Params | None = None  # a blob the policy does not run yet
        self.paused_until: float | None = None  # after a held fetch that brought nothing newer
        self.blocked_until: float | None = None  # the end of the refused chunk's window
        self.room = False  # try it now: the experience link said it has room, or the window ran out
        self.window_over = False  # the try now is the window's last
        self.waiting: str | None = None  # what the `Idle` last returned waits for

    @classmethod
    def of(cls, cfg: ExperimentConfig, index: int, clock: Callable[[], float]) -> ActorCore:
        """Actor `index` of `cfg` on `clock` (the driver's loop's: the simulator's is virtual)."""
        throttle = regime_of(cfg).actor_throttle(clock, index)
        return cls(index, throttle, cfg.actor.param_fetch_interval, cfg.actor.fetch_timeout_s, clock)

    def next_action(self) -> Action:
        if self.to_load is not None:
            params, self.to_load = self.to_load, None
            return Load(params)
        if self.flush_tries is not None:
            return self._send() if self.unsent and self.flush_tries else Finish(self.unsent)
        if self.done:
            return Finish()
        if self.fetch is not None:
            if self.fetch.send:
                self.fetch.send = False
                return Fetch(self.fetch.request)
            if self.late:  # an answer that came late is what this fetch reads first
                self._answered(self.late.popleft())
                return self.next_action()
            return self._idle(self.fetch.due, RETRY if self.fetch.retry_at == self.fetch.due else REPLY)
        if self.paused_until is not None:
            return self._idle(self.paused_until, PAUSE)
        if self.fetch_due:
            return self._ask(ParamsRequest(self.version, self.incarnation))
        if self.unsent is not None:
            return self._send()
        if self.version < 0 or self.throttle.must_wait(self.version):
            wait = self.throttle.wait(self.version)  # nothing to do until newer parameters come: a long poll
            hold_ms = math.ceil(wait.hold_s * 1000) if wait.hold_s > 0 else 0
            return self._ask(ParamsRequest(self.version, self.incarnation, hold_ms, wait.wake_version))
        return Collect(self.version)

    def _idle(self, until: float, waiting: str) -> Idle:
        self.waiting = waiting
        return Idle(until, room=waiting == ROOM)

    def _ask(self, request: ParamsRequest) -> Action:
        self.fetch = ParamFetch.of(request, self.fetch_timeout_s, self.clock())
        return self.next_action()

    def _send(self) -> Send | Idle:
        if self.blocked_until is not None and not self.room:
            return self._idle(self.blocked_until, ROOM)
        self.room = False
        assert self.unsent is not None
        return Send(self.unsent, self.incarnation)

    # -- outcomes -------------------------------------------------------------------------------------

    def collected(self, chunk: Chunk) -> None:
        self.unsent, self.refused = chunk, False

    def sent(self, ok: bool) -> Chunk | None:
        """The outcome of `Send`: the chunk that went out, or None (no room: it waits, up to its window)."""
        if not ok or self.unsent is None:
            if self.window_over:  # refused a whole window: one refused try (and a new window)
                if self.flush_tries is not None and self.refused:
                    self.flush_tries -= 1
                self.refused, self.window_over, self.blocked_until = True, False, None
            if self.blocked_until is None:
                self.blocked_until = self.clock() + SEND_TIMEOUT_S
            return None
        chunk, self.unsent, self.blocked_until, self.window_over = self.unsent, None, None, False
        self.chunks_sent += 1
        self.throttle.on_sent(chunk.env_steps)
        self.fetch_due = self.flush_tries is None and self.chunks_sent % self.fetch_interval == 0
        return chunk

    def asked(self, ok: bool) -> None:
        """The outcome of `Fetch`: a replica took the request, or none could now (asked again shortly)."""
        if self.fetch is not None:
            self.fetch.asked(ok, self.clock())

    def on_reply(self, reply: Reply) -> None:
        """A ps's answer: the fetch out's, or one that came late (kept for the next fetch)."""
        if self.fetch is None:
            self.late.append(reply)
        else:
            self._answered(reply)

    def on_room(self) -> None:
        if self.blocked_until is not None:
            self.room = True

    def disconnected(self) -> None:
        """A ps replica's connection broke: the request out may have gone with it, so it is asked again."""
        if self.fetch is not None:
            self.fetch.broken()

    def on_timeout(self) -> str | None:
        """The `Idle` last returned ran out; what it waited for (REPLY: the fetch timed out; ROOM: the refused
        chunk's window ran out, and it is tried once more before the try counts as refused)."""
        waiting, self.waiting = self.waiting, None
        if waiting == REPLY and self.fetch is not None:
            self._answered(None)
        elif waiting == RETRY and self.fetch is not None:
            self.fetch.retry()
        elif waiting == PAUSE:
            self.paused_until = None
        elif waiting == ROOM and self.blocked_until is not None:
            self.room = self.window_over = True
        return waiting

    def _answered(self, reply: Reply | None) -> None:
        """The outcome of the fetch out; a held one that brought nothing newer pauses IDLE_S before the next. A
        "not modified" tells the throttle how far the learner got."""
        assert self.fetch is not None
        held = self.fetch.request.hold_ms > 0
        self.fetch, self.fetch_due, self.waiting = None, False, None
        got = isinstance(reply, Params)
        if isinstance(reply, NotModified):
            self.throttle.on_heard(reply.version, reply.incarnation)
        elif isinstance(reply, Params):
            self.apply(reply)
            self.to_load = reply
        if held and not got:
            self.paused_until = self.clock() + IDLE_S

    def apply(self, params: Params) -> None:
        """The policy runs `params`' blob from now on."""
        blob = params.blob
        self.version, self.incarnation, self.done = blob.version, blob.incarnation, blob.done
        self.throttle.on_params(blob)

    def stop(self) -> None:
        """SIGTERM: nothing more is asked of the ps; the chunk being stepped is finished (by the driver) and sent
        as usual, and a chunk backpressure refused gets one more try; then `Finish`."""
        if self.flush_tries is None:
            self.flush_tries = 1
        self.fetch = self.paused_until = None
        if self.waiting != ROOM:
            self.waiting = None

    def state(self) -> ActorCoreState:
        unsent = None if self.unsent is None else {f.name: getattr(self.unsent, f.name) for f in fields(Chunk)}
        return {"throttle": self.throttle.state(), "chunks_sent": self.chunks_sent, "unsent": unsent}

    def load_state(self, state: ActorCoreState) -> None:
        self.throttle.load_state(state["throttle"])
        self.chunks_sent = state["chunks_sent"]
        self.unsent = None if state["unsent"] is None else Chunk(**state["unsent"])


# -- the driver: the core on a loop ---------------------------------------------------------------------


class ActorPorts(Protocol):
    """Where an actor's messages go, without waiting (a ZMQ socket, a simulated pipe, an in-process core). What
    comes back (replies, room, broken connections) its host tells the driver."""

    def send_chunk(self, message: Message) -> bool:
        """An experience message to a replay shard; False: no room now (backpressure)."""
        ...

    def ask_ps(self, message: Message) -> bool:
        """A parameter request to a ps replica; False: none can take it now."""
        ...

    def watch_room(self) -> None:
        """Have the driver told (`on_room`) once the experience link has room."""
        ...


class Rollout(Protocol):
    """What makes an actor's chunks: its envs and policy (the process, serial mode), a recording (bench.fleet), a
    script (the simulator). `blocking`: a chunk is stepped on the loop's own thread, the call taking the time it
    takes; else the rollout schedules its steps on the loop (their time simulated) and calls `done` then."""

    @property
    def blocking(self) -> bool: ...

    def collect(self, version: int, done: Callable[[Chunk], None]) -> None:
        """Step a chunk with the parameters of `version`; `done(chunk)` once it is stepped."""
        ...

    def load(self, params: Params) -> None: ...


class ActorEvents:
    """What a driver tells its host besides (the metrics, the simulator's ledger, bench.fleet's counts)."""

    def sent(self, chunk: Chunk) -> None:
        del chunk

    def refused(self) -> None:
        """A chunk waited a whole window for room."""

    def timed_out(self) -> None:
        """A fetch got no answer in time."""

    def finished(self, lost: Chunk | None) -> None:
        del lost


class ActorDriver:
    """`ActorCore` on a loop: each action done as the core says, the waits on an `Alarm`, what the host is told
    handed to the core. A chunk stepped on the loop's own thread (`Rollout.blocking`) starts a turn of its own, so
    the loop serves what came meanwhile (serial mode's actors take turns with the learner, one chunk each)."""

    def __init__(
        self, core: ActorCore, loop: Loop, ports: ActorPorts, rollout: Rollout, events: ActorEvents | None = None
    ) -> None:
        self.core, self.loop, self.ports, self.rollout = core, loop, ports, rollout
        self.events = events or ActorEvents()
        self.alarm = Alarm(loop, self._timed_out)
        self.collecting = self.finished = self._busy = False
        self.progress = 0  # chunks sent and blobs loaded (serial mode's stall check)

    def start(self) -> None:
        self.loop.at(self.loop.now(), self.kick)

    def kick(self) -> None:
        """Do what the core says until it waits."""
        if self._busy or self.collecting or self.finished:
            return
        self._busy = True
        try:
            self._act()
        finally:
            self._busy = False

    def _act(self) -> None:
        core, acted = self.core, False
        while True:
            action = core.next_action()
            self.alarm.set(action.until if isinstance(action, Idle) else None)
            if isinstance(action, Idle):
                if action.room:
                    self.ports.watch_room()
                return
            if isinstance(action, Collect):
                if acted and self.rollout.blocking:
                    self.loop.at(self.loop.now(), self.kick)
                    return
                self.collecting = True
                self.rollout.collect(action.version, self._collected)
                if self.collecting:  # its steps are on the loop: `_collected` goes on
                    return
            elif isinstance(action, Send):
                chunk = core.sent(self.ports.send_chunk(encode_chunk(action.chunk, action.incarnation)))
                if chunk is not None:
                    self.progress += 1
                    self.events.sent(chunk)
            elif isinstance(action, Fetch):
                core.asked(self.ports.ask_ps(action.request.to_message()))
            elif isinstance(action, Load):
                self.rollout.load(action.params)
                self.progress += 1
            else:
                self.finished = True
                self.events.finished(action.lost)
                return
            acted = True

    def _collected(self, chunk: Chunk) -> None:
        self.collecting = False
        self.core.collected(chunk)
        self.kick()

    def _timed_out(self) -> None:
        waiting = self.core.on_timeout()
        if waiting == REPLY:
            self.events.timed_out()
        elif waiting == ROOM:
            self.events.refused()
        self.kick()

    # -- what the host tells it -----------------------------------------------------------------------

    def on_reply(self, reply: Reply) -> None:
        self.core.on_reply(reply)
        self.kick()

    def on_room(self) -> None:
        self.core.on_room()
        self.kick()

    def on_disconnect(self) -> None:
        self.core.disconnected()
        self.kick()

    def stop(self) -> None:
        self.core.stop()
        self.kick()


class ActorSockets:
    """An actor's ports over ZMQ on a `ZmqLoop`: chunks on an `ExperienceSender`'s PUSH, requests on a
    `ParamClient`'s DEALER; its replies and its broken connections (the client's monitor) handed to the driver."""

    def __init__(self, loop: ZmqLoop, experience: ExperienceSender, params: ParamClient) -> None:
        self.loop, self.experience, self.params = loop, experience, params
        self.driver: ActorDriver | None = None

    def attach(self, driver: ActorDriver) -> ActorDriver:
        self.driver = driver
        self.loop.listen(self.params.sock, self.on_frames)
        self.loop.listen(self.params.monitor, lambda frames: driver.on_disconnect())
        return driver

    def on_frames(self, frames: list[zmq.Frame]) -> None:
        reply = self.params.decode(frames)
        if reply is not None and self.driver is not None:
            self.driver.on_reply(reply)

    def send_chunk(self, message: Message) -> bool:
        return self.experience.offer(message)

    def ask_ps(self, message: Message) -> bool:
        self.params.disconnects()  # those before this request took none of it
        return send(self.params.sock, frames_of(message), 0.0)

    def watch_room(self) -> None:
        if self.driver is not None:
            self.loop.on_writable(self.experience.sock, self.driver.on_room)


# -- the process and serial mode: K envs and the policy ----------------------------------------------------


class InferenceStopped(Exception):
    """The actor is stopping and no inference worker answered: the chunk being stepped is abandoned, unsent."""


class RemotePolicy:
    """The policy of an actor in central mode (`topology.inference=central`): each `act` asks an inference worker
    (`InferenceClient`, with failover) and returns its actions and record, exactly what a per-actor policy's `act`
    returns; the oldest parameter version that made a step of the chunk is kept (`take_version`) so the chunk is
    labelled with it. The weights live in the workers: `load_params` has nothing to load."""

    def __init__(self, client: InferenceClient, held: Callable[[], tuple[int, str]], stopped: Callable[[], bool]):
        self.client, self.held, self.stopped = client, held, stopped
        self.oldest: int | None = None

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        version, incarnation = self.held()
        reply = self.client.act(np.ascontiguousarray(obs, np.float32), version, incarnation, self.stopped)
        if reply is None:
            raise InferenceStopped
        self.oldest = reply.version if self.oldest is None else min(self.oldest, reply.version)
        return reply.env_actions, reply.record

    def take_version(self) -> int | None:
        """The oldest version that acted since the last call."""
        oldest, self.oldest = self.oldest, None
        return oldest

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        raise NotImplementedError("a central-mode actor samples only; evaluation runs the policy itself")

    def load_params(self, arrays: dict[str, Any]) -> None:
        del arrays  # the inference workers hold the weights

    def episode_done(self, done: np.ndarray) -> None:
        del done  # central mode runs stateless policies only (config/schema.py)

    def sampling_state(self) -> dict[str, Any]:
        return {}  # the workers draw the samples

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        del state


class Actor(ActorEvents):
    """K envs and the policy, parameters in and chunks out: the `Rollout` of the process and of serial mode, its
    metrics the driver's `ActorEvents`. With `inference` (central mode) the policy is a `RemotePolicy` over the
    inference workers; the actor keeps its envs. `loop`: what its driver runs on (`drive`)."""

    blocking = True  # stepping the envs takes the time it takes

    def __init__(
        self,
        cfg: ExperimentConfig,
        index: int,
        metrics: RoleMetrics,
        loop: Loop,
        inference: InferenceClient | None = None,
        stopped: Callable[[], bool] = lambda: False,
    ) -> None:
        self.cfg, self.loop = cfg, loop
        self.core = ActorCore.of(cfg, index, loop.now)
        algo = get_algorithm(cfg.algo.name)
        env_seed = cfg.seed + ENV_SEED_STRIDE * (index + 1)
        self.envs = make_vec_env(cfg.env.id, cfg.topology.envs_per_actor, env_seed, cfg.env.kwargs)
        spaces = self.envs.single_observation_space, self.envs.single_action_space
        self.remote: RemotePolicy | None = None
        self.collector: Collector
        if inference is not None:  # central mode: a stateless policy's collector (config/schema.py allows no other)
            self.remote = RemotePolicy(inference, lambda: (self.core.version, self.core.incarnation), stopped)
            self.policy: Any = self.remote
            self.collector = RolloutCollector(self.envs, self.remote, cfg.actor.chunk_steps, index)
        else:
            self.policy = algo.make_policy(*spaces, algo_config(cfg), index, cfg.topology.actors)
            self.collector = algo.make_collector(self.envs, self.policy, algo_config(cfg), index, cfg.actor.chunk_steps)
        self.loaded: Params | None = None  # the blob the policy runs
        self.lost: Chunk | None = None  # a chunk backpressure kept when it stopped
        self.m_steps = metrics.counter("actor_env_steps_total", "environment steps taken")
        self.m_episodes = metrics.counter("actor_episodes_total", "episodes finished")
        self.m_return = metrics.gauge("actor_episode_return", "return of the last finished episode")
        self.m_version = metrics.gauge("actor_param_version", "parameter version the policy runs")
        self.m_blocked = metrics.counter("actor_send_blocked_total", "send attempts refused by backpressure")
        self.m_timeouts = metrics.counter("actor_param_fetch_timeouts_total", "parameter fetches that timed out")

    def drive(self, ports: ActorPorts) -> ActorDriver:
        return ActorDriver(self.core, self.loop, ports, self, self)

    def collect(self, version: int, done: Callable[[Chunk], None]) -> None:
        chunk = self.collector.collect(version)
        if self.remote is not None:  # labelled with the oldest parameters that made one of its steps
            chunk.version = min(chunk.version, self.remote.take_version() or chunk.version)
        done(chunk)

    def load(self, params: Params) -> None:
        self.policy.load_params(params.arrays)
        self.loaded = params
        self.m_version.set(params.blob.version)

    def sent(self, chunk: Chunk) -> None:
        self.m_steps.inc(chunk.env_steps)
        self.m_episodes.inc(len(chunk.episode_returns))
        if chunk.episode_returns:
            self.m_return.set(chunk.episode_returns[-1])

    def refused(self) -> None:
        self.m_blocked.inc()

    def timed_out(self) -> None:
        self.m_timeouts.inc()

    def finished(self, lost: Chunk | None) -> None:
        self.lost = lost

    def state(self) -> ActorState:
        """Everything the next step continues from (NumPy arrays, numbers, containers)."""
        return {
            "envs": vec_env_state(self.envs),
            "collector": self.collector.state(),
            "loaded": saved_params(self.loaded),
            **self.core.state(),
        }

    def load_state(self, state: ActorState) -> None:
        params = loaded_params(state["loaded"])
        if params is not None:
            self.policy.load_params(params.arrays)
            self.loaded = params
            self.core.apply(params)
        self.core.load_state(state)  # after the blob, which the throttle was told of
        load_vec_env_state(self.envs, state["envs"])
        self.collector.load_state(state["collector"])

    def close(self) -> None:
        self.envs.close()


def main(args: argparse.Namespace) -> int:
    import torch  # the policy's; the core and its other drivers run without it

    del args
    settings = Settings.from_env()
    cfg = config_from_env()
    log = setup_logging("actor", settings.index)
    stop = StopFlag().install()
    torch.set_num_threads(cfg.actor.torch_threads)
    metrics = RoleMetrics("actor", settings.index)
    ctx = WireContext(settings.curve_keys)
    experience = ExperienceSender(ctx, settings.experience_addrs)
    params = param_client(ctx, settings, cfg, count_errors(metrics))
    inference = None
    if cfg.topology.inference == "central":
        if not settings.inference_addrs:
            log.error("topology.inference=central but SURREAL_INFERENCE_ADDRS names no inference worker")
            return 2
        on_infer_error = count_errors(metrics, "actor_inference_errors_total", "inference requests not answered")
        workers = [settings.connect(a) for a in settings.inference_addrs]
        timeout_s = cfg.inference.request_timeout_s
        inference = InferenceClient(ctx, workers, settings.index, timeout_s, on_error=on_infer_error)
    loop = ZmqLoop()
    actor = Actor(cfg, settings.index, metrics, loop, inference=inference, stopped=lambda: bool(stop))
    sockets = ActorSockets(loop, experience, params)
    driver = sockets.attach(actor.drive(sockets))
    metrics.serve(settings.bind_host, settings.metrics_port)
    log.info(
        "running %s on %d x %s; parameters from %s",
        cfg.algo.name,
        cfg.topology.envs_per_actor,
        cfg.env.id,
        ",".join(settings.connect(a) for a in settings.ps_addrs),
    )

    def done() -> bool:
        if stop and actor.core.flush_tries is None:  # SIGTERM: the core finishes the chunk being stepped, then flushes
            driver.stop()
        return driver.finished

    core = actor.core
    try:
        driver.start()
        try:
            loop.run(done)
        except InferenceStopped:
            log.info("stopping: no inference worker answered; the chunk being stepped is not sent")
        if actor.lost is not None:
            log.info("stopping: the replay took no more chunks in %.0f s; one chunk lost", SEND_TIMEOUT_S)
        if core.done and settings.hold_when_done:
            hold_until_stopped(stop, log)
    finally:
        experience.close(FLUSH_S if stop else 0.0)
        params.close()
        if inference is not None:
            inference.close()
        ctx.term()
        actor.close()
        metrics.close()
    done_note = " (training done)" if core.done else ""
    log.info("stopped after %d chunks at version %d%s", core.chunks_sent, core.version, done_note)
    return 0
