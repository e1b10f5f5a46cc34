"""Proximal Policy Optimization (Schulman et al. 2017) for continuous and discrete actions, distributed.

Follows CleanRL's ppo_continuous_action and the implementation details catalogued by Huang et al. 2022
("The 37 Implementation Details of PPO"): separate tanh actor and critic MLPs with orthogonal init, a
state-independent log-std, observation normalization, reward scaling by the running std of the
discounted return, GAE(lambda), per-minibatch advantage normalization, clipped surrogate, optional value
clipping, entropy bonus, global gradient clipping and linear learning-rate annealing. Discrete actions (CartPole)
get CleanRL's ppo.py head instead of the Gaussian one: the actor MLP gives one logit per action, a categorical
distribution samples, scores and measures entropy, and the deterministic action is the argmax; everything else is
shared.

With `algo.recurrent` (lstm or gru) the policy is SURREAL-PPO's recurrent one: a cell over the normalized observations
feeds both heads (`RecurrentActorCritic`). Its state travels with the chunks: the actor records, once per env, the
state each chunk's column starts from (`PER_ENV`), and zeroes an env's state when its episode ends. The learner
unrolls each column from that stored state, zeroing it where the done flags say an episode starts, and backpropagates
through the whole chunk (truncated BPTT); a minibatch is whole sequences, never shuffled steps. The stored state came
from the parameters the actor ran, as R2D2's "stored state" strategy, without burn-in.

What distribution changes: the experience comes from actors running slightly older parameters, so the
ratio is taken against the behavior log-probability each actor recorded, chunks more than
`max_staleness` versions old are dropped (runtime/regimes/versions.py), and the observation-normalizer
statistics travel inside the parameter blob so actors normalize exactly as the learner does.
Sockets and loops live in the roles; this file is the math.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical, Normal

from surreal.algos.capture import CapturedStep, CompiledSteps
from surreal.algos.inference import (
    AsFloat32,
    DeterministicPolicy,
    NormalizeObservations,
    RecurrentDeterministicPolicy,
    action_head,
    description,
)
from surreal.algos.normalizer import RunningMeanStd
from surreal.algos.ppo.config import RECURRENT_CELLS, PPOConfig
from surreal.algos.replica import Replica
from surreal.algos.sample_steps import load_optimizer_state
from surreal.proto.wire import PER_ENV, Chunk, Field, Fields
from surreal.runtime.rollout import RolloutCollector
from surreal.spaces import space_dims

# -- networks -------------------------------------------------------------------------------------------


def layer_init(layer: nn.Linear, std: float = float(np.sqrt(2))) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(sizes: list[int], out_std: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for n_in, n_out in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [layer_init(nn.Linear(n_in, n_out)), nn.Tanh()]
    layers.append(layer_init(nn.Linear(sizes[-2], sizes[-1]), std=out_std))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Box actions: a Gaussian with the actor MLP's output as mean and a state-independent log-std."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int], log_std_init: float = 0.0) -> None:
        super().__init__()
        self.critic = mlp([obs_dim, *hidden_sizes, 1], out_std=1.0)
        self.actor_mean = mlp([obs_dim, *hidden_sizes, act_dim], out_std=0.01)
        self.actor_logstd = nn.Parameter(torch.full((1, act_dim), log_std_init))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> Normal:
        mean = self.actor_mean(obs)
        # No argument validation: the std is an exp, always valid, and checking it costs a host sync per call.
        return Normal(mean, self.actor_logstd.expand_as(mean).exp(), validate_args=False)

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per sample: the log-probability of `actions` and the entropy (both summed over action dimensions)."""
        dist = self.distribution(obs)
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1)

    def sample(self, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions before clipping, their log-probabilities), drawn from `generator`."""
        dist = self.distribution(obs)
        noise = torch.randn(dist.mean.shape, generator=generator, device=dist.mean.device)
        actions = dist.mean + dist.stddev * noise
        return actions, dist.log_prob(actions).sum(-1)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action: the mean (clipped to the bounds by the policy)."""
        return self.actor_mean(obs)


