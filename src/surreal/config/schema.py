"""The typed experiment schema: one dataclass tree that Hydra merges YAML and overrides onto.

Typed so a typo'd key or a wrong type fails while the config is composed, before any process starts;
`validate` then checks the values and the cross-field rules, listing every problem at once. Torch-free:
the replay and ps roles read it too.

Algorithms slot in through `ALGORITHMS`: each one is an `AlgoConfig` subclass naming its `module`, with
its own `name` (the Hydra group option `algo=<name>`, whose defaults are the class's own) and its own `problems`
check. A subclass registers itself when it is defined; the registry imports, on first lookup,
every torch-free `surreal/algos/<name>/config.py`, so an algorithm's config lives in its folder and no list
here names it. The loader types the `algo` node with the class its `name` selects, so `algo.lr` is checked
against PPO's fields when PPO is chosen and against DDPG's when DDPG is.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from omegaconf import MISSING

from surreal.errors import ConfigError

MIB = 1 << 20
DEFAULT_ALGO = "ppo"  # what an experiment runs unless it says `algo=` (conf/experiment.yaml's default)
REPLAY_MODES = ("fifo", "uniform", "prioritized")  # what `auto` resolves to, or set explicitly
# A run's name is its folder's name (runs/<name>): a letter or digit, then letters, digits, '.', '_', '-'.
# The launcher, this schema and the chart's values.schema.json all use these.
_RUN_NAME_CHARS = "A-Za-z0-9._-"
RUN_NAME = re.compile(rf"[A-Za-z0-9][{_RUN_NAME_CHARS}]{{0,99}}")  # at most 100: a folder name, with room to spare
NOT_IN_RUN_NAME = re.compile(rf"[^{_RUN_NAME_CHARS}]")  # what the launcher replaces in a generated name
RUN_NAME_RULE = "must be a folder name of at most 100 characters: letters, digits, '.', '_', '-'"
DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
# The kinds of Gymnasium space an algorithm may declare it takes (`AlgoConfig.observation_spaces`, `.action_spaces`),
# as a user reads them. surreal/spaces.py says which kind a space is; the names keep this module gymnasium-free.
SPACE_KINDS = {"box": "flat Box", "discrete": "Discrete", "image": "uint8 (C, H, W) image"}
INFERENCE_MODES = ("per_actor", "central")  # `topology.inference`
# The value rules of `validate` and of the algorithms' `problems`, as their messages state them.
RULES: dict[str, Callable[[Any], bool]] = {
    "> 0": lambda v: v > 0,
    ">= 0": lambda v: v >= 0,
    "> 0 or null": lambda v: v is None or v > 0,
    "in (0, 1]": lambda v: 0 < v <= 1,
    "in [0, 1]": lambda v: 0 <= v <= 1,
    "in [0, 1)": lambda v: 0 <= v < 1,
    ">= 1": lambda v: v >= 1,
}


def rule_problems(rule: str, values: Mapping[str, Any], prefix: str = "algo.") -> list[str]:
    """`<prefix><key> must be <rule> (got <value>)` for each of `values` that breaks `rule` (a key of RULES)."""
    return [f"{prefix}{key} must be {rule} (got {value})" for key, value in values.items() if not RULES[rule](value)]


class Section:
    """A section of the experiment (`prefix`: its keys' dotted prefix): its own value rules and those that tie it to
    the rest (`problems`), which `validate` lists with every other section's."""

    prefix: ClassVar[str]

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        return []

    def breaking(self, rule: str, *keys: str) -> list[str]:
        """`<prefix><key> must be <rule> (got <value>)` for each of these fields whose value breaks `rule` (RULES)."""
        return rule_problems(rule, {key: getattr(self, key) for key in keys}, self.prefix)


class AlgorithmRegistry(Mapping[str, "type[AlgoConfig]"]):
    """Algorithm name (the `algo` group option and the node's `name`) -> its config class.

    Filled by `AlgoConfig.__init_subclass__`: the first lookup imports every algorithm folder's
    `surreal.algos.<name>.config` (torch-free by rule: tests/test_layering.py), whose classes register as they are
    defined. Nothing else lists the algorithms; the default one lists first."""

    CONFIG_PACKAGE = "surreal.algos"
    CONFIG_MODULE = "config"

    def __init__(self) -> None:
        self._classes: dict[str, type[AlgoConfig]] = {}
        self._discovered = False

    def add(self, cls: type[AlgoConfig]) -> None:
        name = cls.__dict__.get("name")
        if not isinstance(name, str):
            raise TypeError(f"{cls.__qualname__} names a module but has no `name` default")
        known = self._classes.get(name)
        if known is not None and known is not cls:
            raise TypeError(f"two algorithms are called {name!r}: {known.__qualname__} and {cls.__qualname__}")
        self._classes[name] = cls

    def _all(self) -> dict[str, type[AlgoConfig]]:
        if not self._discovered:
            self._discovered = True  # first: a config module's own import may look an algorithm up
            package = importlib.import_module(self.CONFIG_PACKAGE)
            for folder in sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg):
                if importlib.util.find_spec(f"{self.CONFIG_PACKAGE}.{folder}.{self.CONFIG_MODULE}") is not None:
                    importlib.import_module(f"{self.CONFIG_PACKAGE}.{folder}.{self.CONFIG_MODULE}")
        return self._classes

    def __getitem__(self, name: str) -> type[AlgoConfig]:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        """The default algorithm first, then by name, whatever order their modules were imported in."""
        return iter(sorted(self._all(), key=lambda name: (name != DEFAULT_ALGO, name)))

    def __len__(self) -> int:
        return len(self._all())


