"""The typed experiment schema: one dataclass tree that Hydra merges YAML and overrides onto.

Typed so a typo'd key or a wrong type fails while the config is composed, before any process starts;
`validate` then checks the values and the cross-field rules, listing every problem at once. Torch-free:
the replay and ps roles read it too.

Algorithms slot in through `ALGORITHMS`: each one is an `AlgoConfig` subclass naming its `module`, with
its own `name`, its own YAML in the Hydra group `conf/algo/<name>.yaml` (chosen with `algo=<name>`) and its
own `problems` check. A subclass registers itself when it is defined; the registry imports, on first lookup,
every torch-free `surreal/algos/<name>_config.py`, so an algorithm's config lives beside its code and no list
here names it. The loader types the `algo` node with the class its `name` selects, so `algo.lr` is checked
against PPO's fields when PPO is chosen and against DDPG's when DDPG is.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from omegaconf import MISSING

from surreal.errors import ConfigError

MIB = 1 << 20
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
SPACE_KINDS = {"box": "flat Box", "discrete": "Discrete"}
INFERENCE_MODES = ("per_actor", "central")  # `topology.inference`
RECURRENT_CELLS = ("lstm", "gru")  # PPO's `algo.recurrent`
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


class AlgorithmRegistry(Mapping[str, "type[AlgoConfig]"]):
    """Algorithm name (the `algo` group option and the node's `name`) -> its config class.

    Filled by `AlgoConfig.__init_subclass__`: the classes below register as they are defined, and the first
    lookup imports every `surreal.algos.<name>_config` module (torch-free by rule: tests/test_layering.py),
    whose classes register the same way. Nothing else lists the algorithms."""

    CONFIG_PACKAGE = "surreal.algos"
    CONFIG_SUFFIX = "_config"

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
            for module in sorted(m.name for m in pkgutil.iter_modules(package.__path__)):
                if module.endswith(self.CONFIG_SUFFIX):
                    importlib.import_module(f"{self.CONFIG_PACKAGE}.{module}")
        return self._classes

    def __getitem__(self, name: str) -> type[AlgoConfig]:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


ALGORITHMS = AlgorithmRegistry()


@dataclass
class AlgoConfig:
    """What every algorithm's hyperparameters share, and what the roles read without knowing the algorithm.

    `seed` is not set by users here: the loader (and `algo_config`) copies the experiment's top-level
    `seed` into it, so the algorithm code receives one object holding everything it needs."""

    # Where the algorithm's code lives (networks, losses, the update: torch), imported only when a role
    # needs it, so that this torch-free registry is the only list of algorithms (`surreal.algos`).
    module: ClassVar[str]
    # The flow-control rule that holds actors and learner together (runtime/regimes/): "staleness" and
    # "lockstep" are on-policy (FIFO replay, every chunk used once), "replay_ratio" is off-policy.
    flow_control: ClassVar[str] = "staleness"
    # The spaces it takes (SPACE_KINDS): checked against the env once before any role starts (run/preflight.py)
    # and again where a role builds the policy (surreal/spaces.py), so an env it cannot take is one line, not a crash.
    observation_spaces: ClassVar[frozenset[str]] = frozenset({"box"})
    action_spaces: ClassVar[frozenset[str]] = frozenset({"box"})

    name: str = MISSING  # the algorithm: `algo=NAME` picks it and its packaged defaults (conf/algo/NAME.yaml)
    seed: int = 1  # set by the loader from the experiment's `seed` (never an override)
    batch_size: int = 2048  # transitions per learner update: what the learner role collects before update()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that names its `module` is an algorithm: it joins the registry under its `name`."""
        super().__init_subclass__(**kwargs)
        if "module" in cls.__dict__:
            ALGORITHMS.add(cls)

    @property
    def on_policy(self) -> bool:
        return self.flow_control != "replay_ratio"

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        """The algorithm's own value rules (`validate` adds them to its list); none by default."""
        return []

    def breaking(self, rule: str, *keys: str) -> list[str]:
        """`algo.<key> must be <rule> (got <value>)` for each of these fields whose value breaks `rule` (RULES)."""
        return rule_problems(rule, {key: getattr(self, key) for key in keys})

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

    def chunk_size(self, cfg: ExperimentConfig) -> int:
        """Units (what `batch_size` counts) in one actor message: T x K transitions unless overridden."""
        return cfg.actor.chunk_steps * cfg.topology.envs_per_actor

    def max_env_steps_per_unit(self, max_episode_steps: int | None) -> int | None:
        """The most env steps one unit of data can stand for (a transition: 1), so a chunk claiming more is
        refused instead of advancing `total_env_steps` (docs/architecture.md). None: no bound is known."""
        del max_episode_steps
        return 1


@dataclass
class OffPolicyConfig(AlgoConfig):
    """What an off-policy algorithm adds: the replay ratio the learner keeps (runtime/regimes/replay_ratio.py)."""

    flow_control: ClassVar[str] = "replay_ratio"

    learning_starts: int = 25_000  # env steps of uniform random actions before the first update
    replay_ratio: float = 1.0  # gradient updates per env step
    publish_interval: int = 16  # updates between parameter publications
    n_step: int = 1  # n-step returns, computed by the actors (truncation bootstraps, termination does not)

    def max_env_steps_per_unit(self, max_episode_steps: int | None) -> int | None:
        del max_episode_steps
        return self.n_step  # an actor's first chunk: T steps make T - n + 1 n-step transitions

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        """The rules of the replay-ratio regime's own keys and n-step returns (DDPG's and SAC's `problems` extend
        these)."""
        out = self.breaking("> 0", "replay_ratio", "publish_interval", "n_step")
        out += self.breaking(">= 0", "learning_starts")
        if cfg.actor.chunk_steps < self.n_step:
            out.append(f"actor.chunk_steps ({cfg.actor.chunk_steps}) must be >= algo.n_step ({self.n_step})")
        return out

    def replica_problems(self, replicas: int) -> list[str]:
        """Each rank samples its own share of every minibatch from the replay (roles/learner_group.py), so a
        minibatch must split into `replicas` equal shares (algos/replica.py)."""
        if self.batch_size % replicas:
            return [f"algo.batch_size ({self.batch_size}) must be a multiple of learner.replicas ({replicas})"]
        return []


@dataclass
class PPOConfig(AlgoConfig):
    """PPO hyperparameters; defaults are CleanRL's ppo_continuous_action with four of Tianshou's MuJoCo PPO
    (both cited in conf/algo/ppo.yaml; `preset=ppo-cleanrl` is CleanRL's exactly)."""

    module: ClassVar[str] = "surreal.algos.ppo"
    action_spaces: ClassVar[frozenset[str]] = frozenset({"box", "discrete"})  # Discrete: a categorical head

    name: str = "ppo"
    lr: float = 3e-4  # Adam step size
    anneal_lr: bool = True  # decay lr linearly to 0 over total_env_steps
    gamma: float = 0.99  # discount factor
    gae_lambda: float = 0.95  # GAE's lambda: bias (0) against variance (1) of the advantages
    batch_size: int = 2048  # transitions per update (CleanRL's num_envs x num_steps), from all actors together
    minibatch_size: int = 64  # transitions per gradient step; update_epochs x batch_size / minibatch_size steps
    update_epochs: int = 10  # passes over each batch
    clip_coef: float = 0.2  # the surrogate's clipping range for the probability ratio (and the value's)
    clip_vloss: bool = False  # clip the value loss as the policy's (CleanRL: true)
    norm_adv: bool = False  # normalize advantages per minibatch (CleanRL: true)
    ent_coef: float = 0.0  # weight of the entropy bonus
    vf_coef: float = 0.25  # weight of the value loss (CleanRL: 0.5)
    max_grad_norm: float = 0.5  # global gradient-norm clip
    target_kl: float | None = None  # stop an update's epochs early once the approximate KL passes this; null: never
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])  # tanh MLP widths of actor and critic each
    log_std_init: float = -0.5  # the state-independent log-std's start (Tianshou's MuJoCo PPO; CleanRL 0)
    obs_norm: bool = True  # normalize observations by running mean and std (the statistics travel to the actors)
    obs_clip: float = 10.0  # clip normalized observations to +-this
    reward_scale: bool = True  # divide rewards by the running std of the discounted return
    reward_clip: float = 10.0  # clip scaled rewards to +-this
    # lstm | gru: a recurrent cell over the observations feeding both heads, trained by truncated backpropagation
    # through time over each chunk from its stored start state; minibatches are whole chunk sequences. null: MLPs
    recurrent: str | None = None
    rnn_hidden_size: int = 64  # the recurrent cell's width (its state: h and c for an LSTM, h for a GRU)

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = self.breaking(
            "> 0",
            "minibatch_size",
            "rnn_hidden_size",
            "update_epochs",
            "lr",
            "clip_coef",
            "max_grad_norm",
            "obs_clip",
            "reward_clip",
        )
        out += self.breaking(">= 0", "ent_coef", "vf_coef")
        out += self.breaking("in (0, 1]", "gamma")
        out += self.breaking("in [0, 1]", "gae_lambda")
        out += self.breaking("> 0 or null", "target_kl")
        out += self.bad_sizes("hidden_sizes")
        if self.minibatch_size > self.batch_size:
            out.append(f"algo.minibatch_size ({self.minibatch_size}) must be <= algo.batch_size ({self.batch_size})")
        if self.recurrent is not None and self.recurrent not in RECURRENT_CELLS:
            out.append(f"algo.recurrent must be one of {', '.join(RECURRENT_CELLS)} or null (got {self.recurrent!r})")
        elif self.recurrent is not None and self.minibatch_size < cfg.actor.chunk_steps:
            out.append(
                f"algo.minibatch_size ({self.minibatch_size}) must be >= actor.chunk_steps ({cfg.actor.chunk_steps})"
                f" with algo.recurrent: a minibatch is minibatch_size // chunk_steps whole chunk sequences"
            )
        return out

    def replica_problems(self, replicas: int) -> list[str]:
        """Each rank computes its share of every minibatch: `minibatch_size` must split evenly."""
        if self.minibatch_size % replicas:
            return [f"algo.minibatch_size ({self.minibatch_size}) must be a multiple of learner.replicas ({replicas})"]
        return []


