"""Learner update speed: the algorithm's learner against a plain CleanRL-style loop, same batch, same run.

    python -m bench.learner [--algo ppo ddpg td3 sac crossq] [--device cpu|cuda] [--updates N] [--seconds S]
                            [--compile] [--threads 1] [--quick] [--save | --out PATH] [--device-auto]
    python -m bench.learner --replicas 1 2 [...]   (the data-parallel learner: bench/learner_group.py)

No sockets: real HalfCheetah-v5 experience (obs 17-D, act 6-D) is collected once with the algorithm's own policy
and collector, then fed to the learner in-process, over and over. Each row also times `core`, the learner
role's `LearnerCore` on the same experience: what a learner process does per update (staleness bound, the
update, publishing the blob, metrics rows, checkpoints), minus sockets.

- ppo: 8 chunks of [256, 1] from two actors (2,048 transitions; CleanRL's minibatch 64 x 10 epochs) and 16
  chunks (4,096; minibatch 1,024 x 2 epochs, Sample Factory's MuJoCo defaults). The reference is CleanRL's
  ppo_continuous_action: per-chunk NumPy preparation (normalization, values, reward-scaling carry, GAE), then
  per-minibatch gathers, torch.distributions, default Adam, clip_grad_norm_ and `.item()` per minibatch.
- ddpg / td3: replay-shaped samples of 4 minibatches of 256 (`learner.minibatches_per_sample`) stepped through
  in one call, 256-256 MLPs; the reference is CleanRL's ddpg / td3_continuous_action update on one minibatch;
  rates are per gradient step. `matmul_floor_ms_per_update` is the step's matmul FLOPs at this device's
  [256, 256] @ [256, 256] rate, and `matmul_share_current` that floor over the current update's time: near 1,
  only fewer FLOPs (or another device) can make the update faster.
- sac: SAC's learner at its packaged defaults (twin critics, a target network, actor and temperature every step)
  against CleanRL's sac_continuous_action with those settings; its `ms_per_step` beside ddpg's is what a SAC
  step costs against a DDPG step on the same device.
- crossq (not in the default set): SAC with `preset=crossq` (batch renormalization, joint forward, no target
  network, the actor every 3rd step, 2048-wide critics) against the same CleanRL SAC update with critics as wide,
  so `ratio` is what CrossQ's switches cost or save at that width, and its `ms_per_step` beside sac's what the
  recipe costs against SAC's defaults.

Each variant gets one untimed first update (reported: for a compiled learner it holds the compile time, which
depends on inductor's on-disk cache: point TORCHINDUCTOR_CACHE_DIR at an empty folder for the cold figure),
one more warm-up, then ten or more short rounds alternating the variants so they share the machine's load; the
rate is the median round's. `ratio` = current / reference in updates per second. The last line printed is one
JSON object; `--save` also writes it to bench/results/learner.<machine>.json, `--out` to PATH.

`--device-auto` adds what `device=auto` chooses here for `make run`'s PPO and for DDPG (one update of each timed
on the CPU and, with CUDA, on the GPU, as the learner role decides at start).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.distributions import Normal

from bench._runs import RESULTS, emit
from bench.learner_workload import (
    CHUNK_STEPS,
    ENV_ID,
    algo_module,
    collect_chunks,
    machine,
    offpolicy_config,
    ppo_config,
    transition_batches,
)
from surreal.algos import get_algorithm
from surreal.algos.ddpg.config import DDPGConfig
from surreal.algos.ddpg.nets import DeterministicActor, relu_mlp
from surreal.algos.interface import OffPolicyLearner, OnPolicyLearner
from surreal.algos.normalizer import RunningMeanStd
from surreal.algos.ppo.config import PPOConfig
from surreal.algos.ppo.nets import ActorCritic
from surreal.algos.sac.config import SACConfig
from surreal.config import load_config
from surreal.config.schema import LearnerConfig
from surreal.metrics import RoleMetrics
from surreal.proto.wire import Chunk, FifoReply, SampleReply, ShardReport, TransitionReply
from surreal.roles.learner import LearnerCore
from surreal.roles.ports import InProcessParams

# -- the references: CleanRL's updates, written plainly ------------------------------------------------


class CleanRLPPO:
    """ppo_continuous_action's update on the same chunks: per-chunk NumPy preparation, then the
    per-minibatch loop exactly as CleanRL writes it."""

    def __init__(self, obs_dim: int, act_dim: int, cfg: PPOConfig, device: torch.device) -> None:
        self.cfg, self.device = cfg, device
        torch.manual_seed(cfg.seed)
        self.agent = ActorCritic(obs_dim, act_dim, list(cfg.hidden_sizes)).to(device)
        self.optimizer = optim.Adam(self.agent.parameters(), lr=cfg.lr, eps=1e-5)
        self.obs_rms, self.ret_rms = RunningMeanStd((obs_dim,)), RunningMeanStd(())
        self.return_carry: dict[int, np.ndarray] = {}

    def prepare(self, chunks: list[Chunk]) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        keys = ("obs", "actions", "logprobs", "advantages", "returns", "values")
        parts: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        for chunk in chunks:
            a = chunk.arrays
            obs = self.obs_rms.normalize(a["obs"], cfg.obs_clip)
            next_obs = self.obs_rms.normalize(a["next_obs"], cfg.obs_clip)
            with torch.no_grad():
                values = self.agent.value(torch.from_numpy(obs).to(self.device)).cpu().numpy()
                next_values = self.agent.value(torch.from_numpy(next_obs).to(self.device)).cpu().numpy()
            done = a["terminated"] | a["truncated"]
            rewards = a["rewards"].astype(np.float64)
            carry = self.return_carry.get(chunk.actor, np.zeros(rewards.shape[1:]))
            discounted = np.empty_like(rewards)
            for t in range(len(rewards)):
                carry = carry * cfg.gamma + rewards[t]
                discounted[t] = carry
                carry = np.where(done[t], 0.0, carry)
            self.return_carry[chunk.actor] = carry
            self.ret_rms.update(discounted.reshape(-1))
            rewards = np.clip(rewards / np.sqrt(self.ret_rms.var + 1e-8), -cfg.reward_clip, cfg.reward_clip)
            advantages = np.zeros_like(values)
            lastgaelam = np.zeros(values.shape[1:], values.dtype)
            for t in reversed(range(len(rewards))):
                delta = rewards[t] + cfg.gamma * next_values[t] * (1.0 - a["terminated"][t]) - values[t]
                lastgaelam = delta + cfg.gamma * cfg.gae_lambda * (1.0 - done[t]) * lastgaelam
                advantages[t] = lastgaelam
            parts["obs"].append(obs.reshape(-1, obs.shape[-1]))
            parts["actions"].append(a["actions"].reshape(-1, a["actions"].shape[-1]))
            parts["logprobs"].append(a["logprobs"].reshape(-1))
            parts["advantages"].append(advantages.reshape(-1))
            parts["returns"].append((advantages + values).reshape(-1))
            parts["values"].append(values.reshape(-1))
        return {k: torch.from_numpy(np.concatenate(v).astype(np.float32)).to(self.device) for k, v in parts.items()}

    def update(self, chunks: list[Chunk]) -> dict[str, float]:
        cfg, agent = self.cfg, self.agent
        b = self.prepare(chunks)
        batch_size = len(b["obs"])
        b_inds = np.arange(batch_size)
        clipfracs = []
        for _epoch in range(cfg.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, cfg.minibatch_size):
                mb_inds = torch.from_numpy(b_inds[start : start + cfg.minibatch_size]).to(self.device)
                mean = agent.actor_mean(b["obs"][mb_inds])
                probs = Normal(mean, agent.actor_logstd.expand_as(mean).exp())
                newlogprob = probs.log_prob(b["actions"][mb_inds]).sum(1)
                entropy = probs.entropy().sum(1)
                newvalue = agent.value(b["obs"][mb_inds])
                logratio = newlogprob - b["logprobs"][mb_inds]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > cfg.clip_coef).float().mean().item()]
                mb_advantages = b["advantages"][mb_inds]
                mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()
                v_loss_unclipped = (newvalue - b["returns"][mb_inds]) ** 2
                v_clipped = b["values"][mb_inds] + torch.clamp(
                    newvalue - b["values"][mb_inds], -cfg.clip_coef, cfg.clip_coef
                )
                v_loss_clipped = (v_clipped - b["returns"][mb_inds]) ** 2
                v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                entropy_loss = entropy.mean()
                loss = pg_loss - cfg.ent_coef * entropy_loss + v_loss * cfg.vf_coef
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
        for chunk in chunks:
            self.obs_rms.update(chunk.arrays["obs"].reshape(-1, chunk.arrays["obs"].shape[-1]))
        return {"policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "approx_kl": approx_kl.item()}


class Critic(nn.Module):
    """CleanRL's QNetwork: Q(s, a) from the concatenated observation and action, one module per critic."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int]) -> None:
        super().__init__()
        self.net = relu_mlp([obs_dim + act_dim, *hidden_sizes, 1])

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, actions], -1)).squeeze(-1)