ALGORITHMS = AlgorithmRegistry()


@dataclass
class AlgoConfig(Section):
    """What every algorithm's hyperparameters share, and what the roles read without knowing the algorithm. An
    algorithm's config inherits its flow-control regime's keys and rules: `OnPolicyConfig` (or `StalenessConfig`) or
    `OffPolicyConfig`.

    `seed` is not set by users here: the loader (and `algo_config`) copies the experiment's top-level
    `seed` into it, so the algorithm code receives one object holding everything it needs."""

    # Where the algorithm's code lives (networks, losses, the update: torch), imported only when a role
    # needs it, so that this torch-free registry is the only list of algorithms (`surreal.algos`).
    module: ClassVar[str]
    # The regime that holds actors and learner together: a class of runtime/regimes/ by its dotted name, built from the
    # experiment where a role needs it (`surreal.runtime.regimes.regime_of`), so this layer imports none of it.
    regime: ClassVar[str]
    kind: ClassVar[str]  # what the regime is, as `surreal run --help` says it: on-policy or off-policy
    replay_modes: ClassVar[tuple[str, ...]]  # the replay modes the regime learns from; the first is what `auto` picks
    # The spaces it takes (SPACE_KINDS): checked against the env once before any role starts (run/preflight.py)
    # and again where a role builds the policy (surreal/spaces.py), so an env it cannot take is one line, not a crash.
    observation_spaces: ClassVar[frozenset[str]] = frozenset({"box"})
    action_spaces: ClassVar[frozenset[str]] = frozenset({"box"})
    prefix: ClassVar[str] = "algo."

    name: str = MISSING  # the algorithm: `algo=NAME` picks it and its defaults (its config class's)
    seed: int = 1  # set by the loader from the experiment's `seed` (never an override)
    batch_size: int = 2048  # transitions per learner update: what the learner role collects before update()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that names its `module` is an algorithm: it joins the registry under its `name`."""
        super().__init_subclass__(**kwargs)
        if "module" in cls.__dict__:
            ALGORITHMS.add(cls)

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        """The algorithm's own value rules and its regime's; a subclass extends them."""
        out, chunk, mode = self.breaking("> 0", "batch_size"), self.chunk_size(cfg), cfg.replay.mode
        if self.name not in ALGORITHMS:
            out.append(f"algo.name {self.name!r} is not one of {', '.join(ALGORITHMS)}")
        if mode not in self.replay_modes:
            out.append(
                f"{self.name} is {self.kind}: replay.mode must be {' or '.join(self.replay_modes)} (got {mode!r})"
            )
        if cfg.learner.replicas > 1:
            out += self.replica_problems(cfg.learner.replicas)
        if cfg.deterministic and not (chunk > 0 and self.batch_size % chunk == 0):
            out.append(
                f"deterministic=true needs algo.batch_size ({self.batch_size}) to be a multiple of one actor message "
                f"({chunk} units)"
            )
        return out

    def bad_sizes(self, *keys: str) -> list[str]:
        """`algo.<key>` for each of these fields (MLP widths) that is not a non-empty list of positive sizes."""
        return [
            f"algo.{key} must be a non-empty list of positive sizes (got {sizes})"
            for key in keys
            if not (sizes := getattr(self, key)) or any(h <= 0 for h in sizes)
        ]

    def replica_problems(self, replicas: int) -> list[str]:
        """Why `learner.replicas` > 1 cannot split this algorithm's update among ranks (each computes its share of
        every minibatch, the gradients all-reduced); by default it has no gradients to all-reduce (ES)."""
        return [f"learner.replicas={replicas}: {self.name} has no gradient update to split; use learner.replicas=1"]

    def central_inference(self) -> bool:
        """Whether inference workers (`topology.inference=central`) can act for its actors: a worker holds one policy
        for every actor, so a policy with per-env state of its own (a recurrent cell, DDPG's OU noise) or per-actor
        sampling (ES's perturbations) cannot be served. None can by default."""
        return False

    def budget_warnings(self, budget: int, max_episode_steps: int | None) -> list[str]:
        """One line per part of `budget` (total_env_steps) the regime's defaults eat before anything is learned."""
        return []

    def one_thread(self) -> AlgoConfig:
        """These keys as serial mode runs them, on one thread where no actor is lost and wall-clock time must not
        change a run."""
        return self

    def chunk_size(self, cfg: ExperimentConfig) -> int:
        """Units (what `batch_size` counts) in one actor message: T x K transitions unless overridden."""
        return cfg.actor.chunk_steps * cfg.topology.envs_per_actor

    def max_env_steps_per_unit(self, max_episode_steps: int | None) -> int | None:
        """The most env steps one unit of data can stand for (a transition: 1), so a chunk claiming more is
        refused instead of advancing `total_env_steps` (docs/architecture.md). None: no bound is known."""
        del max_episode_steps
        return 1