@dataclass
class DDPGConfig(OffPolicyConfig):
    """DDPG (Lillicrap et al. 2016) with TD3's extras (Fujimoto et al. 2018) as switches; defaults are CleanRL's
    ddpg_continuous_action (cited in conf/algo/ddpg.yaml)."""

    module: ClassVar[str] = "surreal.algos.ddpg"

    name: str = "ddpg"
    batch_size: int = 256  # transitions per gradient step, sampled from replay
    actor_lr: float = 3e-4  # Adam step size of the actor
    critic_lr: float = 3e-4  # Adam step size of the critic(s)
    gamma: float = 0.99  # discount factor
    tau: float = 0.005  # soft target update; used when target_update_period is 0
    target_update_period: int = 0  # > 0: hard copy of the targets every this many critic updates
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])  # ReLU MLP widths of actor and critic each
    exploration_noise: float = 0.1  # Gaussian (or OU sigma), in units of the action range's half-width
    noise_spread: float = 1.0  # actor i's scale: exploration_noise * spread**(2i/(N-1) - 1); 1 = all equal
    noise_type: str = "gaussian"  # gaussian | ou
    ou_theta: float = 0.15  # Ornstein-Uhlenbeck mean reversion (noise_type=ou)
    policy_delay: int = 2  # critic updates per actor (and target) update; CleanRL's policy_frequency
    twin_critics: bool = False  # TD3: min of two critics in the target
    target_policy_noise: float = 0.0  # TD3: 0.2 (smoothing noise on the target action); 0 = DDPG
    target_noise_clip: float = 0.5  # TD3: clip of the target smoothing noise, relative to the action half-range
    max_grad_norm: float | None = None  # gradient-norm clip of each network; null: none

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = super().problems(cfg)
        out += self.breaking("> 0", "actor_lr", "critic_lr", "policy_delay", "noise_spread")
        out += self.breaking(
            ">= 0", "exploration_noise", "target_update_period", "ou_theta", "target_policy_noise", "target_noise_clip"
        )
        out += self.breaking("in (0, 1]", "gamma", "tau")
        if self.noise_type not in ("gaussian", "ou"):
            out.append(f"algo.noise_type must be gaussian or ou (got {self.noise_type!r})")
        out += self.bad_sizes("hidden_sizes")
        out += self.breaking("> 0 or null", "max_grad_norm")
        return out