class CleanRLDDPG:
    """ddpg_continuous_action's update (td3_continuous_action's with twin critics and target smoothing),
    plus the |TD error| the replay needs as priorities."""

    def __init__(self, obs_dim: int, act_space: Any, cfg: DDPGConfig, device: torch.device) -> None:
        self.cfg, self.device = cfg, device
        torch.manual_seed(cfg.seed)
        act_dim, hidden = int(act_space.shape[0]), list(cfg.hidden_sizes)
        self.actor = DeterministicActor(obs_dim, act_space, hidden).to(device)
        self.qfs = [Critic(obs_dim, act_dim, hidden).to(device) for _ in range(2 if cfg.twin_critics else 1)]
        self.target_actor = copy.deepcopy(self.actor)
        self.qf_targets = [copy.deepcopy(qf) for qf in self.qfs]
        self.q_optimizer = optim.Adam([p for qf in self.qfs for p in qf.parameters()], lr=cfg.critic_lr)
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.global_step = 0

    def update(self, arrays: dict[str, np.ndarray]) -> tuple[float, np.ndarray]:
        cfg = self.cfg
        data = {k: torch.as_tensor(arrays[k], device=self.device) for k in arrays}
        with torch.no_grad():
            next_actions = self.target_actor(data["next_obs"])
            if cfg.target_policy_noise > 0:
                scale, bias = self.actor.action_scale, self.actor.action_bias
                clipped_noise = (torch.randn_like(next_actions) * cfg.target_policy_noise).clamp(
                    -cfg.target_noise_clip, cfg.target_noise_clip
                ) * scale
                next_actions = torch.max(torch.min(next_actions + clipped_noise, bias + scale), bias - scale)
            min_qf_next_target = self.qf_targets[0](data["next_obs"], next_actions)
            for qf_target in self.qf_targets[1:]:
                min_qf_next_target = torch.min(min_qf_next_target, qf_target(data["next_obs"], next_actions))
            next_q_value = data["rewards"] + data["discounts"] * min_qf_next_target
        qf_a_values = [qf(data["obs"], data["actions"]) for qf in self.qfs]
        qf_loss = cast(torch.Tensor, sum(F.mse_loss(q, next_q_value) for q in qf_a_values))
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()
        self.global_step += 1
        if self.global_step % cfg.policy_delay == 0:
            actor_loss = -self.qfs[0](data["obs"], self.actor(data["obs"])).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            pairs = [(self.actor, self.target_actor), *zip(self.qfs, self.qf_targets, strict=True)]
            for net, target in pairs:
                for param, target_param in zip(net.parameters(), target.parameters(), strict=True):
                    target_param.data.copy_(cfg.tau * param.data + (1 - cfg.tau) * target_param.data)
        return qf_loss.item(), (qf_a_values[0] - next_q_value).abs().detach().cpu().numpy()