class CategoricalActorCritic(nn.Module):
    """Discrete actions (CleanRL's ppo.py): the actor MLP's outputs are the logits of a categorical distribution.
    Actions are indices 0..n-1 (a `Discrete(n, start)` env gets index + start from the policy)."""

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: list[int]) -> None:
        super().__init__()
        self.critic = mlp([obs_dim, *hidden_sizes, 1], out_std=1.0)
        self.actor_logits = mlp([obs_dim, *hidden_sizes, num_actions], out_std=0.01)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> Categorical:
        return Categorical(logits=self.actor_logits(obs), validate_args=False)

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`actions` arrive as the float32 the learner stacks every algorithm's actions in: exact for indices."""
        dist = self.distribution(obs)
        return dist.log_prob(actions.long()), dist.entropy()

    def sample(self, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        dist = self.distribution(obs)
        actions = torch.multinomial(dist.probs, 1, generator=generator).squeeze(-1)
        return actions, dist.log_prob(actions)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action: the most likely index."""
        return self.actor_logits(obs).argmax(-1)


Head = ActorCritic | CategoricalActorCritic


class RecurrentCell(nn.Module):
    """One step of an LSTM or a GRU cell over a batch. Its state is one tensor [B, L, H] (L = 2 for an LSTM's h and
    c, 1 for a GRU's h), so that it is stored, sent, reset and exported as one array. Orthogonal weights and zero
    biases, as CleanRL's ppo_atari_lstm."""

    def __init__(self, kind: str, n_in: int, hidden: int) -> None:
        super().__init__()
        self.cell: nn.LSTMCell | nn.GRUCell = nn.LSTMCell(n_in, hidden) if kind == "lstm" else nn.GRUCell(n_in, hidden)
        for name, param in self.cell.named_parameters():
            nn.init.orthogonal_(param, 1.0) if name.startswith("weight") else nn.init.zeros_(param)

    def forward(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the cell's output h [B, H], the state after this step [B, L, H])."""
        if isinstance(self.cell, nn.LSTMCell):
            h, c = self.cell(x, (state[:, 0], state[:, 1]))
            return h, torch.stack([h, c], 1)
        h = self.cell(x, state[:, 0])
        return h, h.unsqueeze(1)


class RecurrentActorCritic(nn.Module):
    """SURREAL-PPO's recurrent policy: an LSTM (or GRU) cell over the normalized observations, whose output both
    heads take in place of the observation (the same Gaussian or categorical actor-critic, on H features). The
    critic shares the cell, so the value loss shapes the memory too (as in SURREAL and CleanRL's ppo_atari_lstm).

    The state before an env's first step, and after each episode end, is zeros."""

    def __init__(self, kind: str, obs_dim: int, hidden: int, head: Head) -> None:
        super().__init__()
        self.rnn = RecurrentCell(kind, obs_dim, hidden)
        self.head = head

    def unroll(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """N sequences of T steps from their start states: `obs` [N, T, obs_dim], `state` [N, L, H], `starts` [N, T]
        (True where an episode begins: the state is zeroed before that step). Returns the features [N, T, H] and the
        state after each step [N, T, L, H]. A plain loop over T: gradients flow through it back to the start state
        (truncated backpropagation through time over the sequence)."""
        features, states = [], []
        for t in range(obs.shape[1]):
            state = state.masked_fill(starts[:, t, None, None], 0.0)
            h, state = self.rnn(obs[:, t], state)
            features.append(h)
            states.append(state)
        return torch.stack(features, 1), torch.stack(states, 1)


Model = ActorCritic | CategoricalActorCritic | RecurrentActorCritic


def make_model(obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: PPOConfig) -> Model:
    """The actor-critic for these spaces: Gaussian for Box actions, categorical for Discrete ones; with
    `cfg.recurrent`, on the output of an LSTM or GRU cell instead of the observation."""
    obs_dim, outputs = space_dims(cfg, obs_space, act_space)
    n_in = cfg.rnn_hidden_size if cfg.recurrent else obs_dim
    head: Head
    if isinstance(act_space, spaces.Discrete):
        head = CategoricalActorCritic(n_in, outputs, list(cfg.hidden_sizes))
    else:
        head = ActorCritic(n_in, outputs, list(cfg.hidden_sizes), cfg.log_std_init)
    if cfg.recurrent is None:
        return head
    if cfg.recurrent not in RECURRENT_CELLS:
        raise ValueError(f"algo.recurrent must be one of {', '.join(RECURRENT_CELLS)} or null (got {cfg.recurrent!r})")
    return RecurrentActorCritic(cfg.recurrent, obs_dim, cfg.rnn_hidden_size, head)


def rnn_state_shape(cfg: PPOConfig) -> tuple[int, int]:
    """The per-env recurrent state's shape (L, H) a `RecurrentCell` of this config keeps."""
    return (2 if cfg.recurrent == "lstm" else 1, cfg.rnn_hidden_size)


# -- actor side -----------------------------------------------------------------------------------------


class PPOPolicy:
    """The policy an actor runs: CPU, no gradients, the learner's normalizer statistics.

    A recurrent policy also keeps `state`, the recurrent state of each of the B envs it acts for ([B, L, H], None
    until its first act): every `act` or `act_deterministic` advances it, `reset` (and `episode_done`, which the
    collector calls) zeroes the rows of the envs whose episode ended, and new parameters leave it as it is."""

    def __init__(
        self, obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: PPOConfig, actor_index: int
    ) -> None:
        self.cfg = cfg
        self.model = make_model(obs_space, act_space, cfg).requires_grad_(False).eval()
        self.obs_rms = RunningMeanStd(obs_space.shape)  # type: ignore[arg-type]  # a flat Box: (obs_dim,)
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
        self.obs_rms.load(arrays["obs_norm"])

    def _input(self, obs: np.ndarray) -> torch.Tensor:
        x = self.obs_rms.normalize(obs, self.cfg.obs_clip) if self.cfg.obs_norm else obs.astype(np.float32)
        return torch.from_numpy(x).to(self.device)

    def _to_env(self, actions: np.ndarray) -> np.ndarray:
        """What the env is given: a Box action clipped to its bounds, a Discrete index shifted by the space's start."""
        space = self.act_space
        if isinstance(space, spaces.Discrete):
            return actions + space.start
        return np.clip(actions, space.low, space.high)  # type: ignore[attr-defined]  # a Box

    def state_for(self, batch: int) -> torch.Tensor:
        """The recurrent state of `batch` envs: zeros if none is held yet. ValueError for a batch of another size
        (a state belongs to the envs it was built from: `reset()` first)."""
        assert self.state_shape is not None, "a recurrent policy's"
        if self.state is None:
            self.state = torch.zeros((batch, *self.state_shape), device=self.device)
        elif len(self.state) != batch:
            raise ValueError(f"this recurrent policy holds the state of {len(self.state)} envs, not {batch}: reset()")
        return self.state

    def _features(self, obs: np.ndarray) -> tuple[Head, torch.Tensor]:
        """(the head that acts, its input): the normalized observations, or a recurrent policy's cell output
        (advancing `state`)."""
        x = self._input(obs)
        model = self.model
        if isinstance(model, RecurrentActorCritic):
            x, self.state = model.rnn(x, self.state_for(len(x)))
            return model.head, x
        return model, x

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
        return {"rnn_state": self.state_for(num_envs).cpu().numpy().copy()}

    def params(self) -> dict[str, Any]:
        """The blob `load_params` takes, as this policy holds it."""
        policy = {k: v.cpu().numpy() for k, v in self.model.state_dict().items()}
        return {"policy": policy, "obs_norm": self.obs_rms.state()}

    def inference_module(self) -> nn.Module:
        """`act_deterministic` as one torch module (algos/inference.py), over copies of the weights: observations
        in, actions out; a recurrent policy's takes and returns the state too ((obs, state) -> (actions, state))."""
        cfg = self.cfg
        preprocess = NormalizeObservations(self.obs_rms, cfg.obs_clip) if cfg.obs_norm else AsFloat32()
        model = self.model
        head = model.head if isinstance(model, RecurrentActorCritic) else model
        actor = head.actor_logits if isinstance(head, CategoricalActorCritic) else head.actor_mean
        postprocess = action_head(self.act_space)[0]
        if isinstance(model, RecurrentActorCritic):
            rnn = copy.deepcopy(model.rnn)
            return RecurrentDeterministicPolicy(preprocess, rnn, copy.deepcopy(actor), postprocess).eval()
        return DeterministicPolicy(preprocess, copy.deepcopy(actor), postprocess).eval()

    def describe(self) -> dict[str, Any]:
        """The network, action head and normalizer, as the policy artifact's header states them."""
        cfg = self.cfg
        network: dict[str, Any] = {"kind": "mlp", "hidden_sizes": list(cfg.hidden_sizes), "activation": "tanh"}
        if self.state_shape is not None:
            # The cell, then the heads' MLPs on its output (`hidden_sizes`).
            network = {**network, "kind": cfg.recurrent, "rnn_hidden_size": cfg.rnn_hidden_size}
            network["state_shape"] = list(self.state_shape)
        return description(network, self.act_space, cfg.obs_norm, cfg.obs_clip)

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


# -- learner side ---------------------------------------------------------------------------------------


Array = TypeVar("Array", np.ndarray, torch.Tensor)


def gae(
    rewards: Array,
    values: Array,
    next_values: Array,
    terminated: Array,
    truncated: Array,
    gamma: float,
    gae_lambda: float,
) -> Array:
    """Generalized advantage estimation over a time-major [T, K] batch (NumPy arrays or torch tensors).

    delta_t = r_t + gamma * V(s'_t) * (1 - terminated_t) - V(s_t): a truncated step still bootstraps from
    its final observation. The recursion stops at any episode end (terminated or truncated), and the
    batch's last step needs no carried advantage because its V(s'_T) is already in delta_T. One reverse
    scan over T serves all K columns at once."""
    advantages = rewards + gamma * next_values * ~terminated - values  # delta_t, turned into A_t in place
    decay = gamma * gae_lambda * ~(terminated | truncated)
    for t in reversed(range(len(rewards) - 1)):
        advantages[t] += decay[t] * advantages[t + 1]
    return advantages


STEP_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")  # what ppo_loss reports, in order
MINIBATCH_KEYS = ("obs", "actions", "logprobs", "advantages", "returns", "values")  # ppo_loss's arguments
SEQUENCE_KEYS = (*MINIBATCH_KEYS, "rnn_state", "starts")  # a recurrent policy's: its sequences' start and resets


class PPOLearner(CompiledSteps):
    """The PPO update, with the speed belonging to the device: the batch is prepared in a few whole-batch
    tensor operations, the epoch loop never waits for the device, and every minibatch step has the same
    shapes, so `compile=True` can compile the loss (and, on CUDA, replay the whole step as a CUDA graph).
    `compile=False` runs the same step eagerly: the reference the compiled path is tested against.

    With a `replica` (`learner.replicas` > 1), every rank prepares the whole batch (normalization, values, reward
    scaling, GAE: a few whole-batch operations, so every rank's statistics are the same) and draws the same
    minibatch order; each then steps on its share of every minibatch, the gradients averaged over the ranks
    (algos/replica.py), so K ranks make the update one learner makes on the whole minibatch. Advantages are
    normalized over the whole minibatch before it is cut into shares."""

    name = "PPO"

    def __init__(
        self,
        obs_space: spaces.Space[Any],
        act_space: spaces.Space[Any],
        cfg: PPOConfig,
        device: torch.device,
        *,
        compile: bool = False,
        replica: Replica | None = None,
    ) -> None:
        """`compile`: compile the minibatch loss and, on CUDA, replay the step as a CUDA graph (the first update
        then pays the compilation); off, the same step runs eagerly. `replica`: this learner's rank in a
        data-parallel group."""
        self.cfg = cfg
        self.device = device
        self.replica = replica
        torch.manual_seed(cfg.seed)
        self.model: Model = make_model(obs_space, act_space, cfg).to(device)  # checks the spaces
        obs_dim = int(obs_space.shape[0])  # type: ignore[index]  # a flat Box
        self.compile = compile
        # A captured graph reads the learning rate from a device tensor, so annealing needs no re-capture.
        capture = self.captures()
        lr = torch.tensor(cfg.lr, device=device) if capture else cfg.lr
        # fused: one kernel per step for all parameters (the update is hundreds of tiny steps, so per-tensor
        # overhead dominates, on CPU and GPU alike); fused Adam is also safe to capture in a CUDA graph.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr, eps=1e-5, fused=True, capturable=capture)
        self.obs_rms = RunningMeanStd((obs_dim,))
        self.ret_rms = RunningMeanStd(())
        self.return_carry: dict[int, torch.Tensor] = {}  # discounted return so far, per actor, per env
        self.generator = torch.Generator().manual_seed(cfg.seed)  # minibatch shuffles
        self.updates = 0
        self.env_steps_consumed = 0
        self.reset_steps()

    # -- data preparation ---------------------------------------------------------------------------

    def _stack(self, chunks: Sequence[Chunk], key: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """One array of chunks of equal T, side by side along K ([T, K_total, ...]), on the device."""
        return torch.from_numpy(np.concatenate([c.arrays[key] for c in chunks], axis=1)).to(self.device, dtype)

    def _stack_per_env(self, chunks: Sequence[Chunk], key: str) -> torch.Tensor:
        """One `PER_ENV` array of chunks, side by side along K ([K_total, ...]), on the device."""
        return torch.from_numpy(np.concatenate([c.arrays[PER_ENV][key] for c in chunks])).to(self.device)

    def _normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """RunningMeanStd.normalize on the device, in float64 as the actors compute it, so both agree."""
        if not self.cfg.obs_norm:
            return obs.float()
        mean, var = (torch.from_numpy(stat).to(self.device) for stat in (self.obs_rms.mean, self.obs_rms.var))
        return ((obs.double() - mean) / torch.sqrt(var + 1e-8)).clamp(-self.cfg.obs_clip, self.cfg.obs_clip).float()

    def _scale_rewards(self, *chunks: Chunk) -> torch.Tensor:
        """CleanRL's NormalizeReward for chunks of one length T ([T, K_total]): divide by the running std of
        the discounted return.

        The return carry continues across an actor's consecutive chunks (one per env, reset at episode
        ends), so the statistic is the one a wrapper inside each actor would have seen; the statistics
        are updated once per chunk, in batch order, rather than per step, which changes nothing beyond the
        first chunks. One scan over T serves every chunk: each column starts from zero, and since the
        return is linear in the carry it starts from, each chunk then adds its actor's carry times what
        survives of it (gamma^(t+1) until the column's first episode end). That carry may come from the
        actor's previous chunk in this very batch, which is why chunks are finished in order."""
        cfg = self.cfg
        rewards = self._stack(chunks, "rewards", torch.float64)
        if not cfg.reward_scale:
            return rewards.float()
        done = self._stack(chunks, "terminated") | self._stack(chunks, "truncated")
        returns = torch.empty_like(rewards)
        running = torch.zeros_like(rewards[0])
        for t in range(len(rewards)):
            running = running * cfg.gamma + rewards[t]
            returns[t] = running
            running = running.masked_fill(done[t], 0.0)
        steps = torch.arange(1, len(rewards) + 1, device=self.device, dtype=torch.float64)
        no_end_before = (done.cumsum(0) - done.long()) == 0
        carry_survives = cfg.gamma ** steps[:, None] * no_end_before

        columns, first = [], 0
        for chunk in chunks:
            width = chunk.arrays["rewards"].shape[1]
            cols = slice(first, first + width)
            first += width
            carry = self.return_carry.get(chunk.actor)
            if carry is not None and carry.shape == (width,):
                returns[:, cols] += carry * carry_survives[:, cols]
            self.return_carry[chunk.actor] = returns[-1, cols].masked_fill(done[-1, cols], 0.0)
            columns.append(cols)
        moments = torch.stack([torch.stack([returns[:, c].mean(), returns[:, c].var(correction=0)]) for c in columns])
        stds = []
        for cols, (mean, var) in zip(columns, moments.cpu().numpy(), strict=True):
            self.ret_rms.merge(returns[:, cols].numel(), np.asarray(mean), np.asarray(var))
            stds += [np.sqrt(self.ret_rms.var + 1e-8)] * (cols.stop - cols.start)
        scaled = rewards / torch.as_tensor(np.array(stds), device=self.device)
        return scaled.clamp(-cfg.reward_clip, cfg.reward_clip).float()

    @torch.no_grad()
    def _prepare_group(self, chunks: list[Chunk]) -> dict[str, torch.Tensor]:
        """Chunks of one length T as one [T, K_total] batch: normalization, one value pass for s_t and s'_t,
        reward scaling and GAE each run once over the whole batch. Flat ([T*K_total, ...], `MINIBATCH_KEYS`) for an
        MLP; for a recurrent policy sequence-major ([K_total, T, ...], `SEQUENCE_KEYS`), with each sequence's start
        state and where its episodes start."""
        cfg = self.cfg
        observations = self._normalize(torch.stack([self._stack(chunks, "obs"), self._stack(chunks, "next_obs")]))
        terminated, truncated = self._stack(chunks, "terminated"), self._stack(chunks, "truncated")
        model = self.model
        if isinstance(model, RecurrentActorCritic):
            # The actor zeroes an env's state after its episode ends: within a chunk, an episode starts a step
            # after a done step (a chunk's first step starts from the stored state, zeroed already if need be).
            starts = torch.zeros_like(terminated)
            starts[1:] = (terminated | truncated)[:-1]
            start_state = self._stack_per_env(chunks, "rnn_state")
            features, states = model.unroll(observations[0].transpose(0, 1), start_state, starts.T)
            values = model.head.value(features).T
            # V(s'_t): the final observation (or the next one) seen from the state after step t, one batched step.
            next_features, _ = model.rnn(observations[1].transpose(0, 1).flatten(0, 1), states.flatten(0, 1))
            next_values = model.head.value(next_features).unflatten(0, features.shape[:2]).T
        else:
            values, next_values = model.value(observations)
        rewards = self._scale_rewards(*chunks)
        advantages = gae(rewards, values, next_values, terminated, truncated, cfg.gamma, cfg.gae_lambda)
        batch = {
            "obs": observations[0],
            "actions": self._stack(chunks, "actions", torch.float32),
            "logprobs": self._stack(chunks, "logprobs", torch.float32),
            "advantages": advantages,
            "returns": advantages + values,
            "values": values,
        }
        if isinstance(model, RecurrentActorCritic):
            return {**{k: v.transpose(0, 1) for k, v in batch.items()}, "rnn_state": start_state, "starts": starts.T}
        return {k: v.flatten(0, 1) for k, v in batch.items()}

    def _groups(self, chunks: list[Chunk]) -> list[dict[str, torch.Tensor]]:
        """Chunks grouped by length T (every actor uses the same chunk_steps, so normally there is one group),
        each prepared as one [T, K_total] batch."""
        groups: dict[int, list[Chunk]] = {}
        for chunk in chunks:
            groups.setdefault(len(chunk.arrays["rewards"]), []).append(chunk)
        return [self._prepare_group(group) for group in groups.values()]

    def prepare(self, chunks: list[Chunk]) -> dict[str, torch.Tensor]:
        """An MLP policy's batch on the device: flat, every transition of every chunk ([T*K, ...] per group)."""
        assert not isinstance(self.model, RecurrentActorCritic), "a recurrent policy's batch is prepare_sequences'"
        parts = self._groups(chunks)
        return {k: torch.cat([part[k] for part in parts]) for k in MINIBATCH_KEYS}

    def prepare_sequences(self, chunks: list[Chunk]) -> list[dict[str, torch.Tensor]]:
        """A recurrent policy's batch on the device: per chunk length T, the chunks' env columns as sequences
        ([N, T, ...], `SEQUENCE_KEYS`: each with its start state [N, L, H] and episode starts [N, T])."""
        assert isinstance(self.model, RecurrentActorCritic), "an MLP policy's batch is prepare's"
        return self._groups(chunks)

    # -- the update ---------------------------------------------------------------------------------

    def ppo_loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        logprobs: torch.Tensor,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        rnn_state: torch.Tensor | None = None,
        starts: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """CleanRL's loss on one minibatch; also the STEP_STATS, detached, as one tensor (no host sync).

        A recurrent policy's minibatch is N whole sequences ([N, T, ...]): the cell is unrolled over each from its
        start state `rnn_state`, zeroed where `starts` says an episode begins, and the loss is the same one over
        its N*T steps (CleanRL's ppo_atari_lstm)."""
        cfg = self.cfg
        model = self.model
        head: Head
        if isinstance(model, RecurrentActorCritic):
            assert rnn_state is not None and starts is not None, "a recurrent minibatch"
            obs = model.unroll(obs, rnn_state, starts)[0].flatten(0, 1)  # the heads' input: the cell's features
            actions, logprobs, advantages, returns, values = (
                x.flatten(0, 1) for x in (actions, logprobs, advantages, returns, values)
            )
            head = model.head
        else:
            head = model
        newlogprob, entropy = head.log_prob_entropy(obs, actions)
        newvalue = head.value(obs)
        logratio = newlogprob - logprobs  # against the behavior policy the actor ran
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - logratio).mean()
            clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()

        if cfg.norm_adv and self.replica is None:  # a rank's share was normalized over the whole minibatch
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        pg_loss1 = -advantages * ratio
        pg_loss2 = -advantages * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)
        pg_loss = torch.max(pg_loss1, pg_loss2).mean()

        if cfg.clip_vloss:
            v_clipped = values + torch.clamp(newvalue - values, -cfg.clip_coef, cfg.clip_coef)
            v_loss = 0.5 * torch.max((newvalue - returns) ** 2, (v_clipped - returns) ** 2).mean()
        else:
            v_loss = 0.5 * ((newvalue - returns) ** 2).mean()

        entropy_loss = entropy.mean()
        loss = pg_loss - cfg.ent_coef * entropy_loss + v_loss * cfg.vf_coef
        return loss, torch.stack([pg_loss, v_loss, entropy_loss, approx_kl, clipfrac]).detach()

    def minibatch_step(self, minibatch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Forward, loss, backward, gradient clipping and Adam on one minibatch: the unit that is compiled
        and captured. The optimizer stays outside torch.compile: the annealed learning rate would recompile
        it every update, and fused Adam is one kernel already."""
        self.optimizer.zero_grad()  # to None: inside a capture, backward then takes the grads from its pool
        loss, stats = self.loss_fn(**minibatch)
        loss.backward()
        if self.replica is not None:  # the whole minibatch's gradients; a non-finite step shows in the update's end
            self.replica.average_gradients(self.model.parameters())
        nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm, foreach=True)
        self.optimizer.step()
        return stats

    def reset_steps(self) -> None:
        """The loss and step functions: eager, or compiled (and CUDA-graph captured on CUDA, unless a rank's step
        holds an all-reduce: algos/replica.py). Called again after a restore: a captured graph holds the optimizer
        state it replaced."""
        self.loss_fn: Callable[..., tuple[torch.Tensor, torch.Tensor]] = self.ppo_loss
        self.step_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor] = self.minibatch_step
        if self.compile:
            self.loss_fn = torch.compile(self.ppo_loss, dynamic=False)
        if self.captures():
            self.step_fn = CapturedStep(self.minibatch_step)

    def _step(self, minibatch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.run_step(lambda: self.step_fn(minibatch))

    def update(self, chunks: list[Chunk], progress: float) -> dict[str, float]:
        """One learner step on a batch of chunks; `progress` in [0, 1] drives learning-rate annealing.

        A step that leaves a loss or a parameter non-finite (a diverged update) is undone: parameters and
        optimizer state go back to where they were, and the statistics say `nonfinite_skipped` = 1.

        Minibatches have a fixed shape: each epoch draws a permutation of the batch and cuts its first
        `batch // minibatch_size * minibatch_size` entries into minibatches; the remainder (fewer than
        minibatch_size transitions, a different random few each epoch) sits that epoch out. A recurrent policy's
        entries are whole sequences (an env's column of a chunk), `minibatch_size // T` to a minibatch, never
        shuffled steps. The device is waited for once, for the statistics at the end (and once per epoch when
        `target_kl` is set)."""
        cfg = self.cfg
        lr = cfg.lr * max(0.0, 1.0 - progress) if cfg.anneal_lr else cfg.lr
        group = self.optimizer.param_groups[0]
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)  # the tensor a captured graph reads
        else:
            group["lr"] = lr
        # What a diverged update must not leave behind: the return statistics `prepare` moves, and below
        # the parameters and optimizer state.
        ret_rms, return_carry = self.ret_rms.state(), dict(self.return_carry)
        if isinstance(self.model, RecurrentActorCritic):  # entries are sequences of T steps
            batches = [(b, max(1, cfg.minibatch_size // b["starts"].shape[1])) for b in self.prepare_sequences(chunks)]
        else:  # entries are transitions
            batches = [(self.prepare(chunks), cfg.minibatch_size)]
        saved = [t.detach().clone() for t in self._updated_in_place()]
        plans = []
        for b, per_minibatch in batches:
            entries = len(b["obs"])
            minibatch_size = min(per_minibatch, entries)
            if self.replica is not None:  # equal shares (config validation makes cfg.minibatch_size a multiple)
                minibatch_size = max(self.replica.size, minibatch_size - minibatch_size % self.replica.size)
            num_minibatches = entries // minibatch_size
            orders = torch.stack([torch.randperm(entries, generator=self.generator) for _ in range(cfg.update_epochs)])
            orders = orders[:, : num_minibatches * minibatch_size].to(self.device)
            plans.append((b, minibatch_size, num_minibatches, orders))
        clipfrac_sum = torch.zeros((), device=self.device)
        steps = 0
        for epoch in range(cfg.update_epochs):
            for b, minibatch_size, num_minibatches, orders in plans:
                shuffled = {k: v[orders[epoch]].unflatten(0, (num_minibatches, minibatch_size)) for k, v in b.items()}
                if self.replica is not None:
                    shuffled = self._rank_share(shuffled, self.replica)
                for i in range(num_minibatches):
                    stats = self._step({k: v[i] for k, v in shuffled.items()})
                    clipfrac_sum += stats[STEP_STATS.index("clipfrac")]
                steps += num_minibatches
            if cfg.target_kl is not None and self._kl(stats) > cfg.target_kl:
                break

        returns = torch.cat([b["returns"].flatten() for b, _ in batches])
        values = torch.cat([b["values"].flatten() for b, _ in batches])
        batch_size = len(returns)
        var_y = returns.var(correction=0)
        explained_variance = 1 - (returns - values).var(correction=0) / var_y
        finite = torch.stack([torch.isfinite(t).all() for t in (stats, *self.model.parameters())]).all()
        last = torch.cat(
            [stats[:-1], (clipfrac_sum / steps)[None], var_y[None], explained_variance[None], finite[None]]
        )
        if self.replica is not None:  # the whole minibatch's statistics; finite only where it is on every rank
            self.replica.mean(last)
            last[-1] = last[-1] == 1.0
        *losses, clipfrac, var_y_host, explained, all_finite = last.tolist()  # the one wait for the device
        if not all_finite:  # a diverged step: the update never happened
            self._restore_in_place(saved)
            self.ret_rms.load(ret_rms)
            self.return_carry = return_carry
        else:
            # Statistics move only after the update, so this batch was normalized as its actors saw it.
            if cfg.obs_norm:
                for chunk in chunks:
                    raw = np.asarray(chunk.arrays["obs"])
                    self.obs_rms.update(raw.reshape(-1, raw.shape[-1]))
            self.updates += 1
            self.env_steps_consumed += batch_size
        return {
            **dict(zip(STEP_STATS[:-1], losses, strict=True)),
            "clipfrac": clipfrac,
            "explained_variance": float("nan") if var_y_host == 0 else explained,
            "lr": lr,
            "batch_transitions": float(batch_size),
            "nonfinite_skipped": 0.0 if all_finite else 1.0,
        }

    def _rank_share(self, shuffled: dict[str, torch.Tensor], replica: Replica) -> dict[str, torch.Tensor]:
        """This rank's columns of every minibatch ([minibatches, minibatch_size, ...]), the advantages normalized
        over the whole minibatch first (what `ppo_loss` does for a learner alone)."""
        if self.cfg.norm_adv:  # over all of a minibatch's steps (a recurrent minibatch's: [sequences, T])
            advantages = shuffled["advantages"]
            flat = advantages.flatten(1)
            mean, std = flat.mean(1), flat.std(1)
            view = (-1,) + (1,) * (advantages.dim() - 1)
            shuffled = {**shuffled, "advantages": (advantages - mean.view(view)) / (std.view(view) + 1e-8)}
        share = replica.share(shuffled["obs"].shape[1])
        return {k: v[:, share] for k, v in shuffled.items()}

    def _kl(self, stats: torch.Tensor) -> float:
        """The last minibatch's approximate KL (over all ranks' shares): `target_kl`'s early stop, the same on every
        rank."""
        kl = stats[STEP_STATS.index("approx_kl")].clone()
        return float((kl if self.replica is None else self.replica.mean(kl)).item())

    def _updated_in_place(self) -> list[torch.Tensor]:
        """What an update changes: the parameters and the optimizer's state (moments, step counts)."""
        state = [v for per_param in self.optimizer.state.values() for v in per_param.values() if torch.is_tensor(v)]
        return [*self.model.parameters(), *state]

    @torch.no_grad()
    def _restore_in_place(self, saved: list[torch.Tensor]) -> None:
        """Put back what `_updated_in_place` held before the update, copying into the same tensors (a
        captured CUDA graph keeps reading them); optimizer state the update created starts from zero."""
        for i, tensor in enumerate(self._updated_in_place()):
            if i < len(saved):
                tensor.copy_(saved[i])
            else:
                tensor.zero_()

    # -- parameters and checkpoints -----------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        """What actors need: the weights and the observation-normalizer statistics.

        Nested ({"policy": state_dict, "obs_norm": stats}); the codec sends it as `policy/<key>` and
        `obs_norm/<stat>` frames. Weights are float32; the statistics stay float64 so actors normalize
        bit-for-bit as the learner does. The state_dict's keys say the head: `actor_mean.*` and `actor_logstd`
        for Box actions, `actor_logits.*` for Discrete ones; `critic.*` either way."""
        policy = {k: v.detach().cpu().numpy() for k, v in self.model.state_dict().items()}
        return {"policy": policy, "obs_norm": self.obs_rms.state()}

    def state_dict(self) -> dict[str, Any]:
        """Everything to resume exactly; only tensors, numbers and containers (torch weights_only load)."""
        as_tensors = lambda state: {k: torch.as_tensor(v) for k, v in state.items()}
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "obs_rms": as_tensors(self.obs_rms.state()),
            "ret_rms": as_tensors(self.ret_rms.state()),
            "return_carry": {str(k): v for k, v in self.return_carry.items()},
            "generator": self.generator.get_state(),  # the only torch RNG an update draws from
            "updates": self.updates,
            "env_steps_consumed": self.env_steps_consumed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"], ours=("lr",))  # the lr tensor a graph reads
        as_arrays = lambda state: {k: v.numpy() for k, v in state.items()}
        self.obs_rms.load(as_arrays(state["obs_rms"]))
        self.ret_rms.load(as_arrays(state["ret_rms"]))
        self.return_carry = {int(k): v.to(self.device, torch.float64) for k, v in state["return_carry"].items()}
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
        self.env_steps_consumed = int(state["env_steps_consumed"])
        self.reset_steps()


def make_policy(
    obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: PPOConfig, actor_index: int, num_actors: int = 1
) -> PPOPolicy:
    del num_actors  # every PPO actor samples from the same distribution
    return PPOPolicy(obs_space, act_space, cfg, actor_index)


def make_collector(
    envs: gym.vector.VectorEnv, policy: PPOPolicy, cfg: PPOConfig, actor_index: int, chunk_steps: int
) -> RolloutCollector:
    """A recurrent policy's chunks also hold, per env, the state its column starts from (`PER_ENV`)."""
    per_env = policy.chunk_start if cfg.recurrent else None
    return RolloutCollector(envs, policy, chunk_steps, actor_index, per_env=per_env)


make_learner = PPOLearner


def chunk_fields(obs_space: spaces.Space[Any], act_space: spaces.Space[Any], cfg: PPOConfig) -> Fields:
    """One step of a `RolloutCollector` chunk as `PPOPolicy.act` records it: what every chunk the learner takes
    must hold, field by field (proto/wire.py `ReplyLayout`); a Discrete action is an index the head has a logit for.
    A recurrent policy's chunks also hold each env's start state (`PER_ENV`/rnn_state, one per column, not per step:
    where its episodes start follows from the done flags)."""
    f32, obs = np.dtype(np.float32), tuple(obs_space.shape or ())
    if isinstance(act_space, spaces.Discrete):
        actions = Field(np.dtype(np.int64), (), 0, int(act_space.n) - 1)
    else:
        actions = Field(f32, tuple(act_space.shape or ()))
    return {
        "obs": Field(f32, obs),
        "next_obs": Field(f32, obs),
        "rewards": Field(f32),
        "terminated": Field(np.dtype(bool)),
        "truncated": Field(np.dtype(bool)),
        "actions": actions,
        "logprobs": Field(f32),
        **({f"{PER_ENV}/rnn_state": Field(f32, rnn_state_shape(cfg))} if cfg.recurrent else {}),
    }


if TYPE_CHECKING:  # mypy checks this module against the interface the roles call
    from surreal.algos.interface import Algorithm
    from surreal.algos.ppo import learner as _this

    _CHECKED: Algorithm = _this
