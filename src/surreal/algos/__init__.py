"""The algorithm interface the roles are written against, and the lookup of an algorithm by name.

An algorithm is a module providing `make_policy`, `make_collector` and `make_learner` (`Algorithm`, checked by
mypy below); its torch-free config class in `surreal.config.schema.ALGORITHMS` names the module and the
flow-control rule it uses, so that registry is the only list of algorithms. Adding one is its module, its
config class and its YAML (docs/architecture.md). Modules are imported on lookup: importing this package
never loads torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol, cast

import gymnasium as gym

from surreal.config.schema import ALGORITHMS
from surreal.proto.wire import Chunk
from surreal.runtime.regimes.replay_ratio import TransitionLearner
from surreal.runtime.regimes.versions import ChunkLearner
from surreal.runtime.rollout import Policy

if TYPE_CHECKING:
    import torch


class Collector(Protocol):
    """What an actor runs: `collect` returns the next chunk to ship. `chunk_size` is the chunk's size in the
    units the replay FIFO and the learner batch count (transitions for PPO, perturbation pairs for ES)."""

    chunk_size: int

    def collect(self, version: int) -> Chunk: ...

    def state(self) -> dict[str, Any]:
        """Everything the next `collect` continues from but the envs (envstate.py saves those): NumPy arrays,
        numbers and containers, for an exact resume (launch/serial.py)."""
        ...

    def load_state(self, state: dict[str, Any]) -> None: ...


class ActorPolicy(Policy, Protocol):
    def load_params(self, arrays: dict[str, Any]) -> None: ...


class Learner(Protocol):
    """The learner side of an algorithm, whatever data it learns from."""

    def params(self) -> dict[str, Any]:
        """The blob actors load with `load_params` (nested dicts of numpy arrays)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything to resume exactly: tensors, numbers and containers only (torch weights_only load)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class OnPolicyLearner(Learner, ChunkLearner, Protocol):
    """Learns from whole chunks: the update the on-policy feed calls (runtime/regimes/versions.py)."""


class OffPolicyLearner(Learner, TransitionLearner, Protocol):
    """Learns from sampled minibatches: the update the off-policy feed calls (runtime/regimes/replay_ratio.py)."""


class Algorithm(Protocol):
    """An algorithm module. Spaces and config are `Any` here: each module takes its own config class and the
    Box spaces it supports (and says so when given others)."""

    def make_policy(
        self, obs_space: Any, act_space: Any, cfg: Any, actor_index: int, num_actors: int = 1
    ) -> ActorPolicy: ...

    def make_collector(
        self, envs: gym.vector.VectorEnv, policy: Any, cfg: Any, actor_index: int, chunk_steps: int
    ) -> Collector: ...

    def make_learner(
        self, obs_space: Any, act_space: Any, cfg: Any, device: torch.device, *, compile: bool = False
    ) -> OnPolicyLearner | OffPolicyLearner:
        """`compile`: use the algorithm's compiled (and, on CUDA, graph-captured) update where it has one."""
        ...


def get_algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(sorted(ALGORITHMS))}")
    return cast(Algorithm, importlib.import_module(ALGORITHMS[name].module))


if TYPE_CHECKING:  # mypy checks every registered module against the interface
    from surreal.algos import ddpg, es, ppo

    _IMPLEMENTATIONS: tuple[Algorithm, ...] = (ppo, ddpg, es)