class CleanRLSACActor(nn.Module):
    """sac_continuous_action's Actor: a Gaussian's mean and log-std (clamped as SB3 clamps it, as Surreal's)."""

    action_scale: torch.Tensor  # buffers, registered below
    action_bias: torch.Tensor

    def __init__(self, obs_dim: int, act_space: Any, cfg: SACConfig) -> None:
        super().__init__()
        act_dim = int(act_space.shape[0])
        self.net = relu_mlp([obs_dim, *cfg.hidden_sizes])
        self.fc_mean = nn.Linear(cfg.hidden_sizes[-1], act_dim)
        self.fc_logstd = nn.Linear(cfg.hidden_sizes[-1], act_dim)
        self.log_std_min, self.log_std_max = cfg.log_std_min, cfg.log_std_max
        high, low = (torch.as_tensor(b, dtype=torch.float32) for b in (act_space.high, act_space.low))
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def get_action(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.net(obs))
        mean, log_std = self.fc_mean(x), self.fc_logstd(x).clamp(self.log_std_min, self.log_std_max)
        normal = Normal(mean, log_std.exp())
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        log_prob = (normal.log_prob(x_t) - torch.log(1 - y_t.pow(2) + 1e-6)).sum(-1)
        return y_t * self.action_scale + self.action_bias, log_prob


