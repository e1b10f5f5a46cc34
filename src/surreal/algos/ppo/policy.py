"""PPO's actor side: the model for an env's spaces (`make_model`), the policy an actor runs (`PPOPolicy`), its
collector and the chunk fields it records."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from surreal.algos.encoders import Encoder, make_encoder
from surreal.algos.inference import AsFloat32, NormalizeObservations, action_head, description
from surreal.algos.normalizer import RunningMeanStd
from surreal.algos.ppo.config import RECURRENT_CELLS, PPOConfig
from surreal.algos.ppo.encoded import EncodedModel
from surreal.algos.ppo.nets import ActorCritic, CategoricalActorCritic, FeedForward
from surreal.algos.ppo.recurrent import RecurrentActorCritic, rnn_state_shape
from surreal.proto.wire import PER_ENV, Field, Fields
from surreal.runtime.frame_chunks import frame_fields
from surreal.runtime.rollout import RolloutCollector
from surreal.spaces import is_channels_first, space_dims

Model = FeedForward | RecurrentActorCritic | EncodedModel


def make_model(obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: PPOConfig) -> Model:
    """The actor-critic for these spaces: Gaussian for Box actions, categorical for Discrete ones; with
    `cfg.recurrent`, on the output of an LSTM or GRU cell instead of the observation. Image observations go through
    `cfg.encoder` first, whose features the cell or the heads (single linear layers, CleanRL's ppo_atari) take."""
    obs_dim, outputs = space_dims(cfg, obs_space, act_space)
    encoder: Encoder | None = None
    hidden_sizes = list(cfg.hidden_sizes)
    if is_channels_first(obs_space):
        encoder = make_encoder(cfg.encoder, tuple(obs_space.shape or ()))
        obs_dim, hidden_sizes = encoder.features, []
    n_in = cfg.rnn_hidden_size if cfg.recurrent else obs_dim
    head: FeedForward
    if isinstance(act_space, spaces.Discrete):
        head = CategoricalActorCritic(n_in, outputs, hidden_sizes)
    else:
        head = ActorCritic(n_in, outputs, hidden_sizes, cfg.log_std_init)
    model: FeedForward | RecurrentActorCritic = head
    if cfg.recurrent is not None:
        if cfg.recurrent not in RECURRENT_CELLS:
            raise ValueError(
                f"algo.recurrent must be one of {', '.join(RECURRENT_CELLS)} or null (got {cfg.recurrent!r})"
            )
        model = RecurrentActorCritic(cfg.recurrent, obs_dim, cfg.rnn_hidden_size, head)
    return model if encoder is None else EncodedModel(encoder, model)


class PPOPolicy:
    """The policy an actor runs: CPU, no gradients, the learner's normalizer statistics (none for images, which
    go to the encoder as the uint8 they are).

    A recurrent policy also keeps `state`, the recurrent state of each of the B envs it acts for ([B, L, H], None
    until its first act): every `act` or `act_deterministic` advances it, `reset` (and `episode_done`, which the
    collector calls) zeroes the rows of the envs whose episode ended, and new parameters leave it as it is."""

    def __init__(
        self, obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: PPOConfig, actor_index: int
    ) -> None:
        self.cfg = cfg
        self.model = make_model(obs_space, act_space, cfg).requires_grad_(False).eval()
        self.images = is_channels_first(obs_space)
        # A flat Box's statistics, which travel with the parameters; None for images (never normalized).
        self.obs_rms = None if self.images else RunningMeanStd(obs_space.shape)  # type: ignore[arg-type]  # (obs_dim,)
        self.act_space = act_space
        # Actors sample differently, and reproducibly: each has its own seeded generator (exploration is
        # not scaled per actor; the recorded logprob is under the very distribution sampled from).
        self.generator = torch.Generator().manual_seed(cfg.seed + 1_000 * actor_index)
        # (L, H) of a recurrent policy's per-env state; None: the action depends on the observation alone.
        self.state_shape = rnn_state_shape(cfg) if cfg.recurrent else None
        self.state: torch.Tensor | None = None
        self.device = torch.device("cpu")

    def to(self, device: torch.device) -> PPOPolicy:
        """Act on `device` (a central inference worker's GPU): the network moves, and sampling draws from a
        generator there, seeded as the CPU one was. Observations come in and actions go out as numpy arrays."""
        self.model.to(device)
        self.generator = torch.Generator(device=device).manual_seed(self.generator.initial_seed())
        self.device = device
        return self

    def load_params(self, arrays: dict[str, Any]) -> None:
        """`arrays` as `PPOLearner.params` made them (the codec restores the nesting of `policy/<key>`)."""
        self.model.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in arrays["policy"].items()})
        if self.obs_rms is not None:
            self.obs_rms.load(arrays["obs_norm"])

    def _input(self, obs: np.ndarray) -> torch.Tensor:
        if self.obs_rms is None:  # images: uint8 to the device, where the encoder divides them
            return torch.from_numpy(np.ascontiguousarray(obs, np.uint8)).to(self.device)
        x = self.obs_rms.normalize(obs, self.cfg.obs_clip) if self.cfg.obs_norm else obs.astype(np.float32)
        return torch.from_numpy(x).to(self.device)

    def _to_env(self, actions: np.ndarray) -> np.ndarray:
        """What the env is given: a Box action clipped to its bounds, a Discrete index shifted by the space's start."""
        space = self.act_space
        if isinstance(space, spaces.Discrete):
            return actions + space.start
        return np.clip(actions, space.low, space.high)  # type: ignore[attr-defined]  # a Box

    def state_for(self, batch: int) -> torch.Tensor | None:
        """The recurrent state of `batch` envs: zeros if none is held yet; None for a policy that keeps none.
        ValueError for a batch of another size (a state belongs to the envs it was built from: `reset()` first)."""
        if self.state_shape is None:
            return None
        if self.state is None:
            self.state = torch.zeros((batch, *self.state_shape), device=self.device)
        elif len(self.state) != batch:
            raise ValueError(f"this recurrent policy holds the state of {len(self.state)} envs, not {batch}: reset()")
        return self.state

    def _features(self, obs: np.ndarray) -> tuple[FeedForward, torch.Tensor]:
        """(the head that acts, its input): the normalized observations, or a recurrent policy's cell output
        (advancing `state`)."""
        x = self._input(obs)
        head, x, self.state = self.model.act_step(x, self.state_for(len(x)))
        return head, x

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Sampled actions for the env, and what the learner needs recorded: the actions as sampled (a Box's before
        clipping, as float32; a Discrete's indices, as int64) and their log-probabilities."""
        head, x = self._features(obs)
        actions, logprobs = head.sample(x, self.generator)
        actions_np = actions.cpu().numpy()
        recorded = actions_np.astype(np.int64 if isinstance(self.act_space, spaces.Discrete) else np.float32)
        record = {"actions": recorded, "logprobs": logprobs.cpu().numpy().astype(np.float32)}
        return self._to_env(actions_np), record

    @torch.no_grad()
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        head, x = self._features(obs)
        return self._to_env(head.mode(x).cpu().numpy())

    def reset(self, done: np.ndarray | None = None) -> None:
        """Forget the recurrent state: of the envs flagged in `done` (their next step starts an episode), or with
        None of every env (the next act starts afresh, for a batch of any size). Nothing to forget for an MLP."""
        if done is None or self.state is None:
            self.state = None
        else:
            done_mask = torch.from_numpy(np.asarray(done, bool)).to(self.device)
            self.state = self.state.masked_fill(done_mask[:, None, None], 0.0)

    def chunk_start(self, num_envs: int) -> dict[str, np.ndarray]:
        """What a recurrent policy's chunk records per env at its first step (`RolloutCollector`'s `per_env`):
        the state its K envs start the chunk from, which the learner unrolls the chunk from."""
        state = self.state_for(num_envs)
        assert state is not None, "a recurrent policy's (make_collector)"
        return {"rnn_state": state.cpu().numpy().copy()}

    def params(self) -> dict[str, Any]:
        """The blob `load_params` takes, as this policy holds it."""
        policy = {k: v.cpu().numpy() for k, v in self.model.state_dict().items()}
        return {"policy": policy} if self.obs_rms is None else {"policy": policy, "obs_norm": self.obs_rms.state()}

    def inference_module(self) -> nn.Module:
        """`act_deterministic` as one torch module (algos/inference.py), over copies of the weights: observations
        in, actions out; a recurrent policy's takes and returns the state too ((obs, state) -> (actions, state))."""
        cfg = self.cfg
        preprocess: nn.Module = AsFloat32()
        if self.obs_rms is None:
            preprocess = nn.Identity()  # the encoder takes the images as they come
        elif cfg.obs_norm:
            preprocess = NormalizeObservations(self.obs_rms, cfg.obs_clip)
        return self.model.deterministic(preprocess, action_head(self.act_space)[0]).eval()

    def describe(self) -> dict[str, Any]:
        """The network, action head and normalizer, as the policy artifact's header states them."""
        cfg = self.cfg
        network: dict[str, Any] = {"kind": "mlp", "hidden_sizes": list(cfg.hidden_sizes), "activation": "tanh"}
        if self.images:
            # The encoder on the uint8 images (divided by 255 inside), then linear heads on its features.
            features = self.model.encoder.features if isinstance(self.model, EncodedModel) else 0
            network = {"kind": "cnn", "encoder": cfg.encoder, "features": features, "hidden_sizes": []}
            network["activation"] = "relu"
        if self.state_shape is not None:
            # The cell, then the heads on its output (`hidden_sizes`; an encoder's in front of the cell).
            network = {**network, "kind": cfg.recurrent, "rnn_hidden_size": cfg.rnn_hidden_size}
            network["state_shape"] = list(self.state_shape)
        return description(network, self.act_space, cfg.obs_norm and not self.images, cfg.obs_clip)

    def episode_done(self, done: np.ndarray) -> None:
        """A recurrent policy starts the next episode of these envs from a zero state; an MLP keeps nothing."""
        self.reset(done)

    def sampling_state(self) -> dict[str, Any]:
        """The sampling generator and, for a recurrent policy acting already, the state of its envs."""
        state: dict[str, Any] = {"generator": self.generator.get_state().numpy()}
        if self.state is not None:
            state["rnn_state"] = self.state.numpy().copy()
        return state

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        self.generator.set_state(torch.from_numpy(np.array(state["generator"], np.uint8)))
        rnn_state = state.get("rnn_state")
        self.state = None if rnn_state is None else torch.from_numpy(np.array(rnn_state, np.float32))


def make_policy(
    obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: PPOConfig, actor_index: int, num_actors: int = 1
) -> PPOPolicy:
    del num_actors  # every PPO actor samples from the same distribution
    return PPOPolicy(obs_space, act_space, cfg, actor_index)


def make_collector(
    envs: gym.vector.VectorEnv, policy: PPOPolicy, cfg: PPOConfig, actor_index: int, chunk_steps: int
) -> RolloutCollector:
    """A recurrent policy's chunks also hold, per env, the state its column starts from (`PER_ENV`); image
    observations travel as each frame once (runtime/frame_chunks.py)."""
    per_env = policy.chunk_start if cfg.recurrent else None
    return RolloutCollector(envs, policy, chunk_steps, actor_index, per_env=per_env, frames=policy.images)


def chunk_fields(obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: PPOConfig) -> Fields:
    """One step of a `RolloutCollector` chunk as `PPOPolicy.act` records it: what every chunk the learner takes
    must hold, field by field (proto/wire.py `ReplyLayout`); a Discrete action is an index the head has a logit for.
    A recurrent policy's chunks also hold each env's start state (`PER_ENV`/rnn_state, one per column, not per step:
    where its episodes start follows from the done flags). Image observations are each frame once and the indices of
    every step's stacks (runtime/frame_chunks.py `frame_fields`) instead of `obs` and `next_obs`."""
    f32, obs = np.dtype(np.float32), tuple(obs_space.shape or ())
    if isinstance(act_space, spaces.Discrete):
        actions = Field(np.dtype(np.int64), (), 0, int(act_space.n) - 1)
    else:
        actions = Field(f32, tuple(act_space.shape or ()))
    observations = (
        frame_fields(obs) if is_channels_first(obs_space) else {"obs": Field(f32, obs), "next_obs": Field(f32, obs)}
    )
    return {
        **observations,
        "rewards": Field(f32),
        "terminated": Field(np.dtype(bool)),
        "truncated": Field(np.dtype(bool)),
        "actions": actions,
        "logprobs": Field(f32),
        **({f"{PER_ENV}/rnn_state": Field(f32, rnn_state_shape(cfg))} if cfg.recurrent else {}),
    }
