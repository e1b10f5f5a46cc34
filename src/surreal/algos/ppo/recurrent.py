"""SURREAL-PPO's recurrent policy (`algo.recurrent`: lstm or gru), in its own file as CleanRL's ppo_atari_lstm is: a
cell over the normalized observations feeds both heads of nets.py.

Its state travels with the chunks: the actor records, once per env, the state each chunk's column starts from
(`PER_ENV`), and zeroes an env's state when its episode ends. The learner unrolls each column from that stored state,
zeroing it where the done flags say an episode starts, and backpropagates through the whole chunk (truncated BPTT); a
minibatch is whole sequences, never shuffled steps. The stored state came from the parameters the actor ran, as
R2D2's "stored state" strategy, without burn-in. `RecurrentActorCritic` is the model's recurrent mode: it answers
what nets.py's `FeedForward` does, so the learner's update and the policy have one path.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from surreal.algos.inference import RecurrentDeterministicPolicy
from surreal.algos.ppo.config import PPOConfig
from surreal.algos.ppo.nets import Batch, FeedForward

STEP_KEYS = ("actions", "logprobs", "advantages", "returns", "values")  # a sequence's tensors besides its features


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


def rnn_state_shape(cfg: PPOConfig) -> tuple[int, int]:
    """The per-env recurrent state's shape (L, H) a `RecurrentCell` of this config keeps."""
    return (2 if cfg.recurrent == "lstm" else 1, cfg.rnn_hidden_size)


def episode_starts(done: torch.Tensor) -> torch.Tensor:
    """Where an episode starts within a [T, K] batch: the step after a done one (the actor zeroes the state then; a
    chunk's first step starts from the stored state, zeroed already if need be)."""
    starts = torch.zeros_like(done)
    starts[1:] = done[:-1]
    return starts


class RecurrentActorCritic(nn.Module):
    """An LSTM (or GRU) cell over the normalized observations, whose output both heads take in place of the
    observation (the same Gaussian or categorical actor-critic, on H features). The critic shares the cell, so the
    value loss shapes the memory too (as in SURREAL and CleanRL's ppo_atari_lstm). The state before an env's first
    step, and after each episode end, is zeros."""

    def __init__(self, kind: str, obs_dim: int, hidden: int, head: FeedForward) -> None:
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

    # -- the mode (nets.py's FeedForward says what each call is) ---------------------------------------------

    def values(
        self, observations: torch.Tensor, done: torch.Tensor, per_env: Batch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each env column unrolled from its stored start state; V(s'_t) is the next (or the final) observation seen
        from the state after step t, in one batched step."""
        features, states = self.unroll(observations[0].transpose(0, 1), per_env["rnn_state"], episode_starts(done).T)
        values = self.head.value(features).T
        next_features, _ = self.rnn(observations[1].transpose(0, 1).flatten(0, 1), states.flatten(0, 1))
        return values, self.head.value(next_features).unflatten(0, features.shape[:2]).T

    def entries(self, batch: Batch, done: torch.Tensor, per_env: Batch) -> Batch:
        """Sequences ([K, T, ...]), each with its start state [K, L, H] and where its episodes start [K, T]."""
        sequences = {k: v.transpose(0, 1) for k, v in batch.items()}
        return {**sequences, "rnn_state": per_env["rnn_state"], "starts": episode_starts(done).T}

    def minibatches(self, groups: list[Batch], minibatch_size: int) -> list[tuple[Batch, int]]:
        """Per chunk length T, its sequences, `minibatch_size // T` to a minibatch."""
        return [(group, max(1, minibatch_size // group["starts"].shape[1])) for group in groups]

    def per_step(self, minibatch: Batch) -> tuple[FeedForward, Batch]:
        """The cell unrolled over each sequence of the minibatch from its start state: the heads' input per step."""
        features = self.unroll(minibatch["obs"], minibatch["rnn_state"], minibatch["starts"])[0]
        return self.head, {"obs": features.flatten(0, 1), **{k: minibatch[k].flatten(0, 1) for k in STEP_KEYS}}

    def act_step(self, x: torch.Tensor, state: Any) -> tuple[FeedForward, torch.Tensor, torch.Tensor]:
        h, state = self.rnn(x, state)
        return self.head, h, state

    def deterministic(self, preprocess: nn.Module, postprocess: nn.Module) -> nn.Module:
        """(obs, state) -> (actions, state)."""
        rnn, actor = copy.deepcopy(self.rnn), copy.deepcopy(self.head.actor())
        return RecurrentDeterministicPolicy(preprocess, rnn, actor, postprocess)