class CleanRLSAC:
    """sac_continuous_action's update with Surreal's SAC defaults: critics, then actor and temperature, then the
    soft target update, every step; plus the |TD error| the replay needs as priorities."""

    def __init__(self, obs_dim: int, act_space: Any, cfg: SACConfig, device: torch.device) -> None:
        self.cfg, self.device = cfg, device
        torch.manual_seed(cfg.seed)
        act_dim, hidden = int(act_space.shape[0]), list(cfg.critic_hidden_sizes)
        self.actor = CleanRLSACActor(obs_dim, act_space, cfg).to(device)
        self.qfs = [Critic(obs_dim, act_dim, hidden).to(device) for _ in range(2)]
        self.qf_targets = [copy.deepcopy(qf) for qf in self.qfs]
        self.q_optimizer = optim.Adam([p for qf in self.qfs for p in qf.parameters()], lr=cfg.critic_lr)
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.target_entropy = -float(act_dim)
        self.log_alpha = torch.zeros(1, requires_grad=True, device=device)
        self.a_optimizer = optim.Adam([self.log_alpha], lr=cfg.alpha_lr)

    def update(self, arrays: dict[str, np.ndarray]) -> tuple[float, np.ndarray]:
        data = {k: torch.as_tensor(arrays[k], device=self.device) for k in arrays}
        alpha = self.log_alpha.exp().item()
        with torch.no_grad():
            next_actions, next_log_pi = self.actor.get_action(data["next_obs"])
            min_target = torch.min(*(qf(data["next_obs"], next_actions) for qf in self.qf_targets))
            next_q_value = data["rewards"] + data["discounts"] * (min_target - alpha * next_log_pi)
        qf_a_values = [qf(data["obs"], data["actions"]) for qf in self.qfs]
        qf_loss = cast(torch.Tensor, sum(F.mse_loss(q, next_q_value) for q in qf_a_values))
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()
        pi, log_pi = self.actor.get_action(data["obs"])
        min_q_pi = torch.min(*(qf(data["obs"], pi) for qf in self.qfs))
        actor_loss = (alpha * log_pi - min_q_pi).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()
        with torch.no_grad():
            _, log_pi = self.actor.get_action(data["obs"])
        alpha_loss = (-self.log_alpha.exp() * (log_pi + self.target_entropy)).mean()
        self.a_optimizer.zero_grad()
        alpha_loss.backward()
        self.a_optimizer.step()
        for qf, target in zip(self.qfs, self.qf_targets, strict=True):
            for param, target_param in zip(qf.parameters(), target.parameters(), strict=True):
                target_param.data.copy_(self.cfg.tau * param.data + (1 - self.cfg.tau) * target_param.data)
        return qf_loss.item(), (qf_a_values[0] - next_q_value).abs().detach().cpu().numpy()


# -- timing -----------------------------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    update: Callable[[], object]
    per_call: int = 1  # updates one call makes (off-policy: the minibatches of one sample)
    first_update_s: float = 0.0
    round_s: list[float] = field(default_factory=list)  # seconds per update, one entry per round

    @property
    def update_s(self) -> float:
        return statistics.median(self.round_s)


