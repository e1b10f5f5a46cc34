"""Between an algorithm's policy and the artifact (artifact.py): the header a learner or evaluator writes for a
parameter blob, and the algorithm's own policy class rebuilt from a header and its tensors.

The rebuilt policy is the one the actors and the learner's final evaluation run (`make_policy` + `load_params`),
so what `load_policy` returns acts as they did. Nothing from the run but the file is needed: the header carries
the algorithm's whole config and the spaces. Everything read is checked before the policy is built: the
config's field names and types, the tensors' names, shapes and dtypes against the ones this config's policy
holds, and the header's descriptive sections against the ones the rebuilt policy derives.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from surreal.policy.artifact import (
    FORMAT,
    FORMAT_VERSION,
    ArtifactError,
    decode_space,
    encode_space,
    write_policy_file,
)
from surreal.proto.codec import flatten, unflatten

if TYPE_CHECKING:
    from torch import nn

    from surreal.config import ExperimentConfig
    from surreal.config.schema import AlgoConfig


class ArtifactPolicy(Protocol):
    """What an algorithm's policy class offers the artifact (each algorithm folder's policy.py)."""

    def load_params(self, arrays: dict[str, Any]) -> None: ...

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]: ...

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray: ...

    def params(self) -> dict[str, Any]:
        """The blob `load_params` takes, as the policy holds it."""
        ...

    def inference_module(self) -> nn.Module:
        """`act_deterministic` as one torch module, normalizer and action squashing or clipping inside."""
        ...

    def describe(self) -> dict[str, Any]:
        """{"network", "action_head", "normalizer"} as the header states them."""
        ...


# -- the algorithm's config as JSON ---------------------------------------------------------------------------


def _matches(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a config field's type (bool, int, float, str, list[...], X | None)."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_matches(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return type(value) is int
    if hint is float:
        return type(value) in (int, float)
    if hint is str:
        return isinstance(value, str)
    return hint is Any


def config_from_json(algorithm: str, data: dict[str, Any], name: str) -> AlgoConfig:
    """The algorithm's typed config from the header: every field known and of its type; a field the header
    lacks (an artifact older than the field) takes its default, which is the behaviour it was written under."""
    from surreal.config.schema import ALGORITHMS

    if algorithm not in ALGORITHMS:
        raise ArtifactError(f"{name}: algorithm {algorithm!r} is not one this surreal has ({', '.join(ALGORITHMS)})")
    cls = ALGORITHMS[algorithm]
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ArtifactError(f"{name}: algo_config has fields {algorithm} does not: {', '.join(unknown)}")
    wrong = sorted(k for k, v in data.items() if not _matches(v, hints[k]))
    if wrong:
        raise ArtifactError(f"{name}: algo_config fields of the wrong type: {', '.join(wrong)}")
    if data.get("name", algorithm) != algorithm:
        raise ArtifactError(f"{name}: algo_config names {data['name']!r}, the header {algorithm!r}")
    values: dict[str, Any] = {k: list(v) if isinstance(v, list) else v for k, v in data.items()}
    return cls(**values)


# -- header sections derived from the policy --------------------------------------------------------------------


def derived_sections(policy: ArtifactPolicy, tensors: dict[str, np.ndarray]) -> dict[str, Any]:
    """`action_head`, `network` and `normalizer` of the header, from the policy and its tensors."""
    described = policy.describe()
    network = {
        **described["network"],
        "parameters": int(sum(a.size for a in tensors.values() if a.dtype.kind == "f")),
        "tensors": {k: list(v.shape) for k, v in sorted(tensors.items())},
    }
    return {"action_head": described["action_head"], "network": network, "normalizer": described["normalizer"]}


def evaluation_section(summary: dict[str, Any], seed: int, env_steps: int) -> dict[str, Any]:
    """The header's `evaluation` from an `Evaluation.summary()` (or eval.json's fields) and its seed."""
    return {
        "return_mean": float(summary["eval_return_mean"]),
        "return_std": float(summary["eval_return_std"]),
        "episodes": int(summary["eval_episodes"]),
        "success_rate": None if summary.get("eval_success_rate") is None else float(summary["eval_success_rate"]),
        "seed": int(seed),
        "env_steps": int(env_steps),
    }


def surreal_version() -> str:
    """The installed package's version (`surreal.__version__` would import the package's lazy exports' module)."""
    try:
        return metadata.version("surreal")
    except metadata.PackageNotFoundError:
        return "unknown"


