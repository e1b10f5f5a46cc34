"""`surreal role actor`: steps K environments with the latest policy and pushes experience.

    ps ──params──► policy ──► K envs ──chunk (tagged with the param version)──► replay shards

`ActorCore` is the actor's decisions without a socket, a clock, an env or a policy: what to do next (`next_action`:
collect a chunk, send it, ask the ps, or finish) and what follows each outcome (a chunk collected, sent or refused, a
reply or none). `Actor` drives it synchronously with K envs, the policy and the ports (the process shell `main`,
serial mode and the tests); bench/fleet_actors.py and the simulator (surreal/sim/) drive the same core event by
event. Stateless: everything an actor holds is rebuilt from the ps on start, so a killed actor is simply started
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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, TypedDict

import numpy as np

from surreal.algos import get_algorithm
from surreal.algos.interface import Collector
from surreal.config import ExperimentConfig, algo_config, config_from_env
from surreal.envs import make_vec_env
from surreal.envstate import EnvState, load_vec_env_state, vec_env_state
from surreal.metrics import RoleMetrics
from surreal.proto.channels import ExperienceSender, InferenceClient
from surreal.proto.curve import WireContext
from surreal.proto.wire import NO_VERSION, BlobMeta, Chunk, NotModified, Params
from surreal.roles.common import StopFlag, count_errors, hold_until_stopped, param_client, setup_logging
from surreal.roles.ports import ExperienceOut, ParamsIn
from surreal.runtime.regimes import ActorThrottle, regime_of
from surreal.runtime.rollout import RolloutCollector
from surreal.settings import Settings

SEND_TIMEOUT_S = 1.0  # how long a send waits for room before it counts as refused
FLUSH_S = 2.0  # on SIGTERM: how long queued chunks may take to reach the replay
IDLE_S = 0.01  # pause before asking the ps again when it had nothing newer
ENV_SEED_STRIDE = 10_007  # far enough apart that actors' env seeds never overlap


@dataclass(frozen=True)
class Collect:
    """Step the envs for one chunk with the parameters of `version`; `collected` takes it."""

    version: int


@dataclass(frozen=True)
class Send:
    """Send `chunk`, made with learner `incarnation`'s parameters, within SEND_TIMEOUT_S; `sent` takes the outcome."""

    chunk: Chunk
    incarnation: str


@dataclass(frozen=True)
class Fetch:
    """Ask the ps for anything newer than (`version`, `incarnation`); with `hold_s`, a long poll woken by a blob of
    `wake_version` or later (ParamsIn.fetch); `answered` takes the reply, or None when none came in time."""

    version: int
    incarnation: str
    hold_s: float = 0.0
    wake_version: int = 0


@dataclass(frozen=True)
class Finish:
    """Nothing more to do: training is done, or the actor was stopped (`lost`: a chunk backpressure kept)."""

    lost: Chunk | None = None