@dataclass
class OnPolicyConfig(AlgoConfig):
    """The keys of the versions regime (runtime/regimes/versions.py): on-policy, every chunk learned from once, out of a
    FIFO, the actors held to the learner's parameter versions. Alone it is the "lockstep" rule (ES: a result is worth
    something only for the theta it was computed with): an actor sends its share of a batch per version, and a batch
    takes only the current version's chunks. `StalenessConfig` relaxes it."""

    regime: ClassVar[str] = "surreal.runtime.regimes.versions.VersionsRegime"
    kind: ClassVar[str] = "on-policy"
    replay_modes: ClassVar[tuple[str, ...]] = ("fifo",)

    # Elastic on-policy flow: an actor that waits longer than 1.5x the median interval between versions takes one more
    # share, so a batch short of a lost actor's share still fills; before it has seen two versions (the first update
    # may include torch.compile) it waits this long. 0: never.
    overdraft_after_s: float = 30.0

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        return super().problems(cfg) + self.breaking(">= 0", "overdraft_after_s")

    def budget_warnings(self, budget: int, max_episode_steps: int | None) -> list[str]:
        per_unit = self.max_env_steps_per_unit(max_episode_steps)
        if per_unit is None or self.batch_size * per_unit <= budget:
            return []
        steps = self.batch_size * per_unit
        amount = f"{steps:,} env steps" if per_unit == 1 else f"up to {steps:,} env steps"
        return [
            f"one update of algo.batch_size={self.batch_size:,} takes {amount}, more than steps={budget:,}: "
            "the run may end after a single update; lower algo.batch_size or raise steps"
        ]

    def one_thread(self) -> OnPolicyConfig:
        """No actor can be lost on one thread, and wall-clock time must not change a run: actors never overdraw."""
        return replace(self, overdraft_after_s=0.0)


@dataclass
class StalenessConfig(OnPolicyConfig):
    """The versions regime's "staleness" rule (PPO): actors run ahead of the learner by `rollout_ahead` shares, and an
    update learns from chunks up to `max_staleness` versions old."""

    # An actor produces at most rollout_ahead x its share of a learner batch with one parameter version, then waits for
    # the next. 1 is lock-step; 2 lets collection overlap the update with at most one version of lag; 0 never waits.
    rollout_ahead: int = 2
    max_staleness: int = 4  # chunks from parameters more than this many versions old are dropped

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        return super().problems(cfg) + self.breaking(">= 0", "rollout_ahead", "max_staleness")