class PolicyRecorder:
    """Writes the artifact for an experiment's parameter blobs (the learner's latest, the evaluator's best)."""

    def __init__(self, cfg: ExperimentConfig, obs_space: Any, act_space: Any, git_sha: str) -> None:
        from surreal.algos import get_algorithm
        from surreal.config import algo_config

        self.cfg, self.git_sha = cfg, git_sha
        self.algo_cfg = algo_config(cfg)
        self.spaces = encode_space(obs_space), encode_space(act_space)
        algorithm = get_algorithm(cfg.algo.name)
        self.policy = cast("ArtifactPolicy", algorithm.make_policy(obs_space, act_space, self.algo_cfg, 0, 1))

    def record(
        self,
        params: dict[str, Any],
        *,
        version: int,
        env_steps: int,
        updates: int | None,
        evaluation: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(header, tensors) for `params`, a blob of this experiment's algorithm."""
        tensors = dict(flatten(params))
        self.policy.load_params(params)
        header = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "algorithm": self.cfg.algo.name,
            "algo_config": dataclasses.asdict(self.algo_cfg),
            "env": {"id": self.cfg.env.id, "kwargs": dict(self.cfg.env.kwargs)},
            "observation_space": self.spaces[0],
            "action_space": self.spaces[1],
            **derived_sections(self.policy, tensors),
            "parameter_version": int(version),
            "env_steps": int(env_steps),
            "updates": None if updates is None else int(updates),
            "evaluation": evaluation,
            "seed": int(self.cfg.seed),
            "git_sha": self.git_sha,
            "surreal_version": surreal_version(),
        }
        return header, tensors

    def save(self, path: Path, params: dict[str, Any], **fields: Any) -> Path:
        header, tensors = self.record(params, **fields)
        return write_policy_file(path, header, tensors)


# -- the policy rebuilt from a file ------------------------------------------------------------------------------


def _width(space: Any) -> int:
    """What a space adds to a network's edge: a Box's elements, a Discrete's choices (a one-hot, a logit each)."""
    n = getattr(space, "n", None)
    return int(n) if n is not None else math.prod(space.shape)


def network_floor(algo_cfg: AlgoConfig, obs_space: Any, act_space: Any) -> int:
    """Parameters the policy network must have at least, from the config and spaces alone, before anything is built:
    every algorithm's policy maps observations through its `hidden_sizes` (after its recurrent cell, if any) to the
    actions, so it holds at least one weight per pair of adjacent widths. A file whose tensors hold fewer could never
    match it, and a config naming huge widths over small tensors is refused here rather than allocated. Images go
    through the algorithm's encoder instead (`encoder_widths`: its dense layer, which grows with the image), whose
    features linear heads take."""
    encoder_widths = getattr(algo_cfg, "encoder_widths", None)
    images = len(obs_space.shape or ()) == 3 and obs_space.dtype == np.uint8
    if encoder_widths is not None and images:
        widths = [int(w) for w in encoder_widths(tuple(obs_space.shape))]
    else:
        widths, images = [_width(obs_space)], False
    recurrent = getattr(algo_cfg, "recurrent", None)
    if recurrent:
        widths.append(int(getattr(algo_cfg, "rnn_hidden_size", 0)))
    widths += [] if images else [int(h) for h in getattr(algo_cfg, "hidden_sizes", [])]
    widths.append(_width(act_space))
    return sum(a * b for a, b in zip(widths, widths[1:], strict=False))


def blueprint(header: dict[str, Any], tensors: dict[str, np.ndarray], name: str) -> tuple[AlgoConfig, Any, Any]:
    """(the algorithm's config, observation space, action space) the header describes, checked without building
    anything or importing torch: the config's fields and types, the spaces, and a network no larger than the file's
    tensors could fill (`network_floor`). ArtifactError, one line, for what does not fit."""
    algo_cfg = config_from_json(header["algorithm"], header["algo_config"], name)
    algo_cfg = dataclasses.replace(algo_cfg, seed=header["seed"])
    obs_space = decode_space(header["observation_space"], f"{name}: observation_space")
    act_space = decode_space(header["action_space"], f"{name}: action_space")
    floor = network_floor(algo_cfg, obs_space, act_space)
    held = sum(int(a.size) for a in tensors.values() if a.dtype.kind == "f")
    if floor > held:
        raise ArtifactError(
            f"{name}: its algo_config and spaces make a network of at least {floor:,} parameters; the file holds "
            f"{held:,}"
        )
    return algo_cfg, obs_space, act_space


def rebuild(header: dict[str, Any], tensors: dict[str, np.ndarray], name: str) -> tuple[ArtifactPolicy, Any, Any]:
    """(the algorithm's policy with the file's parameters loaded, observation space, action space); ArtifactError,
    one line, for anything that does not fit (the header is already key-checked: artifact.check_header)."""
    from surreal.algos import get_algorithm

    algo_cfg, obs_space, act_space = blueprint(header, tensors, name)
    try:
        algorithm = get_algorithm(header["algorithm"])
        policy = cast("ArtifactPolicy", algorithm.make_policy(obs_space, act_space, algo_cfg, 0, 1))
    except (ValueError, TypeError, RuntimeError) as exc:  # a config or space the algorithm cannot build
        raise ArtifactError(f"{name}: {header['algorithm']} cannot build this policy ({exc})") from None
    expected = dict(flatten(policy.params()))
    if set(expected) != set(tensors):
        missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
        raise ArtifactError(
            f"{name}: tensors do not match the network: missing {missing or 'none'}, unexpected {extra or 'none'}"
        )
    for key, want in expected.items():
        got = tensors[key]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ArtifactError(
                f"{name}: tensor {key!r} is {got.dtype}{list(got.shape)}; the network needs "
                f"{want.dtype}{list(want.shape)}"
            )
    policy.load_params(unflatten(list(tensors.items())))
    derived = derived_sections(policy, tensors)
    for key, value in derived.items():
        if header[key] != json.loads(json.dumps(value)):
            raise ArtifactError(f"{name}: header field {key!r} does not describe this network and config")
    return policy, obs_space, act_space