@dataclass
class ESConfig(AlgoConfig):
    """OpenAI-ES (Salimans et al. 2017); defaults from the paper's MuJoCo settings (cited in conf/algo/es.yaml)."""

    module: ClassVar[str] = "surreal.algos.es"
    flow_control: ClassVar[str] = "lockstep"  # a result is only worth something for the theta it was computed with
    action_spaces: ClassVar[frozenset[str]] = frozenset({"box", "discrete"})  # Discrete: the argmax of the outputs

    name: str = "es"
    batch_size: int = 128  # antithetic pairs per generation: the population is 2 x batch_size episodes
    pairs_per_chunk: int = 4  # pairs an actor evaluates per message
    sigma: float = 0.02  # std of the parameter perturbations
    lr: float = 0.01  # Adam step size on theta
    weight_decay: float = 0.005  # the paper's l2coeff
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])  # tanh MLP widths of the policy
    noise_table_size: int = 10_000_000  # float32 entries (40 MB), the same table in every process
    noise_seed: int = 123  # every process builds the same noise table from it
    obs_norm: bool = True  # normalize observations by the running statistics the actors report
    obs_clip: float = 5.0  # clip normalized observations to +-this

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = self.breaking("> 0", "pairs_per_chunk", "sigma", "lr", "noise_table_size", "obs_clip")
        out += self.breaking(">= 0", "weight_decay")
        return out + self.bad_sizes("hidden_sizes")

    def chunk_size(self, cfg: ExperimentConfig) -> int:
        return self.pairs_per_chunk

    def max_env_steps_per_unit(self, max_episode_steps: int | None) -> int | None:
        return None if max_episode_steps is None else 2 * max_episode_steps  # a unit is two whole episodes