@dataclass
class OffPolicyConfig(AlgoConfig):
    """The keys of the replay-ratio regime (runtime/regimes/replay_ratio.py), which an off-policy algorithm inherits:
    the replay ratio the learner keeps, the budget that holds the actors to it, and n-step returns."""

    regime: ClassVar[str] = "surreal.runtime.regimes.replay_ratio.ReplayRatioRegime"
    kind: ClassVar[str] = "off-policy"
    replay_modes: ClassVar[tuple[str, ...]] = ("uniform", "prioritized")

    learning_starts: int = 25_000  # env steps of uniform random actions before the first update
    replay_ratio: float = 1.0  # gradient updates per env step
    publish_interval: int = 16  # updates between parameter publications
    n_step: int = 1  # n-step returns, computed by the actors (truncation bootstraps, termination does not)
    # The actors together run at most rollout_ahead x actors x a chunk's env steps ahead of what the replay ratio lets
    # the learner learn from (the slack of the budget every blob carries); 0: no budget, actors never wait.
    rollout_ahead: int = 2

    def max_env_steps_per_unit(self, max_episode_steps: int | None) -> int | None:
        del max_episode_steps
        return self.n_step  # an actor's first chunk: T steps make T - n + 1 n-step transitions

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        """The rules of the replay-ratio regime's own keys and n-step returns (DDPG's and SAC's `problems` extend
        these)."""
        out = super().problems(cfg) + self.breaking("> 0", "replay_ratio", "publish_interval", "n_step")
        out += self.breaking(">= 0", "learning_starts", "rollout_ahead")
        if cfg.actor.chunk_steps < self.n_step:
            out.append(f"actor.chunk_steps ({cfg.actor.chunk_steps}) must be >= algo.n_step ({self.n_step})")
        if cfg.deterministic:
            out.append(f"deterministic=true is for on-policy algorithms: {self.name} samples its replay at random")
        return out

    def replica_problems(self, replicas: int) -> list[str]:
        """Each rank samples its own share of every minibatch from the replay (roles/learner_group.py), so a
        minibatch must split into `replicas` equal shares (algos/replica.py)."""
        if self.batch_size % replicas:
            return [f"algo.batch_size ({self.batch_size}) must be a multiple of learner.replicas ({replicas})"]
        return []

    def budget_warnings(self, budget: int, max_episode_steps: int | None) -> list[str]:
        if self.learning_starts * 2 < budget:
            return []
        left = max(0, budget - self.learning_starts)
        return [
            f"algo.learning_starts={self.learning_starts:,} (env steps of random actions before the first update) "
            f"leaves {left:,} of steps={budget:,} to learn from; set algo.learning_starts lower or steps higher"
        ]


# Env families whose `env.kwargs` are checked before any process starts, by id prefix: (the package the family needs,
# the module whose `check(env_id, kwargs)` raises a one-line ConfigError, imported only for the family's ids where the
# package is installed: the replay and ps images have none of them).
ENV_FAMILIES = {"robosuite:": ("robosuite", "surreal.envs_robosuite"), "ALE/": ("ale_py", "surreal.envs_atari")}


@dataclass
class EnvConfig(Section):
    prefix: ClassVar[str] = "env."

    id: str = "HalfCheetah-v5"  # a Gymnasium id (`surreal run --help` lists them), robosuite:<Task> or ALE/<Game>-v5
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to gymnasium.make (robosuite, ALE ids: the adapter)

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        """An id, and `kwargs` its family takes (a robosuite task's: its constructor's parameters; an Atari game's: its
        preset settings), so a typo is one line here, in every role that can build the env, rather than a traceback
        inside the family's package."""
        if not self.id.strip():
            return ["env.id must name a Gymnasium environment"]
        for family, (package, module) in ENV_FAMILIES.items():
            if self.id.startswith(family) and importlib.util.find_spec(package) is not None:
                try:
                    importlib.import_module(module).check(self.id, self.kwargs)
                except ConfigError as exc:
                    return [str(exc)]
        return []