def measure(variants: list[Variant], updates: int, seconds: float, sync: Callable[[], None]) -> None:
    """First update (timed alone), a warm-up, then alternating rounds until `updates` or `seconds` run out."""
    for v in variants:
        started = time.perf_counter()
        v.update()
        sync()
        v.first_update_s = time.perf_counter() - started
        v.update()
        sync()
    per_round = max(1, updates // 10)
    deadline = time.perf_counter() + seconds
    done = 0
    while done < updates and (done == 0 or time.perf_counter() < deadline):
        for v in variants:
            calls = max(1, per_round // v.per_call)
            started = time.perf_counter()
            for _ in range(calls):
                v.update()
            sync()
            v.round_s.append((time.perf_counter() - started) / (calls * v.per_call))
        done += per_round


def ddpg_step_flops(cfg: DDPGConfig, obs_dim: int, act_dim: int) -> float:
    """Matmul FLOPs of one DDPG/TD3 gradient step as DDPGLearner computes it: the target (actor and every
    target critic forward), the critics' forward and backward, and every `policy_delay`-th step the actor's
    forward and backward through the first critic (its input gradients only, not its weights)."""
    hidden = list(cfg.hidden_sizes)
    actor = list(zip([obs_dim, *hidden], [*hidden, act_dim], strict=True))
    critic = list(zip([obs_dim + act_dim, *hidden], [*hidden, 1], strict=True))
    mac = lambda layers: sum(n_in * n_out for n_in, n_out in layers)
    input_grads = lambda layers: mac(layers) - layers[0][0] * layers[0][1]  # none for the data itself
    critics = 2 if cfg.twin_critics else 1
    target = mac(actor) + critics * mac(critic)
    critic_step = critics * (mac(critic) + mac(critic) + input_grads(critic))
    actor_step = mac(actor) + mac(critic) + mac(critic) + mac(actor) + input_grads(actor)
    return 2.0 * cfg.batch_size * (target + critic_step + actor_step / cfg.policy_delay)


def gemm_flops_per_s(device: torch.device, size: int, sync: Callable[[], None], seconds: float = 1.0) -> float:
    """What this device sustains on the update's typical matmul, [size, size] @ [size, size] in float32."""
    a, b = (torch.randn(size, size, device=device) for _ in range(2))
    count = 0
    sync()
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(20):
            torch.mm(a, b)
        sync()
        count += 20
    return 2.0 * size**3 * count / (time.perf_counter() - started)


def report(variants: list[Variant], samples: int, steps: float) -> dict[str, Any]:
    """Rates per variant; `ratio` of each learner variant against the reference (the last one)."""
    reference = variants[-1]
    out: dict[str, Any] = {}
    for v in variants:
        out[v.name] = {
            "updates_per_s": round(1.0 / v.update_s, 3),
            "samples_per_s": round(samples / v.update_s, 1),
            "ms_per_step": round(1e3 * v.update_s / steps, 4),
            "first_update_s": round(v.first_update_s, 3),
            "warmup_extra_s": round(max(0.0, v.first_update_s - v.update_s), 3),  # compile / capture time
            "rounds": len(v.round_s),
        }
        if v is not reference:
            out[f"ratio_{v.name}"] = round(reference.update_s / v.update_s, 3)
    return out


class RepeatingBatches:
    """A `BatchesIn` that hands the learner core the same experience on every request: PPO's chunks restamped
    with the core's current version (so the staleness bound keeps them), or DDPG's transition batches in turn."""

    shards = 1

    def __init__(self, chunks: list[Chunk], transitions: list[dict[str, np.ndarray]], core: Callable[[], Any]) -> None:
        self.chunks, self.transitions, self.core = chunks, transitions, core
        self.turn = 0

    def next(self, batch_size: int, timeout_s: float) -> SampleReply:
        del batch_size, timeout_s
        self.turn += 1
        version = self.core().counters.version
        if self.transitions:  # a sample's worth of env steps per reply: the replay ratio allows a step per minibatch
            batch = self.transitions[self.turn % len(self.transitions)]
            return TransitionReply(ShardReport(0, self.turn * len(batch["rewards"])), batch)
        env_steps = self.turn * sum(c.env_steps for c in self.chunks)
        return FifoReply(ShardReport(0, env_steps), [replace(c, version=version) for c in self.chunks])

    def send_priorities(self, shard: int, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        del shard, slots, ids, priorities

    def drain(self, timeout_s: float) -> list[SampleReply]:
        del timeout_s
        return []


def one_update(core: LearnerCore) -> None:
    """Step the core until it has updated (it takes a reply, then updates: once, or off-policy once per
    minibatch of the sample)."""
    before = core.counters.updates
    while core.counters.updates == before:
        core.step(0.0)


def learner_core(
    algo: str, overrides: list[str], chunks: list[Chunk], transitions: list[dict[str, np.ndarray]], run_dir: Path
) -> LearnerCore:
    """The learner role's core on in-process ports: what a learner process does per update, minus sockets
    (staleness bound, the algorithm's update, publishing the blob, metrics rows and checkpoints)."""
    cfg = load_config([f"algo={algo}", f"env={ENV_ID}", "steps=1000000000000", "seed=1", *overrides], tasks=False)
    holder: list[LearnerCore] = []
    batches = RepeatingBatches(chunks, transitions, lambda: holder[0])
    log = logging.getLogger("bench.learner")
    holder.append(LearnerCore(cfg, run_dir, batches, InProcessParams(), RoleMetrics("learner", 0), False, log))
    return holder[0]


def ppo_row(cfg: PPOConfig, device: torch.device, args: argparse.Namespace, sync: Callable[[], None]) -> dict:
    module = get_algorithm("ppo")
    obs_space, act_space, chunks = collect_chunks("ppo", cfg, cfg.batch_size // CHUNK_STEPS)
    learner = cast(OnPolicyLearner, module.make_learner(obs_space, act_space, cfg, device))
    variants = [Variant("current", lambda: learner.update(chunks, 0.5))]
    if args.compile:
        compiled = cast(OnPolicyLearner, module.make_learner(obs_space, act_space, cfg, device, compile=True))
        variants.append(Variant("current_compiled", lambda: compiled.update(chunks, 0.5)))
    overrides = [
        f"device={device}",
        f"learner.compile={args.compile}",
        f"algo.batch_size={cfg.batch_size}",
        f"algo.minibatch_size={cfg.minibatch_size}",
        f"algo.update_epochs={cfg.update_epochs}",
    ]
    core = learner_core("ppo", overrides, chunks, [], args.run_dir / f"ppo-{cfg.minibatch_size}")
    variants.append(Variant("core", lambda: one_update(core)))
    reference = CleanRLPPO(obs_space.shape[0], act_space.shape[0], cfg, device)
    variants.append(Variant("reference", lambda: reference.update(chunks)))
    measure(variants, args.updates or (4 if args.quick else 20), args.seconds, sync)
    steps = cfg.update_epochs * (cfg.batch_size // cfg.minibatch_size)
    return {
        "algo": "ppo",
        "batch_size": cfg.batch_size,
        "minibatch_size": cfg.minibatch_size,
        "update_epochs": cfg.update_epochs,
        "hidden_sizes": list(cfg.hidden_sizes),
        **report(variants, cfg.batch_size, steps),
    }


def offpolicy_row(algo: str, device: torch.device, args: argparse.Namespace, sync: Callable[[], None]) -> dict:
    """DDPG, TD3, SAC or CrossQ: the learner, the learner core and CleanRL's update on the same samples (module
    docstring)."""
    cfg, switches = offpolicy_config(algo)
    module_name = algo_module(algo)
    k = LearnerConfig().minibatches_per_sample  # what the learner asks a shard for: k minibatches per sample
    module = get_algorithm(module_name)
    obs_space, act_space, chunks = collect_chunks(module_name, cfg, 8)
    samples = transition_batches(chunks, k * cfg.batch_size, 16, cfg.seed)
    turn = iter(range(1 << 62))
    sample = lambda: samples[next(turn) % len(samples)]
    learner = cast(OffPolicyLearner, module.make_learner(obs_space, act_space, cfg, device))
    variants = [Variant("current", lambda: learner.update(sample(), k), per_call=k)]
    if args.compile:
        compiled = cast(OffPolicyLearner, module.make_learner(obs_space, act_space, cfg, device, compile=True))
        variants.append(Variant("current_compiled", lambda: compiled.update(sample(), k), per_call=k))
    overrides = [
        f"device={device}",
        # The core runs DDPG as it runs fastest: compiled on CUDA (graphs), eagerly on a CPU, where compiling
        # the matmul-bound step gains nothing (current_compiled shows it).
        f"learner.compile={args.compile and device.type == 'cuda'}",
        f"learner.minibatches_per_sample={k}",
        "algo.learning_starts=0",
        f"algo.replay_ratio={1 / cfg.batch_size}",
        *switches,
    ]
    core = learner_core(module_name, overrides, [], samples, args.run_dir / algo)
    variants.append(Variant("core", lambda: one_update(core), per_call=k))
    reference: CleanRLDDPG | CleanRLSAC = (
        CleanRLSAC(obs_space.shape[0], act_space, cfg, device)
        if isinstance(cfg, SACConfig)
        else CleanRLDDPG(obs_space.shape[0], act_space, cfg, device)
    )
    minibatch = lambda: {key: v[: cfg.batch_size] for key, v in sample().items()}
    variants.append(Variant("reference", lambda: reference.update(minibatch())))
    measure(variants, args.updates or (50 if args.quick else 300), args.seconds, sync)
    row: dict[str, Any] = {
        "algo": algo,
        "batch_size": cfg.batch_size,
        "minibatches_per_sample": k,
        "hidden_sizes": list(cfg.hidden_sizes),
    }
    if isinstance(cfg, SACConfig):  # a critic step each time, an actor and a temperature step every policy_delay
        return {**row, "critic_hidden_sizes": list(cfg.critic_hidden_sizes), **report(variants, cfg.batch_size, 1.0)}
    # The floor no update code can go below: its matmuls at the device's own matmul rate.
    floor_s = ddpg_step_flops(cfg, obs_space.shape[0], act_space.shape[0]) / gemm_flops_per_s(
        device, cfg.batch_size, sync
    )
    return {
        **row,
        "matmul_floor_ms_per_update": round(1e3 * floor_s, 4),
        "matmul_share_current": round(floor_s / variants[0].update_s, 3),
        **report(variants, cfg.batch_size, 1.0 + 1.0 / cfg.policy_delay),  # critic step + every 2nd actor step
    }


def machine_tag(device: torch.device) -> str:
    cores = f"{os.cpu_count()}core"
    if device.type != "cuda":
        return cores
    gpu = torch.cuda.get_device_name(device).lower().replace("nvidia", "").split()
    return f"{gpu[0] if gpu else 'gpu'}-{cores}"


def device_auto(compile_: bool) -> dict[str, Any]:
    """What `device=auto` picks here, measured as the learner role measures it (`surreal.roles.device`): one
    update of a throwaway learner on each device, the faster wins. The CPU's time is measured also without CUDA,
    so the row always says what a CPU update costs."""
    from surreal.roles.device import choose_device, update_seconds

    log = logging.getLogger("bench.learner")
    out: dict[str, Any] = {"cuda_available": torch.cuda.is_available()}
    runs = {
        "ppo": ["algo=ppo", "topology.envs_per_actor=4"],  # make run's settings
        "ddpg": ["algo=ddpg"],
    }
    for name, overrides in runs.items():
        cfg = load_config([f"env={ENV_ID}", "seed=1", f"learner.compile={compile_}", *overrides], tasks=False)
        seconds = {"cpu": update_seconds(cfg, torch.device("cpu"))}

        def timed(device: torch.device, cfg: Any = cfg, seconds: dict[str, float] = seconds) -> float:
            if device.type not in seconds:
                seconds[device.type] = update_seconds(cfg, device)
            return seconds[device.type]

        chosen = choose_device(cfg, timed, log)
        out[name] = {"chosen": chosen.type, "update_s": {k: round(v, 5) for k, v in seconds.items()}}
    return out


def main() -> None:
    if "--replicas" in sys.argv[1:]:  # the data-parallel learner: bench/learner_group.py
        from bench.learner_group import main as group_main

        group_main(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--algo", nargs="+", default=["ppo", "ddpg", "td3", "sac"], choices=["ppo", "ddpg", "td3", "sac", "crossq"]
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--updates", type=int, help="timed updates per variant (default: ppo 20, ddpg 300)")
    parser.add_argument("--seconds", type=float, default=60.0, help="stop adding rounds after this, per row")
    parser.add_argument("--compile", action="store_true", help="also measure the learner with compile=True")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the learner role's default: 1)")
    parser.add_argument("--quick", action="store_true", help="fewer updates, CleanRL's PPO setting only")
    parser.add_argument("--save", action="store_true", help="write bench/results/learner.<machine>.json")
    parser.add_argument("--out", type=Path, help="write the JSON object to this file")
    parser.add_argument("--device-auto", action="store_true", help="also measure what device=auto picks here")
    args = parser.parse_args()
    temporary = tempfile.TemporaryDirectory(prefix="bench-learner-")  # the cores' run folders
    args.run_dir = Path(temporary.name)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    rows = []
    for algo in args.algo:
        if algo == "ppo":
            rows_large = [False] if args.quick else [False, True]  # --quick: CleanRL's setting only
            new_rows = [ppo_row(ppo_config(large), device, args, sync) for large in rows_large]
        else:
            new_rows = [offpolicy_row(algo, device, args, sync)]
        for row in new_rows:
            print(json.dumps(row), flush=True)
        rows += new_rows
    result = {"benchmark": "learner", "env": ENV_ID, "quick": args.quick, "machine": machine(device), "rows": rows}
    if args.device_auto:
        result["device_auto"] = device_auto(args.compile)
    emit(result, args.out, RESULTS / f"learner.{machine_tag(device)}.json" if args.save else None)


if __name__ == "__main__":
    main()