@dataclass
class EnvConfig:
    id: str = "HalfCheetah-v5"  # a Gymnasium id (`surreal run --help` lists them), robosuite:<Task> or ALE/<Game>-v5
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to gymnasium.make (robosuite, ALE ids: the adapter)


@dataclass
class TopologyConfig:
    actors: int = 2  # actor processes (the shorthand `actors=N`)
    envs_per_actor: int = 1  # environments each actor steps in one batch
    replay_shards: int = 1  # replay processes, each owning a slice of the experience
    ps_replicas: int = 1  # parameter-server replicas actors fetch parameters from
    # Where the actors' policy runs: per_actor (each actor's own forward pass) | central (actors send observations
    # to `inference_workers` inference processes, which batch them across actors: roles/inference.py).
    inference: str = "per_actor"
    inference_workers: int = 1  # inference processes with inference=central


@dataclass
class ActorConfig:
    chunk_steps: int = 256  # environment steps per experience chunk (T); a chunk holds T x envs_per_actor
    param_fetch_interval: int = 1  # chunks between "newer than v?" checks
    fetch_timeout_s: float = 5.0  # how long an actor waits for a ps reply before asking again
    torch_threads: int = 1  # one core per actor: its batch of K observations is small
    # On-policy throttle: an actor produces at most rollout_ahead x its share of a learner batch with one
    # parameter version, then waits for the next. 1 is lock-step; 2 lets collection overlap the update
    # with at most one version of lag; 0 never waits (off-policy).
    rollout_ahead: int = 2
    # Elastic on-policy flow (runtime/regimes/versions.py): an actor that waits longer than 1.5x the median
    # interval between versions takes one more share, so a batch short of a lost actor's share still fills;
    # before it has seen two versions (the first update may include torch.compile) it waits this long. 0: never.
    overdraft_after_s: float = 30.0


