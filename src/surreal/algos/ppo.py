"""Proximal Policy Optimization (Schulman et al. 2017) for continuous actions, distributed.

Follows CleanRL's ppo_continuous_action and the implementation details catalogued by Huang et al. 2022
("The 37 Implementation Details of PPO"): separate tanh actor and critic MLPs with orthogonal init, a
state-independent log-std, observation normalization, reward scaling by the running std of the
discounted return, GAE(lambda), per-minibatch advantage normalization, clipped surrogate, optional value
clipping, entropy bonus, global gradient clipping and linear learning-rate annealing.

What distribution changes: the experience comes from actors running slightly older parameters, so the
ratio is taken against the behavior log-probability each actor recorded, chunks more than
`max_staleness` versions old are dropped (runtime/flow.py), and the observation-normalizer statistics
travel inside the parameter blob so actors normalize exactly as the learner does.
Sockets and loops live in the roles; this file is the math.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Normal

from surreal.algos.normalizer import RunningMeanStd
from surreal.config.schema import PPOConfig
from surreal.proto.wire import Chunk
from surreal.runtime.rollout import RolloutCollector

# -- networks -------------------------------------------------------------------------------------------


def layer_init(layer: nn.Linear, std: float = float(np.sqrt(2)), bias_const: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(sizes: list[int], out_std: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for n_in, n_out in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [layer_init(nn.Linear(n_in, n_out)), nn.Tanh()]
    layers.append(layer_init(nn.Linear(sizes[-2], sizes[-1]), std=out_std))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int]) -> None:
        super().__init__()
        self.critic = mlp([obs_dim, *hidden_sizes, 1], out_std=1.0)
        self.actor_mean = mlp([obs_dim, *hidden_sizes, act_dim], out_std=0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> Normal:
        mean = self.actor_mean(obs)
        return Normal(mean, self.actor_logstd.expand_as(mean).exp())


def _dims(obs_space: spaces.Box, act_space: spaces.Box) -> tuple[int, int]:
    if not isinstance(act_space, spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError("PPO here supports flat Box observations and Box actions")
    return int(obs_space.shape[0]), int(act_space.shape[0])


# -- actor side -----------------------------------------------------------------------------------------


class PPOPolicy:
    """The policy an actor runs: CPU, no gradients, the learner's normalizer statistics."""

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Box, cfg: PPOConfig, actor_index: int) -> None:
        obs_dim, act_dim = _dims(obs_space, act_space)
        self.cfg = cfg
        self.model = ActorCritic(obs_dim, act_dim, list(cfg.hidden_sizes)).requires_grad_(False).eval()
        self.obs_rms = RunningMeanStd((obs_dim,))
        self.low, self.high = act_space.low, act_space.high
        # Actors sample differently, and reproducibly: each has its own seeded generator (exploration is
        # not scaled per actor; the recorded logprob is under the very distribution sampled from).
        self.generator = torch.Generator().manual_seed(cfg.seed + 1_000 * actor_index)

    def load_params(self, arrays: dict[str, Any]) -> None:
        """`arrays` as `PPOLearner.params` made them (the codec restores the nesting of `policy/<key>`)."""
        self.model.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in arrays["policy"].items()})
        self.obs_rms.load(arrays["obs_norm"])

    def _input(self, obs: np.ndarray) -> torch.Tensor:
        x = self.obs_rms.normalize(obs, self.cfg.obs_clip) if self.cfg.obs_norm else obs.astype(np.float32)
        return torch.from_numpy(x)

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        dist = self.model.distribution(self._input(obs))
        actions = dist.mean + dist.stddev * torch.randn(dist.mean.shape, generator=self.generator)
        logprobs = dist.log_prob(actions).sum(-1)
        actions_np = actions.numpy()
        record = {"actions": actions_np.astype(np.float32), "logprobs": logprobs.numpy().astype(np.float32)}
        return np.clip(actions_np, self.low, self.high), record

    @torch.no_grad()
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        return np.clip(self.model.actor_mean(self._input(obs)).numpy(), self.low, self.high)

    def episode_done(self, done: np.ndarray) -> None:
        del done  # PPO's sampling keeps no per-episode state


# -- learner side ---------------------------------------------------------------------------------------


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> np.ndarray:
    """Generalized advantage estimation over a time-major [T, K] chunk.

    delta_t = r_t + gamma * V(s'_t) * (1 - terminated_t) - V(s_t): a truncated step still bootstraps from
    its final observation. The recursion stops at any episode end (terminated or truncated), and the
    chunk's last step needs no carried advantage because its V(s'_T) is already in delta_T."""
    T = rewards.shape[0]
    deltas = rewards + gamma * next_values * (1.0 - terminated) - values
    episode_continues = 1.0 - (terminated | truncated)
    advantages = np.zeros_like(deltas)
    last = np.zeros(deltas.shape[1:], deltas.dtype)
    for t in reversed(range(T)):
        last = deltas[t] + gamma * gae_lambda * episode_continues[t] * last
        advantages[t] = last
    return advantages


