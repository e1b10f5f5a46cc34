"""The algorithm interface the roles are written against.

An algorithm is a module providing `make_policy`, `make_collector` and `make_learner` (`Algorithm`); each
module checks itself against it for mypy at its end. Its torch-free config class (`surreal.algos.<name>_config`
or, for the first three, `surreal.config.schema`) names the module and the flow-control rule it uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym

from surreal.proto.wire import Chunk, Fields
from surreal.runtime.regimes.replay_ratio import TransitionLearner
from surreal.runtime.regimes.versions import ChunkLearner
from surreal.runtime.rollout import Policy

if TYPE_CHECKING:
    import torch

    from surreal.algos.replica import Replica


class Collector(Protocol):
    """What an actor runs: `collect` returns the next chunk to ship. `chunk_size` is the chunk's size in the
    units the replay FIFO and the learner batch count (transitions for PPO, perturbation pairs for ES)."""

    chunk_size: int

    def collect(self, version: int) -> Chunk: ...

    def state(self) -> dict[str, Any]:
        """Everything the next `collect` continues from but the envs (envstate.py saves those): NumPy arrays,
        numbers and containers, for an exact resume (run/serial.py)."""
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
        self,
        obs_space: Any,
        act_space: Any,
        cfg: Any,
        device: torch.device,
        *,
        compile: bool = False,
        replica: Replica | None = None,
    ) -> OnPolicyLearner | OffPolicyLearner:
        """`compile`: use the algorithm's compiled (and, on CUDA, graph-captured) update where it has one.
        `replica`: this learner's rank in a data-parallel group (`learner.replicas`; algos/replica.py), which
        computes its share of every minibatch; an algorithm without a gradient update refuses one."""
        ...

    def chunk_fields(self, obs_space: Any, act_space: Any, cfg: Any) -> Fields:
        """One unit of the algorithm's chunks (a [T, K] cell; for an off-policy algorithm, one stored transition),
        field by field: what every reply the learner takes must hold (proto/wire.py `ReplyLayout`)."""
        ...