@dataclass
class InferenceConfig:
    """The inference workers of `topology.inference=central` (roles/inference.py)."""

    max_batch_envs: int = 256  # a worker serves a batch once its requests hold this many observations...
    max_wait_ms: float = 2.0  # ...or this long after the batch's first request came, whichever is first
    request_timeout_s: float = 2.0  # an actor's wait for a worker's reply before it asks the next worker
    param_poll_ms: float = 50.0  # how often a worker asks the ps for newer parameters while serving
    torch_threads: int = 1  # threads of a worker's forward pass
    # Where a worker runs its forward pass: auto (the GPU where torch sees one, else the CPU) | cpu | cuda | cuda:N.
    # Sampling draws from a generator on that device, so a worker's actions depend on its device.
    device: str = "auto"


@dataclass
class ReplayConfig:
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


@dataclass
class LearnerConfig:
    prefetch: int = 2  # sample requests kept in flight per shard
    # Off-policy: minibatches (of algo.batch_size) one sample request brings; the learner steps through them
    # reading the device once, and their priorities go back in one message.
    minibatches_per_sample: int = 4
    max_staleness: int = 4  # chunks from parameters more than this many versions old are dropped
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


@dataclass
class PSConfig:
    max_message_bytes: int = 64 * MIB  # the largest parameter blob a ps accepts


@dataclass
class ChaosConfig:
    """Rehearsed preemption of actors: the local launcher (launch/chaos.py) and, in a cluster, the chart's chaos
    Job kill actors on this schedule, so a run's tolerance of lost actors can be tried anywhere. All off by
    default; learners, replay shards and ps are never touched."""

    seed: int = 0  # which actor dies when is drawn from this seed
    kill_every_s: float = 0.0  # kill a live actor this often (local: SIGKILL; chart: pod delete); 0: never
    restart: bool = True  # killed actors are started again (at once, as a supervisor or StatefulSet would)
    alive: int | None = None  # during the window keep only this many actors alive (None: no window)
    window_start_s: float = 0.0  # the window opens this long after the run starts ...
    window_s: float = 0.0  # ... and lasts this long; then the held-down actors start again

    @property
    def active(self) -> bool:
        return self.kill_every_s > 0 or (self.alive is not None and self.window_s > 0)