class PPOLearner:
    def __init__(self, obs_space: spaces.Box, act_space: spaces.Box, cfg: PPOConfig, device: torch.device) -> None:
        obs_dim, act_dim = _dims(obs_space, act_space)
        self.cfg = cfg
        self.device = device
        torch.manual_seed(cfg.seed)
        self.model = ActorCritic(obs_dim, act_dim, list(cfg.hidden_sizes)).to(device)
        # foreach: one kernel per step for all parameters instead of one per tensor (the update is hundreds
        # of tiny steps, so per-tensor overhead dominates, on CPU and GPU alike).
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, eps=1e-5, foreach=True)
        self.obs_rms = RunningMeanStd((obs_dim,))
        self.ret_rms = RunningMeanStd(())
        self.return_carry: dict[int, np.ndarray] = {}  # discounted return so far, per actor, per env
        self.generator = torch.Generator().manual_seed(cfg.seed)  # minibatch shuffles
        self.updates = 0
        self.env_steps_consumed = 0

    # -- data preparation ---------------------------------------------------------------------------

    def _normalize(self, obs: np.ndarray) -> np.ndarray:
        return self.obs_rms.normalize(obs, self.cfg.obs_clip) if self.cfg.obs_norm else obs.astype(np.float32)

    def _scale_rewards(self, chunk: Chunk) -> np.ndarray:
        """CleanRL's NormalizeReward: divide by the running std of the discounted return.

        The return carry continues across an actor's consecutive chunks (one per env, reset at episode
        ends), so the statistic is the one a wrapper inside each actor would have seen; the statistics
        are updated once per chunk rather than per step, which changes nothing beyond the first chunks."""
        rewards = np.asarray(chunk.arrays["rewards"], np.float64)
        if not self.cfg.reward_scale:
            return rewards.astype(np.float32)
        done = np.asarray(chunk.arrays["terminated"]) | np.asarray(chunk.arrays["truncated"])
        carry = self.return_carry.get(chunk.actor)
        if carry is None or carry.shape != rewards.shape[1:]:
            carry = np.zeros(rewards.shape[1:])
        returns = np.empty_like(rewards)
        for t in range(rewards.shape[0]):
            carry = carry * self.cfg.gamma + rewards[t]
            returns[t] = carry
            carry = np.where(done[t], 0.0, carry)
        self.return_carry[chunk.actor] = carry
        self.ret_rms.update(returns.reshape(-1))
        scaled = rewards / np.sqrt(self.ret_rms.var + 1e-8)
        return np.clip(scaled, -self.cfg.reward_clip, self.cfg.reward_clip).astype(np.float32)

    @torch.no_grad()
    def _values(self, obs: np.ndarray) -> np.ndarray:
        flat = torch.from_numpy(obs.reshape(-1, obs.shape[-1])).to(self.device)
        return self.model.value(flat).cpu().numpy().reshape(obs.shape[:-1])

    def prepare(self, chunks: list[Chunk]) -> dict[str, torch.Tensor]:
        """Normalize, scale rewards, compute values and GAE per chunk; flatten into one batch."""
        parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("obs", "actions", "logprobs", "advantages", "returns", "values")
        }
        for chunk in chunks:
            a = chunk.arrays
            obs, next_obs = self._normalize(np.asarray(a["obs"])), self._normalize(np.asarray(a["next_obs"]))
            values, next_values = self._values(obs), self._values(next_obs)
            rewards = self._scale_rewards(chunk)
            terminated, truncated = np.asarray(a["terminated"]), np.asarray(a["truncated"])
            advantages = gae(rewards, values, next_values, terminated, truncated, self.cfg.gamma, self.cfg.gae_lambda)
            parts["obs"].append(obs.reshape(-1, obs.shape[-1]))
            parts["actions"].append(np.asarray(a["actions"]).reshape(-1, a["actions"].shape[-1]))
            parts["logprobs"].append(np.asarray(a["logprobs"]).reshape(-1))
            parts["advantages"].append(advantages.reshape(-1))
            parts["returns"].append((advantages + values).reshape(-1))
            parts["values"].append(values.reshape(-1))
        return {k: torch.from_numpy(np.concatenate(v).astype(np.float32)).to(self.device) for k, v in parts.items()}

    # -- the update ---------------------------------------------------------------------------------

    def update(self, chunks: list[Chunk], progress: float) -> dict[str, float]:
        """One learner step on a batch of chunks; `progress` in [0, 1] drives learning-rate annealing."""
        cfg = self.cfg
        if cfg.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = cfg.lr * max(0.0, 1.0 - progress)
        b = self.prepare(chunks)
        batch_size = b["obs"].shape[0]
        clipfracs, approx_kl = [], torch.zeros(())
        for _epoch in range(cfg.update_epochs):
            order = torch.randperm(batch_size, generator=self.generator).to(self.device)
            for start in range(0, batch_size, cfg.minibatch_size):
                mb = order[start : start + cfg.minibatch_size]
                dist = self.model.distribution(b["obs"][mb])
                newlogprob = dist.log_prob(b["actions"][mb]).sum(-1)
                entropy = dist.entropy().sum(-1)
                newvalue = self.model.value(b["obs"][mb])
                logratio = newlogprob - b["logprobs"][mb]  # against the behavior policy the actor ran
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs.append(((ratio - 1.0).abs() > cfg.clip_coef).float().mean())  # no sync per step

                advantages = b["advantages"][mb]
                if cfg.norm_adv:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
                pg_loss1 = -advantages * ratio
                pg_loss2 = -advantages * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                returns, old_values = b["returns"][mb], b["values"][mb]
                if cfg.clip_vloss:
                    v_clipped = old_values + torch.clamp(newvalue - old_values, -cfg.clip_coef, cfg.clip_coef)
                    v_loss = 0.5 * torch.max((newvalue - returns) ** 2, (v_clipped - returns) ** 2).mean()
                else:
                    v_loss = 0.5 * ((newvalue - returns) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - cfg.ent_coef * entropy_loss + v_loss * cfg.vf_coef
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm, foreach=True)
                self.optimizer.step()
            if cfg.target_kl is not None and approx_kl.item() > cfg.target_kl:
                break

        # Statistics move only after the update, so this batch was normalized as its actors saw it.
        if cfg.obs_norm:
            for chunk in chunks:
                raw = np.asarray(chunk.arrays["obs"])
                self.obs_rms.update(raw.reshape(-1, raw.shape[-1]))
        self.updates += 1
        self.env_steps_consumed += batch_size
        y_pred, y_true = b["values"].cpu().numpy(), b["returns"].cpu().numpy()
        var_y = np.var(y_true)
        return {
            "policy_loss": pg_loss.item(),
            "value_loss": v_loss.item(),
            "entropy": entropy_loss.item(),
            "approx_kl": approx_kl.item(),
            "clipfrac": torch.stack(clipfracs).mean().item(),
            "explained_variance": float("nan") if var_y == 0 else float(1 - np.var(y_true - y_pred) / var_y),
            "lr": self.optimizer.param_groups[0]["lr"],
            "batch_transitions": float(batch_size),
        }

    # -- parameters and checkpoints -----------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        """What actors need: the weights and the observation-normalizer statistics.

        Nested ({"policy": state_dict, "obs_norm": stats}); the codec sends it as `policy/<key>` and
        `obs_norm/<stat>` frames. Weights are float32; the statistics stay float64 so actors normalize
        bit-for-bit as the learner does."""
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
            "return_carry": {str(k): torch.as_tensor(v) for k, v in self.return_carry.items()},
            "generator": self.generator.get_state(),  # the only torch RNG an update draws from
            "updates": self.updates,
            "env_steps_consumed": self.env_steps_consumed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        as_arrays = lambda state: {k: v.numpy() for k, v in state.items()}
        self.obs_rms.load(as_arrays(state["obs_rms"]))
        self.ret_rms.load(as_arrays(state["ret_rms"]))
        self.return_carry = {int(k): v.numpy().copy() for k, v in state["return_carry"].items()}
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
        self.env_steps_consumed = int(state["env_steps_consumed"])


def make_policy(
    obs_space: spaces.Box, act_space: spaces.Box, cfg: PPOConfig, actor_index: int, num_actors: int = 1
) -> PPOPolicy:
    del num_actors  # every PPO actor samples from the same distribution
    return PPOPolicy(obs_space, act_space, cfg, actor_index)


def make_collector(
    envs: gym.vector.VectorEnv, policy: PPOPolicy, cfg: PPOConfig, actor_index: int, chunk_steps: int
) -> RolloutCollector:
    del cfg
    return RolloutCollector(envs, policy, chunk_steps, actor_index)


def make_learner(obs_space: spaces.Box, act_space: spaces.Box, cfg: PPOConfig, device: torch.device) -> PPOLearner:
    return PPOLearner(obs_space, act_space, cfg, device)
