"""PPO's networks: separate tanh actor and critic MLPs with orthogonal init, and the two heads on them (CleanRL's
ppo_continuous_action for Box actions, its ppo.py's categorical head for Discrete ones).

A head alone is the feed-forward mode of the model (`FeedForward`): the action depends on the observation only, so a
batch's entries are transitions, shuffled freely. recurrent.py's `RecurrentActorCritic` is the other mode and answers
the same calls with its cell in front, so the learner's update and the policy have one path.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical, Normal

from surreal.algos.inference import DeterministicPolicy

Batch = dict[str, torch.Tensor]


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


class FeedForward(nn.Module):
    """An actor-critic head, and the model's feed-forward mode: what the learner and the policy ask of a model."""

    critic: nn.Sequential

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per sample: the log-probability of `actions` and the entropy."""
        raise NotImplementedError

    def sample(self, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(actions, their log-probabilities), drawn from `generator`."""
        raise NotImplementedError

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action."""
        raise NotImplementedError

    def actor(self) -> nn.Module:
        """The network the deterministic action is computed from (its mean, or its logits)."""
        raise NotImplementedError

    # -- the mode ------------------------------------------------------------------------------------------

    def values(
        self, observations: torch.Tensor, done: torch.Tensor, per_env: Batch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """V(s_t) and V(s'_t) of a [T, K] batch: `observations` stacks s and s' ([2, T, K, obs]); `done` flags each
        step's episode end and `per_env` holds the chunks' `PER_ENV` arrays, which need nothing here."""
        values, next_values = self.value(observations)
        return values, next_values

    def entries(self, batch: Batch, done: torch.Tensor, per_env: Batch) -> Batch:
        """A prepared [T, K] batch as the update's entries: transitions ([T*K, ...])."""
        return {k: v.flatten(0, 1) for k, v in batch.items()}

    def minibatches(self, groups: list[Batch], minibatch_size: int) -> list[tuple[Batch, int]]:
        """The update's entries (one group per chunk length) and how many make a minibatch: every transition
        together, `minibatch_size` to a minibatch."""
        return [({k: torch.cat([group[k] for group in groups]) for k in groups[0]}, minibatch_size)]

    def per_step(self, minibatch: Batch) -> tuple[FeedForward, Batch]:
        """The head that scores a minibatch, and its tensors step by step ([N, ...])."""
        return self, minibatch

    def act_step(self, x: torch.Tensor, state: Any) -> tuple[FeedForward, torch.Tensor, Any]:
        """One step of acting: the head, its input for observations `x`, and the state after (none here)."""
        return self, x, state

    def deterministic(self, preprocess: nn.Module, postprocess: nn.Module) -> nn.Module:
        """The deterministic policy as one module, over copies of the weights (algos/inference.py)."""
        return DeterministicPolicy(preprocess, copy.deepcopy(self.actor()), postprocess)


class ActorCritic(FeedForward):
    """Box actions: a Gaussian with the actor MLP's output as mean and a state-independent log-std."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int], log_std_init: float = 0.0) -> None:
        super().__init__()
        self.critic = mlp([obs_dim, *hidden_sizes, 1], out_std=1.0)
        self.actor_mean = mlp([obs_dim, *hidden_sizes, act_dim], out_std=0.01)
        self.actor_logstd = nn.Parameter(torch.full((1, act_dim), log_std_init))

    def distribution(self, obs: torch.Tensor) -> Normal:
        mean = self.actor_mean(obs)
        # No argument validation: the std is an exp, always valid, and checking it costs a host sync per call.
        return Normal(mean, self.actor_logstd.expand_as(mean).exp(), validate_args=False)

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both summed over action dimensions."""
        dist = self.distribution(obs)
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1)

    def sample(self, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The actions before clipping."""
        dist = self.distribution(obs)
        noise = torch.randn(dist.mean.shape, generator=generator, device=dist.mean.device)
        actions = dist.mean + dist.stddev * noise
        return actions, dist.log_prob(actions).sum(-1)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean (clipped to the bounds by the policy)."""
        return self.actor_mean(obs)

    def actor(self) -> nn.Module:
        return self.actor_mean


class CategoricalActorCritic(FeedForward):
    """Discrete actions (CleanRL's ppo.py): the actor MLP's outputs are the logits of a categorical distribution.
    Actions are indices 0..n-1 (a `Discrete(n, start)` env gets index + start from the policy)."""

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: list[int]) -> None:
        super().__init__()
        self.critic = mlp([obs_dim, *hidden_sizes, 1], out_std=1.0)
        self.actor_logits = mlp([obs_dim, *hidden_sizes, num_actions], out_std=0.01)

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
        """The most likely index."""
        return self.actor_logits(obs).argmax(-1)

    def actor(self) -> nn.Module:
        return self.actor_logits
