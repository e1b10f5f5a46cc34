"""`surreal.load_policy(path)`: a trained policy to act with, from a run folder, a policy folder or file, or a
checkpoint.

    policy = surreal.load_policy("runs/my-run")
    obs, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(policy.act(obs))

`Policy.act` takes one observation or a batch (NumPy in, NumPy out); the observation normalizer and the action
squashing or clipping are inside. A recurrent policy (PPO with `algo.recurrent`) remembers the episode so far of each
env of the batch it acts for: call `policy.reset()` before a new batch of episodes and `policy.reset(done)` with the
envs whose episode ended (`surreal.runtime.rollout.evaluate` does); `act` refuses a batch of another size until then.
Deterministic actions come from the algorithm's own network as one torch module traced once at load (TorchScript
runs a small MLP for about what one eager module call costs, while the normalizer and clip as separate eager calls
would double it: bench/policy_act.py); ES's come from its NumPy forward. Either way they are, bit for bit on the
CPU, the actions the learner's final evaluation took. `deterministic=False` samples as the algorithm's actors do (its
own seeded generator).
"""

from __future__ import annotations

import pickle
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from surreal.policy.artifact import (
    BEST_DIR,
    FILE_NAME,
    POLICY_DIR,
    ArtifactError,
    check_finite,
    check_header,
    read_policy_file,
)
from surreal.policy.build import ArtifactPolicy, blueprint, rebuild
from surreal.runstore import is_uri

CHECKPOINT = re.compile(r"^ckpt-\d{10}\.pt$")


class RecurrentPolicy(Protocol):
    """What a recurrent algorithm's policy adds (algos/ppo/policy.py `PPOPolicy` with `algo.recurrent`): the state of
    the envs it acts for, built on demand, and its reset."""

    state: Any  # torch.Tensor [B, *state_shape], or None before the first act

    def state_for(self, batch: int) -> Any: ...

    def reset(self, done: np.ndarray | None = None) -> None: ...


class PolicyError(ArtifactError):
    """A path `load_policy` cannot make a policy of; the message is one line."""