@dataclass
class ExperimentConfig:
    name: str | None = None  # run folder name; None: a timestamped name chosen by the launcher
    # A bucket folder that holds run folders (s3://BUCKET/PATH, gs://..., az://CONTAINER/PATH; the cloud extra): the
    # run is mirrored at <run_uri>/<name> and resumes from there (surreal/runstore.py). None: local disk only.
    run_uri: str | None = None
    algo: AlgoConfig = field(default_factory=PPOConfig)  # typed by ALGORITHMS[algo.name] when loaded
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
            self.replay.mode = "fifo" if self.algo.on_policy else "uniform"

    @property
    def evaluates_while_training(self) -> bool:
        """Whether an evaluator runs beside the learner: `learner.eval_interval` is set and below the budget (an
        interval the run never reaches would only cost a process; the final evaluation runs either way)."""
        return 0 < self.learner.eval_interval < self.total_env_steps


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """Check values and cross-field rules; raise one ConfigError listing every problem, else return `cfg`."""
    problems: list[str] = []

    def need(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    positive = {
        "total_env_steps": cfg.total_env_steps,
        "topology.actors": cfg.topology.actors,
        "topology.envs_per_actor": cfg.topology.envs_per_actor,
        "topology.replay_shards": cfg.topology.replay_shards,
        "topology.ps_replicas": cfg.topology.ps_replicas,
        "topology.inference_workers": cfg.topology.inference_workers,
        "inference.max_batch_envs": cfg.inference.max_batch_envs,
        "inference.request_timeout_s": cfg.inference.request_timeout_s,
        "inference.param_poll_ms": cfg.inference.param_poll_ms,
        "inference.torch_threads": cfg.inference.torch_threads,
        "actor.chunk_steps": cfg.actor.chunk_steps,
        "actor.param_fetch_interval": cfg.actor.param_fetch_interval,
        "actor.fetch_timeout_s": cfg.actor.fetch_timeout_s,
        "actor.torch_threads": cfg.actor.torch_threads,
        "replay.capacity": cfg.replay.capacity,
        "replay.capacity_bytes": cfg.replay.capacity_bytes,
        "replay.priority_eps": cfg.replay.priority_eps,
        "replay.max_message_bytes": cfg.replay.max_message_bytes,
        "replay.max_frames": cfg.replay.max_frames,
        "learner.prefetch": cfg.learner.prefetch,
        "learner.minibatches_per_sample": cfg.learner.minibatches_per_sample,
        "learner.checkpoint_interval": cfg.learner.checkpoint_interval,
        "learner.checkpoint_interval_s": cfg.learner.checkpoint_interval_s,
        "learner.keep_checkpoints": cfg.learner.keep_checkpoints,
        "learner.eval_episodes": cfg.learner.eval_episodes,
        "learner.torch_threads": cfg.learner.torch_threads,
        "learner.replicas": cfg.learner.replicas,
        "learner.group_timeout_s": cfg.learner.group_timeout_s,
        "ps.max_message_bytes": cfg.ps.max_message_bytes,
        "algo.batch_size": cfg.algo.batch_size,
    }
    problems += rule_problems("> 0", positive, prefix="")
    non_negative = {
        "seed": cfg.seed,
        "actor.overdraft_after_s": cfg.actor.overdraft_after_s,
        "actor.rollout_ahead": cfg.actor.rollout_ahead,
        "chaos.kill_every_s": cfg.chaos.kill_every_s,
        "chaos.window_start_s": cfg.chaos.window_start_s,
        "chaos.window_s": cfg.chaos.window_s,
        "learner.eval_interval": cfg.learner.eval_interval,
        "learner.max_staleness": cfg.learner.max_staleness,
        "replay.snapshot_interval_s": cfg.replay.snapshot_interval_s,
        "inference.max_wait_ms": cfg.inference.max_wait_ms,
    }
    problems += rule_problems(">= 0", non_negative, prefix="")
    problems += rule_problems(
        "in [0, 1]", {"replay.alpha": cfg.replay.alpha, "replay.beta": cfg.replay.beta}, prefix=""
    )
    chaos = cfg.chaos
    need(
        chaos.alive is None or 0 <= chaos.alive <= cfg.topology.actors,
        f"chaos.alive must be between 0 and topology.actors={cfg.topology.actors} (got {chaos.alive})",
    )
    need(not (chaos.active and cfg.deterministic), "chaos needs deterministic=false: killed actors are not replayable")
    need(
        cfg.name is None or RUN_NAME.fullmatch(cfg.name) is not None,
        f"name={cfg.name!r} {RUN_NAME_RULE}",
    )
    if cfg.run_uri is not None:
        from surreal.runstore import uri_problem  # fsspec-free: URIs are only parsed here

        problem = uri_problem(cfg.run_uri)
        need(problem is None, f"run_uri: {problem}")
    need(bool(cfg.env.id.strip()), "env.id must name a Gymnasium environment")
    if cfg.env.id.startswith("robosuite:") and importlib.util.find_spec("robosuite") is not None:
        # A robosuite task's kwargs are its constructor's parameters: a typo is caught here, in every role that
        # can build the env, rather than as a traceback inside robosuite. Imported only for robosuite ids.
        from surreal.envs_robosuite import check

        try:
            check(cfg.env.id, cfg.env.kwargs)
        except ConfigError as exc:
            problems.append(str(exc))
    if cfg.env.id.startswith("ALE/") and importlib.util.find_spec("ale_py") is not None:
        # The same for an Atari game's preset settings (envs_atari.py); ale-py is imported only for ALE ids.
        from surreal.envs_atari import check as check_atari

        try:
            check_atari(cfg.env.id, cfg.env.kwargs)
        except ConfigError as exc:
            problems.append(str(exc))
    need(DEVICE.fullmatch(cfg.device) is not None, f"device must be auto, cpu, cuda or cuda:N (got {cfg.device!r})")
    need(
        cfg.learner.replicas == 1 or ":" not in cfg.device,
        f"learner.replicas > 1 puts each rank on cuda:<LOCAL_RANK>: set device=cuda or auto (got {cfg.device!r})",
    )
    need(
        cfg.replay.mode in REPLAY_MODES,
        f"replay.mode must be one of {', '.join(REPLAY_MODES)} (got {cfg.replay.mode!r})",
    )
    if cfg.replay.layout is not None:
        from surreal.proto.wire import fields_of  # NumPy and the codec: only for a config that has a layout

        try:
            fields_of(cfg.replay.layout)
        except ValueError as exc:
            problems.append(f"replay.layout: {exc}")

    topo = cfg.topology
    need(
        topo.inference in INFERENCE_MODES,
        f"topology.inference must be one of {', '.join(INFERENCE_MODES)} (got {topo.inference!r})",
    )
    need(
        DEVICE.fullmatch(cfg.inference.device) is not None,
        f"inference.device must be auto, cpu, cuda or cuda:N (got {cfg.inference.device!r})",
    )
    if topo.inference == "central":
        # A worker holds one policy for every actor: a policy with per-env state of its own (a recurrent cell,
        # DDPG's OU noise) or per-actor sampling (ES's perturbations) would need it per actor.
        need(
            cfg.algo.name == "ppo" and getattr(cfg.algo, "recurrent", None) is None,
            f"topology.inference=central runs PPO's MLP policy only (got algo {cfg.algo.name})",
        )
        need(not cfg.deterministic, "topology.inference=central needs deterministic=false (serial mode has no workers)")
        need(
            topo.envs_per_actor <= cfg.inference.max_batch_envs,
            f"topology.envs_per_actor ({topo.envs_per_actor}) must fit inference.max_batch_envs "
            f"({cfg.inference.max_batch_envs})",
        )

    algo = cfg.algo
    need(algo.name in ALGORITHMS, f"algo.name {algo.name!r} is not one of {', '.join(ALGORITHMS)}")
    need(
        cfg.replay.capacity >= algo.batch_size,
        f"replay.capacity ({cfg.replay.capacity}) must hold one batch (algo.batch_size={algo.batch_size})",
    )
    if algo.on_policy:
        need(cfg.replay.mode == "fifo", f"{algo.name} is on-policy: replay.mode must be fifo (got {cfg.replay.mode!r})")
    else:
        need(cfg.replay.mode != "fifo", f"{algo.name} is off-policy: replay.mode must be uniform or prioritized")
        need(
            not cfg.deterministic,
            f"deterministic=true is for on-policy algorithms: {algo.name} samples its replay at random",
        )
    problems += algo.problems(cfg)
    if cfg.learner.replicas > 1:
        problems += algo.replica_problems(cfg.learner.replicas)
    if cfg.deterministic:
        chunk = algo.chunk_size(cfg)
        need(cfg.topology.actors == 1, f"deterministic=true needs topology.actors=1 (got {cfg.topology.actors})")
        need(
            cfg.topology.replay_shards == 1,
            f"deterministic=true needs topology.replay_shards=1 (got {cfg.topology.replay_shards})",
        )
        need(
            chunk > 0 and algo.batch_size % chunk == 0,
            f"deterministic=true needs algo.batch_size ({algo.batch_size}) to be a multiple of "
            f"one actor message ({chunk} units)",
        )
    if problems:
        raise ConfigError("invalid experiment config:\n  - " + "\n  - ".join(problems))
    return cfg