@dataclass
class TopologyConfig(Section):
    prefix: ClassVar[str] = "topology."

    actors: int = 2  # actor processes (the shorthand `actors=N`)
    envs_per_actor: int = 1  # environments each actor steps in one batch
    replay_shards: int = 1  # replay processes, each owning a slice of the experience
    ps_replicas: int = 1  # parameter-server replicas actors fetch parameters from
    # Where the actors' policy runs: per_actor (each actor's own forward pass) | central (actors send observations
    # to `inference_workers` inference processes, which batch them across actors: roles/inference.py).
    inference: str = "per_actor"
    inference_workers: int = 1  # inference processes with inference=central

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = self.breaking("> 0", "actors", "envs_per_actor", "replay_shards", "ps_replicas", "inference_workers")
        for key, value in (("actors", self.actors), ("replay_shards", self.replay_shards)):
            if cfg.deterministic and value != 1:
                out.append(f"deterministic=true needs topology.{key}=1 (got {value})")
        if self.inference not in INFERENCE_MODES:
            out.append(f"topology.inference must be one of {', '.join(INFERENCE_MODES)} (got {self.inference!r})")
        elif self.inference == "central":
            if not cfg.algo.central_inference():
                out.append(f"topology.inference=central runs PPO's MLP policy only (got algo {cfg.algo.name})")
            if cfg.deterministic:
                out.append("topology.inference=central needs deterministic=false (serial mode has no workers)")
            if self.envs_per_actor > (most := cfg.inference.max_batch_envs):
                out.append(
                    f"topology.envs_per_actor ({self.envs_per_actor}) must fit inference.max_batch_envs ({most})"
                )
        return out


@dataclass
class ActorConfig(Section):
    prefix: ClassVar[str] = "actor."

    chunk_steps: int = 256  # environment steps per experience chunk (T); a chunk holds T x envs_per_actor
    param_fetch_interval: int = 1  # chunks between "newer than v?" checks
    fetch_timeout_s: float = 5.0  # how long an actor waits for a ps reply before asking again
    torch_threads: int = 1  # one core per actor: its batch of K observations is small

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        return self.breaking("> 0", "chunk_steps", "param_fetch_interval", "fetch_timeout_s", "torch_threads")


@dataclass
class InferenceConfig(Section):
    """The inference workers of `topology.inference=central` (roles/inference.py)."""

    prefix: ClassVar[str] = "inference."

    max_batch_envs: int = 256  # a worker serves a batch once its requests hold this many observations...
    max_wait_ms: float = 2.0  # ...or this long after the batch's first request came, whichever is first
    request_timeout_s: float = 2.0  # an actor's wait for a worker's reply before it asks the next worker
    param_poll_ms: float = 50.0  # how often a worker asks the ps for newer parameters while serving
    torch_threads: int = 1  # threads of a worker's forward pass
    # Where a worker runs its forward pass: auto (the GPU where torch sees one, else the CPU) | cpu | cuda | cuda:N.
    # Sampling draws from a generator on that device, so a worker's actions depend on its device.
    device: str = "auto"

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = self.breaking("> 0", "max_batch_envs", "request_timeout_s", "param_poll_ms", "torch_threads")
        return out + self.breaking(">= 0", "max_wait_ms") + device_problems("inference.device", self.device)