class Policy:
    """A trained policy: `act(obs, deterministic=True)`, its spaces and its header (`metadata`)."""

    def __init__(self, header: dict[str, Any], tensors: dict[str, np.ndarray], source: str) -> None:
        import torch

        with torch.random.fork_rng(devices=[]):  # building the networks draws initial weights: not from the caller's
            policy, self.observation_space, self.action_space = rebuild(header, tensors, source)
        self.metadata: dict[str, Any] = header
        self.source = source
        self.algorithm: str = header["algorithm"]
        self.env_id: str = header["env"]["id"]
        self.env_kwargs: dict[str, Any] = dict(header["env"]["kwargs"])
        self._policy = policy
        self._obs_shape = tuple(self.observation_space.shape)
        # What observations are taken as: a float64 array (the network's preprocessing makes float32 of it, as the
        # actors' normalizer does), or the uint8 an image is (the encoder divides it by 255).
        self.obs_dtype = np.dtype(np.uint8 if self.observation_space.dtype == np.uint8 else np.float64)
        # A recurrent policy's per-env state shape (L, H), which it keeps itself; None: actions depend on obs alone.
        self.state_shape: tuple[int, ...] | None = getattr(policy, "state_shape", None)
        self._forward = self._deterministic_forward(policy, self._obs_shape, self.state_shape, self.obs_dtype)

    @staticmethod
    def _deterministic_forward(
        policy: ArtifactPolicy, obs_shape: tuple[int, ...], state_shape: tuple[int, ...] | None, obs_dtype: np.dtype
    ) -> Callable[[np.ndarray], np.ndarray]:
        if getattr(policy, "numpy_forward", False):
            return policy.act_deterministic
        import torch

        module = policy.inference_module().requires_grad_(False)
        example = torch.from_numpy(np.zeros((2, *obs_shape), obs_dtype))
        inputs = example if state_shape is None else (example, torch.zeros((2, *state_shape)))
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # torch.jit.trace's deprecation notice: the traced graph is what we want
            traced = torch.jit.trace(module, inputs, check_trace=False)

        def forward(obs: np.ndarray) -> np.ndarray:
            # No torch.no_grad() per call (a context costs about as much as a Linear layer here): the module's
            # weights require no gradient and neither does an input made from NumPy, so no graph is recorded.
            return traced(torch.from_numpy(obs)).numpy()

        if state_shape is None:
            return forward
        recurrent = cast("RecurrentPolicy", policy)

        def recurrent_forward(obs: np.ndarray) -> np.ndarray:
            actions, recurrent.state = traced(torch.from_numpy(obs), recurrent.state_for(len(obs)))
            return actions.numpy()

        return recurrent_forward

    def act(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        """Actions for one observation (shape = the observation space's) or a batch ([B, *shape]); images as uint8."""
        x = np.asarray(obs, dtype=self.obs_dtype)
        if x.shape == self._obs_shape:  # one observation
            return (self._forward(x[None]) if deterministic else self._policy.act(x[None])[0])[0]
        if x.shape[1:] != self._obs_shape or x.ndim != len(self._obs_shape) + 1:
            raise ValueError(f"observations of shape {x.shape}; this policy takes {self._obs_shape} or a batch of them")
        return self._forward(x) if deterministic else self._policy.act(x)[0]

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """A batch's deterministic actions (what `surreal.runtime.rollout.evaluate` calls)."""
        return self.act(obs, deterministic=True)

    def reset(self, done: Any = None) -> None:
        """A recurrent policy forgets the episode so far: of the envs flagged in `done` (a bool per env of the
        batch it acts for), or of all (None: the next `act` may take a batch of any size). Others keep nothing."""
        if self.state_shape is not None:
            cast("RecurrentPolicy", self._policy).reset(None if done is None else np.asarray(done, bool).reshape(-1))

    def stochastic(self) -> _Stochastic:
        """This policy acting by sampling, for code that calls `act_deterministic` (`surreal eval --stochastic`)."""
        return _Stochastic(self)

    def module(self) -> Any:
        """The deterministic policy as an eager torch module: float observations [B, *shape] (uint8 images) in,
        actions out; a recurrent policy's takes and returns its state as well: (obs, state [B, *state_shape]) ->
        (actions, state), the state zeros at an episode's start."""
        return self._policy.inference_module()

    def __repr__(self) -> str:
        return (
            f"Policy({self.algorithm} on {self.env_id}, {self.metadata['env_steps']} env steps, "
            f"version {self.metadata['parameter_version']}, from {self.source})"
        )


class _Stochastic:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self.policy.act(obs, deterministic=False)

    def reset(self, done: np.ndarray | None = None) -> None:
        self.policy.reset(done)


def reason(exc: BaseException) -> str:
    """An exception as one line: torch.load's refusal of a pickle says what it refused (its message is a page)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    refused = [line for line in lines if "Unsupported" in line or "unsupported" in line]
    if isinstance(exc, pickle.UnpicklingError) and refused:
        return f"torch.load(weights_only=True) refused it: {refused[0]}"
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def resolve(path: str | Path) -> Path:
    """The policy file (or checkpoint) a path names: a file itself, a policy folder's policy.safetensors, a run
    folder's policy/policy.safetensors, or, for a run without one (trained before artifacts), its newest
    checkpoint."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise PolicyError(f"{path}: no such file or folder")
    for candidate in (path / FILE_NAME, path / POLICY_DIR / FILE_NAME):
        if candidate.is_file():
            return candidate
    checkpoints = sorted(p for p in (path / "checkpoints").glob("ckpt-*.pt") if CHECKPOINT.match(p.name))
    if checkpoints:
        return checkpoints[-1]
    raise PolicyError(
        f"{path}: neither a run folder (with {POLICY_DIR}/{FILE_NAME} or checkpoints/) nor a policy folder "
        f"(with {FILE_NAME}); the best policy is {POLICY_DIR}/{BEST_DIR}/"
    )


def fetch(uri: str) -> Path:
    """The local, checked copy (surreal/runstore.py `cached_run`) of what a bucket path names in a run folder mirrored
    there: its policy files and config, and its checkpoints only when it has no policy file or one is named."""
    from surreal.runstore import StorageError, cached_run

    try:
        local, rest = cached_run(uri, only=["config.yaml", f"{POLICY_DIR}/"])
        named = [rest, f"{rest}/"] if rest and not rest.startswith(f"{POLICY_DIR}/") else []  # a checkpoint
        if named or not (local / POLICY_DIR / FILE_NAME).is_file():
            cached_run(uri, only=named or ["checkpoints/"])
    except StorageError as exc:
        raise PolicyError(str(exc)) from None
    except Exception as exc:  # the backend's own (network, credentials): one line
        raise PolicyError(f"{uri}: {reason(exc)}") from None
    return local / rest if rest else local


def load_policy(path: str | Path, imports: Sequence[str] = ()) -> Policy:
    """The policy at `path` (`read_policy` says what it may be and what is checked), built to act."""
    return Policy(*read_policy(path, imports))


def read_policy(path: str | Path, imports: Sequence[str] = ()) -> tuple[dict[str, Any], dict[str, np.ndarray], str]:
    """The policy at `path`: a run folder (its latest policy: the final one once training ended), a policy folder
    (`runs/x/policy`, `runs/x/policy/best`), a policy file, or a learner checkpoint (`runs/x/checkpoints/ckpt-*.pt`,
    read with its run folder's config.yaml); each also as a bucket path into a run folder mirrored there
    (`s3://bucket/runs/x`, `gs://...`, `az://...`), read from a checked local copy. PolicyError (a ValueError), one
    line, when it is none of these or the file is damaged; nothing in the file is ever executed, and no module a file
    names is imported: a checkpoint's env is made only from a registered id, or one whose module is in `imports`
    (imported first, as `surreal eval --import MODULE` does) or already imported (surreal/envs.py `admit_env_id`).
    Returns the header and tensors, checked as far as they can be without building the policy, and their file."""
    if imports:
        from surreal.config import ConfigError
        from surreal.envs import import_modules

        try:
            import_modules(imports, "imports=")
        except ConfigError as exc:
            raise PolicyError(str(exc)) from None
    file = resolve(fetch(str(path)) if is_uri(str(path)) else path)
    if CHECKPOINT.match(file.name):
        header, tensors = artifact_from_checkpoint(file)
    else:
        header, tensors = read_policy_file(file)
    blueprint(header, tensors, str(file))  # what can be refused without torch is, before anything is built
    return header, tensors, str(file)


def artifact_from_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The artifact a learner checkpoint implies: its run's config builds the algorithm's learner, the checkpoint
    (torch.load with weights_only: tensors and containers, never code, within runtime/checkpoint.py's bounds)
    restores it, and its `params()` is the blob. The spaces come from the env, as the learner's did: made only when
    its id imports nothing the user did not name (`admit_env_id`)."""
    from surreal.algos import get_algorithm
    from surreal.config import ConfigError, algo_config, read_config
    from surreal.envs import admit_env_id, make_env
    from surreal.policy.build import PolicyRecorder
    from surreal.provenance import run_git_sha

    run_dir = path.parent.parent
    try:
        cfg = read_config(run_dir / "config.yaml")
        admit_env_id(cfg.env.id, str(run_dir / "config.yaml"))
    except OSError as exc:
        raise PolicyError(f"{path}: its run folder's config.yaml cannot be read ({exc})") from None
    except ConfigError as exc:
        raise PolicyError(f"{path}: {exc}") from None
    import torch

    from surreal.runtime.checkpoint import CheckpointError, load_checkpoint

    try:
        state = load_checkpoint(path)
    except CheckpointError as exc:
        raise PolicyError(str(exc)) from None
    except Exception as exc:  # torch.load's unpickler raises many unrelated types
        raise PolicyError(f"{path}: not a checkpoint of this run's {cfg.algo.name} learner ({reason(exc)})") from None
    try:
        env = make_env(cfg.env.id, cfg.seed, cfg.env.kwargs)
        obs_space, act_space = env.observation_space, env.action_space
        env.close()
        learner = get_algorithm(cfg.algo.name).make_learner(obs_space, act_space, algo_config(cfg), torch.device("cpu"))
        learner.load_state_dict(state["learner"])
        counters = dict(state["counters"])
        version, env_steps, updates = (int(counters.get(key, 0)) for key in ("version", "env_steps", "updates"))
    except Exception as exc:  # the env's constructor and load_state_dict raise many unrelated types
        raise PolicyError(f"{path}: not a checkpoint of this run's {cfg.algo.name} learner ({reason(exc)})") from None
    recorder = PolicyRecorder(cfg, obs_space, act_space, run_git_sha(run_dir))
    header, tensors = recorder.record(learner.params(), version=version, env_steps=env_steps, updates=updates)
    check_header(header, str(path))
    check_finite(tensors, str(path))
    return header, tensors