Action = Collect | Send | Fetch | Finish


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
    (`Chunk`'s fields)."""

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
    fetch cadence, backpressure (a refused chunk is sent before anything else) and the SIGTERM flush."""

    def __init__(self, index: int, throttle: ActorThrottle, fetch_interval: int) -> None:
        self.index, self.throttle, self.fetch_interval = index, throttle, fetch_interval
        self.version, self.incarnation, self.done = NO_VERSION, "", False
        self.chunks_sent = 0
        self.unsent: Chunk | None = None  # a chunk backpressure refused, sent before anything else
        self.fetch_due = False  # the cadence's "newer than v?" after a chunk sent
        self.refused = False  # the unsent chunk was refused at least once
        self.flush_tries: int | None = None  # after `stop`: tries left for a chunk refused before

    @classmethod
    def of(cls, cfg: ExperimentConfig, index: int, clock: Callable[[], float] = time.monotonic) -> ActorCore:
        """Actor `index` of `cfg`, its throttle timing stalls on `clock` (the driver's: the simulator's is virtual)."""
        return cls(index, regime_of(cfg).actor_throttle(clock, index), cfg.actor.param_fetch_interval)

    def next_action(self) -> Action:
        if self.flush_tries is not None:
            return Send(self.unsent, self.incarnation) if self.unsent and self.flush_tries else Finish(self.unsent)
        if self.done:
            return Finish()
        if self.fetch_due:
            return Fetch(self.version, self.incarnation)
        if self.unsent is not None:
            return Send(self.unsent, self.incarnation)
        if self.version < 0 or self.throttle.must_wait(self.version):
            wait = self.throttle.wait(self.version)  # nothing to do until newer parameters come: a long poll
            return Fetch(self.version, self.incarnation, wait.hold_s, wait.wake_version)
        return Collect(self.version)

    def collected(self, chunk: Chunk) -> None:
        self.unsent, self.refused = chunk, False

    def sent(self, ok: bool) -> Chunk | None:
        """The outcome of `Send`: the chunk that went out, or None (refused: it waits)."""
        if self.flush_tries is not None and self.refused:
            self.flush_tries -= 1
        if not ok or self.unsent is None:
            self.refused = True
            return None
        chunk, self.unsent = self.unsent, None
        self.chunks_sent += 1
        self.throttle.on_sent(chunk.env_steps)
        self.fetch_due = self.flush_tries is None and self.chunks_sent % self.fetch_interval == 0
        return chunk

    def answered(self, reply: Params | NotModified | None) -> bool:
        """The outcome of `Fetch`; True: newer parameters to load (a "not modified" tells the throttle how far the
        learner got)."""
        self.fetch_due = False
        if isinstance(reply, NotModified):
            self.throttle.on_heard(reply.version, reply.incarnation)
            return False
        if reply is None:
            return False
        blob = reply.blob
        self.version, self.incarnation, self.done = blob.version, blob.incarnation, blob.done
        self.throttle.on_params(blob)
        return True

    def stop(self) -> None:
        """SIGTERM: the chunk being stepped is finished (by the driver) and sent as usual, and a chunk backpressure
        refused gets one more try; then `Finish`."""
        if self.flush_tries is None:
            self.flush_tries = 1

    def state(self) -> ActorCoreState:
        unsent = None if self.unsent is None else {f.name: getattr(self.unsent, f.name) for f in fields(Chunk)}
        return {"throttle": self.throttle.state(), "chunks_sent": self.chunks_sent, "unsent": unsent}

    def load_state(self, state: ActorCoreState) -> None:
        self.throttle.load_state(state["throttle"])
        self.chunks_sent = state["chunks_sent"]
        self.unsent = None if state["unsent"] is None else Chunk(**state["unsent"])


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


class Actor:
    """`ActorCore` driven synchronously: parameters in, policy on K envs, chunks out, through the ports. With
    `inference` (central mode) the policy is a `RemotePolicy` over the inference workers; the actor keeps its envs."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        index: int,
        experience: ExperienceOut,
        params: ParamsIn,
        metrics: RoleMetrics,
        inference: InferenceClient | None = None,
        stopped: Callable[[], bool] = lambda: False,
    ) -> None:
        self.cfg, self.experience, self.params = cfg, experience, params
        self.core = ActorCore.of(cfg, index)
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
        self.m_steps = metrics.counter("actor_env_steps_total", "environment steps taken")
        self.m_episodes = metrics.counter("actor_episodes_total", "episodes finished")
        self.m_return = metrics.gauge("actor_episode_return", "return of the last finished episode")
        self.m_version = metrics.gauge("actor_param_version", "parameter version the policy runs")
        self.m_blocked = metrics.counter("actor_send_blocked_total", "send attempts refused by backpressure")

    def step(self) -> bool:
        """Ship one chunk if the throttle allows, else ask the ps for newer parameters. False: neither a chunk
        went out nor newer parameters came in (the shell pauses before the next step)."""
        action = self.core.next_action()
        if isinstance(action, Fetch):
            return self.fetch(action)
        if isinstance(action, Collect):
            chunk = self.collector.collect(action.version)
            if self.remote is not None:  # labelled with the oldest parameters that made one of its steps
                chunk.version = min(chunk.version, self.remote.take_version() or chunk.version)
            self.core.collected(chunk)
            action = self.core.next_action()
        if not isinstance(action, Send) or not self._send(action):
            return False
        if self.core.fetch_due:
            self.fetch(self.core.next_action())
        return True

    def _send(self, action: Send) -> bool:
        chunk = self.core.sent(self.experience.send(action.chunk, action.incarnation, SEND_TIMEOUT_S))
        if chunk is None:
            self.m_blocked.inc()
            return False
        self.m_steps.inc(chunk.env_steps)
        self.m_episodes.inc(len(chunk.episode_returns))
        if chunk.episode_returns:
            self.m_return.set(chunk.episode_returns[-1])
        return True

    def flush(self) -> bool:
        """On the way out: one more try for a chunk backpressure refused. True: nothing is left unsent."""
        self.core.stop()
        action = self.core.next_action()
        if isinstance(action, Send):
            self._send(action)
        return self.core.unsent is None

    def fetch(self, action: Action | None = None) -> bool:
        """Ask the ps as `action` says (by default: anything newer?); load what it sends."""
        fetch = action if isinstance(action, Fetch) else Fetch(self.core.version, self.core.incarnation)
        timeout_s = self.cfg.actor.fetch_timeout_s
        reply = self.params.fetch(fetch.version, fetch.incarnation, timeout_s, fetch.hold_s, fetch.wake_version)
        if isinstance(reply, Params):
            self.policy.load_params(reply.arrays)
            self.loaded = reply
            self.m_version.set(reply.blob.version)
        return self.core.answered(reply)

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
            self.core.answered(params)
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
    on_error = count_errors(metrics, timeouts="actor_param_fetch_timeouts_total")
    ctx = WireContext(settings.curve_keys)
    experience = ExperienceSender(ctx, settings.experience_addrs)
    params = param_client(ctx, settings, cfg, on_error, stopped=lambda: bool(stop))
    inference = None
    if cfg.topology.inference == "central":
        if not settings.inference_addrs:
            log.error("topology.inference=central but SURREAL_INFERENCE_ADDRS names no inference worker")
            return 2
        on_infer_error = count_errors(metrics, "actor_inference_errors_total", "inference requests not answered")
        workers = [settings.connect(a) for a in settings.inference_addrs]
        timeout_s = cfg.inference.request_timeout_s
        inference = InferenceClient(ctx, workers, settings.index, timeout_s, on_error=on_infer_error)
    actor = Actor(cfg, settings.index, experience, params, metrics, inference=inference, stopped=lambda: bool(stop))
    metrics.serve(settings.bind_host, settings.metrics_port)
    log.info(
        "running %s on %d x %s; parameters from %s",
        cfg.algo.name,
        cfg.topology.envs_per_actor,
        cfg.env.id,
        ",".join(settings.connect(a) for a in settings.ps_addrs),
    )
    core = actor.core
    try:
        while not stop and not core.done:
            try:
                stepped = actor.step()
            except InferenceStopped:
                log.info("stopping: no inference worker answered; the chunk being stepped is not sent")
                break
            if not stepped:
                time.sleep(IDLE_S)
        if stop and not actor.flush():
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
    done = " (training done)" if core.done else ""
    log.info("stopped after %d chunks at version %d%s", core.chunks_sent, core.version, done)
    return 0