@dataclass
class ReplayConfig(Section):
    prefix: ClassVar[str] = "replay."

    mode: str = "auto"  # auto (fifo for on-policy algorithms, uniform for off-policy) | fifo | uniform | prioritized
    capacity: int = 100_000  # transitions per shard
    # And bytes per shard: the oldest chunks go first (a transition replay refuses a layout whose `capacity`
    # transitions would not fit).
    capacity_bytes: int = 4 << 30
    alpha: float = 0.6  # prioritized replay exponents (Schaul et al. 2016)
    beta: float = 0.4  # prioritized replay's importance-sampling exponent
    priority_eps: float = 1e-6  # added to every priority, so every transition can be sampled
    max_message_bytes: int = 64 * MIB  # the largest message a shard accepts or sends
    # Frames per ZMQ message. 256, not 64: a FIFO reply packs several chunks (one frame per array each)
    # up to this budget, and fewer, larger replies keep the learner's socket overhead down.
    max_frames: int = 256
    # Seconds between snapshots of a transition shard to <run dir>/replay/shard-<i>/, so a restarted shard comes
    # back with what it held; a shard also writes one on SIGTERM (a FIFO only then). 0: no snapshots at all.
    snapshot_interval_s: float = 30.0
    # One stored transition's fields ({name: {dtype, shape, low, high}}), which lay a transition shard out when it
    # starts: resolved by the launcher (surreal run, --serial, surreal helm-values) from the algorithm's chunk fields
    # and the env's spaces, replacing any value given. A chunk that differs is refused, the first one too. None: the
    # first chunk lays the shard out (a config no launcher prepared).
    layout: dict[str, Any] | None = None

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = self.breaking("> 0", "capacity", "capacity_bytes", "priority_eps", "max_message_bytes", "max_frames")
        out += self.breaking(">= 0", "snapshot_interval_s") + self.breaking("in [0, 1]", "alpha", "beta")
        if self.mode not in REPLAY_MODES:
            out.append(f"replay.mode must be one of {', '.join(REPLAY_MODES)} (got {self.mode!r})")
        if self.capacity < (batch := cfg.algo.batch_size):
            out.append(f"replay.capacity ({self.capacity}) must hold one batch (algo.batch_size={batch})")
        if self.layout is not None:
            from surreal.proto.wire import fields_of  # NumPy and the codec: only for a config that has a layout

            try:
                fields_of(self.layout)
            except ValueError as exc:
                out.append(f"replay.layout: {exc}")
        return out


@dataclass
class LearnerConfig(Section):
    prefix: ClassVar[str] = "learner."

    prefetch: int = 2  # sample requests kept in flight per shard
    # Off-policy: minibatches (of algo.batch_size) one sample request brings; the learner steps through them
    # reading the device once, and their priorities go back in one message.
    minibatches_per_sample: int = 4
    checkpoint_interval: int = 20  # updates between checkpoints (off-policy: metrics rows)
    checkpoint_interval_s: float = 60.0  # and at least this often, so a killed learner loses little
    keep_checkpoints: int = 3  # the newest this many checkpoints are kept
    eval_episodes: int = 10  # episodes of the deterministic policy per evaluation (final and evaluator's)
    # Env steps between evaluations of the published policy by the evaluator role (roles/evaluator.py:
    # evals.jsonl, a curve of eval returns; RL Zoo's eval_freq); 0, or not below the budget: only the final
    # evaluation, and no evaluator runs.
    eval_interval: int = 25_000
    torch_threads: int = 1  # CPU threads for a CPU learner: PPO's 64-sample minibatches gain nothing from more
    # torch.compile the update (PPO: the minibatch loss; on CUDA the whole step replayed as a CUDA graph). The
    # first update pays the compilation (about 17 s on one CPU core with a cold inductor cache).
    compile: bool = False
    # Learner processes training one model data-parallel (torch.distributed: gloo on CPUs, NCCL on GPUs): each
    # computes 1/replicas of every minibatch (on-policy: its share of rank 0's batch; off-policy: a share it samples
    # from the replay itself) and the gradients are all-reduced; rank 0 publishes and checkpoints.
    replicas: int = 1
    # The longest any collective of the learner group may wait (the rendezvous included): a rank lost or stuck
    # stops the others within this, and the group starts again from its last checkpoint.
    group_timeout_s: float = 60.0

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = self.breaking("> 0", "prefetch", "minibatches_per_sample", "checkpoint_interval", "checkpoint_interval_s")
        out += self.breaking("> 0", "keep_checkpoints", "eval_episodes", "torch_threads", "replicas", "group_timeout_s")
        if self.replicas > 1 and ":" in cfg.device:
            rank_devices = "learner.replicas > 1 puts each rank on cuda:<LOCAL_RANK>: set device=cuda or auto"
            out.append(f"{rank_devices} (got {cfg.device!r})")
        return out + self.breaking(">= 0", "eval_interval")


@dataclass
class PSConfig(Section):
    prefix: ClassVar[str] = "ps."

    max_message_bytes: int = 64 * MIB  # the largest parameter blob a ps accepts

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        return self.breaking("> 0", "max_message_bytes")


@dataclass
class ChaosConfig(Section):
    """Rehearsed preemption of actors: the local launcher (launch/chaos.py) and, in a cluster, the chart's chaos
    Job kill actors on this schedule, so a run's tolerance of lost actors can be tried anywhere. All off by
    default; learners, replay shards and ps are never touched."""

    seed: int = 0  # which actor dies when is drawn from this seed
    kill_every_s: float = 0.0  # kill a live actor this often (local: SIGKILL; chart: pod delete); 0: never
    restart: bool = True  # killed actors are started again (at once, as a supervisor or StatefulSet would)
    alive: int | None = None  # during the window keep only this many actors alive (None: no window)
    window_start_s: float = 0.0  # the window opens this long after the run starts ...
    window_s: float = 0.0  # ... and lasts this long; then the held-down actors start again

    prefix: ClassVar[str] = "chaos."

    @property
    def active(self) -> bool:
        return self.kill_every_s > 0 or (self.alive is not None and self.window_s > 0)

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out, actors = self.breaking(">= 0", "kill_every_s", "window_start_s", "window_s"), cfg.topology.actors
        if self.alive is not None and not 0 <= self.alive <= actors:
            out.append(f"chaos.alive must be between 0 and topology.actors={actors} (got {self.alive})")
        if self.active and cfg.deterministic:
            out.append("chaos needs deterministic=false: killed actors are not replayable")
        return out


@dataclass
class ExperimentConfig:
    name: str | None = None  # run folder name; None: a timestamped name chosen by the launcher
    # A bucket folder that holds run folders (s3://BUCKET/PATH, gs://..., az://CONTAINER/PATH; the cloud extra): the
    # run is mirrored at <run_uri>/<name> and resumes from there (surreal/runstore.py). None: local disk only.
    run_uri: str | None = None
    algo: AlgoConfig = field(
        default_factory=lambda: ALGORITHMS[DEFAULT_ALGO]()
    )  # typed by ALGORITHMS[name] when loaded
    env: EnvConfig = field(default_factory=EnvConfig)
    seed: int = 1  # seeds every environment, network and random draw (deterministic=true: the same run bit for bit)
    total_env_steps: int = 1_000_000  # the training budget in env steps (the shorthand `steps=N`)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    deterministic: bool = False  # 1 actor, 1 shard, lock-step versions, torch deterministic algorithms
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    inference: InferenceConfig = field(default_factory=InferenceConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    ps: PSConfig = field(default_factory=PSConfig)
    chaos: ChaosConfig = field(default_factory=ChaosConfig)

    def __post_init__(self) -> None:
        # `replay.mode: auto` follows the algorithm, so `algo=ddpg` alone gives a transition replay.
        if self.replay.mode == "auto":
            self.replay.mode = self.algo.replay_modes[0]

    def problems(self) -> list[str]:
        """The top-level keys' rules, then each section's (`Section.problems`)."""
        out = rule_problems("> 0", {"total_env_steps": self.total_env_steps}, "")
        out += rule_problems(">= 0", {"seed": self.seed}, "") + device_problems("device", self.device)
        if self.name is not None and RUN_NAME.fullmatch(self.name) is None:
            out.append(f"name={self.name!r} {RUN_NAME_RULE}")
        if self.run_uri is not None:
            from surreal.runstore import uri_problem  # fsspec-free: URIs are only parsed here

            if problem := uri_problem(self.run_uri):
                out.append(f"run_uri: {problem}")
        sections: list[Section] = [self.env, self.topology, self.actor, self.inference, self.replay, self.learner]
        for section in [*sections, self.ps, self.chaos, self.algo]:
            out += section.problems(self)
        return out

    @property
    def evaluates_while_training(self) -> bool:
        """Whether an evaluator runs beside the learner: `learner.eval_interval` is set and below the budget (an
        interval the run never reaches would only cost a process; the final evaluation runs either way)."""
        return 0 < self.learner.eval_interval < self.total_env_steps


def device_problems(key: str, device: str) -> list[str]:
    return [] if DEVICE.fullmatch(device) else [f"{key} must be auto, cpu, cuda or cuda:N (got {device!r})"]


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """Check values and cross-field rules; raise one ConfigError listing every problem, else return `cfg`."""
    problems = cfg.problems()
    if problems:
        raise ConfigError("invalid experiment config:\n  - " + "\n  - ".join(problems))
    return cfg
