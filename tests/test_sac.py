"""SAC's update against a plain reference loop written here (SAC, layer norm, CrossQ's switches), its policy,
checkpoints, skipped steps, config rules, and (slow) that it learns Pendulum-v1 in serial mode."""

from __future__ import annotations

import io
import math
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from surreal.algos import get_algorithm, sac
from surreal.algos.sample_steps import STEP_KEYS
from surreal.config import ConfigError, algo_config, load_config
from surreal.run.serial import run_serial

SMALL = ["algo.hidden_sizes=[32,32]", "algo.critic_hidden_sizes=[48,48]"]


@pytest.fixture
def pendulum():
    env = gym.make("Pendulum-v1")
    yield env.observation_space, env.action_space
    env.close()


def batch(n: int, rewards: float, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.standard_normal((n, 3)).astype(np.float32),
        "actions": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
        "rewards": rng.normal(rewards, 1.0, n).astype(np.float32),
        "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
        "discounts": np.where(rng.random(n) < 0.1, 0.0, 0.99).astype(np.float32),
        "slots": np.arange(n),
        "ids": np.arange(n, dtype=np.uint64),
        "weights": np.ones(n, np.float32),
    }


# -- the reference: SAC as a textbook loop over ordinary modules ------------------------------------------


class RefBatchRenorm(nn.Module):
    """Batch renormalization (Ioffe 2017, Algorithm 1) of [B, F], with a warm-up of plain batch norm."""

    def __init__(self, features: int, momentum: float, warmup: int, r_max: float, d_max: float) -> None:
        super().__init__()
        self.gamma, self.beta = nn.Parameter(torch.ones(features)), nn.Parameter(torch.zeros(features))
        self.mu, self.sigma2 = torch.zeros(features), torch.ones(features)
        self.momentum, self.warmup, self.r_max, self.d_max, self.seen = momentum, warmup, r_max, d_max, 0

    def forward(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        eps = 1e-3
        if not train:
            return self.gamma * (x - self.mu) / torch.sqrt(self.sigma2 + eps) + self.beta
        mu_b, var_b = x.mean(0), x.var(0, unbiased=False)
        sigma_b = torch.sqrt(var_b + eps)
        sigma = torch.sqrt(self.sigma2 + eps)
        r, d = torch.ones_like(mu_b), torch.zeros_like(mu_b)
        if self.seen >= self.warmup:
            r = (sigma_b.detach() / sigma).clamp(1 / self.r_max, self.r_max)
            d = ((mu_b.detach() - self.mu) / sigma).clamp(-self.d_max, self.d_max)
        self.mu = self.mu + (1 - self.momentum) * (mu_b.detach() - self.mu)
        self.sigma2 = self.sigma2 + (1 - self.momentum) * (var_b.detach() - self.sigma2)
        self.seen += 1
        return self.gamma * ((x - mu_b) / sigma_b * r + d) + self.beta


class RefMLP(nn.Module):
    """One member of a learner's `StackedMLP`, as nn.Linear layers with its weights copied."""

    def __init__(self, stacked: sac.StackedMLP, member: int, cfg) -> None:
        super().__init__()
        self.norm = stacked.norm
        self.linears = nn.ModuleList()
        for weight, bias in zip(stacked.weights, stacked.biases, strict=True):
            layer = nn.Linear(*weight.shape[1:])
            layer.weight.data.copy_(weight[member].T)
            layer.bias.data.copy_(bias[member, 0])
            self.linears.append(layer)
        hidden = [layer.out_features for layer in self.linears[:-1]]
        if self.norm == "layer":
            self.norms = nn.ModuleList(nn.LayerNorm(h) for h in hidden)
        elif self.norm == "batch_renorm":
            renorm = (cfg.renorm_momentum, cfg.renorm_warmup, cfg.renorm_r_max, cfg.renorm_d_max)
            self.input_norm = RefBatchRenorm(self.linears[0].in_features, *renorm)
            self.norms = nn.ModuleList(RefBatchRenorm(h, *renorm) for h in hidden)

    def forward(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        if self.norm == "batch_renorm":
            x = self.input_norm(x, train)
        for i, layer in enumerate(self.linears):
            x = layer(x)
            if i < len(self.linears) - 1:
                if self.norm == "layer":
                    x = self.norms[i](x)
                x = torch.relu(x)
                if self.norm == "batch_renorm":
                    x = self.norms[i](x, train)
        return x


class ReferenceSAC:
    """Stable-Baselines3's SAC train step, written plainly: separate critics, torch.distributions, for-loop
    Adam, target critics updated by a polyak loop; CrossQ's switches as the paper describes them."""

    def __init__(self, learner: sac.SACLearner, cfg) -> None:
        self.cfg = cfg
        self.actor = RefMLP(learner.actor.net, 0, cfg)
        self.scale, self.bias = learner.actor.action_scale, learner.actor.action_bias
        self.q = [RefMLP(learner.critics, i, cfg) for i in range(2)]
        self.q_target = [RefMLP(learner.critics, i, cfg) for i in range(2)] if cfg.target_network else None
        self.log_alpha = torch.tensor(math.log(cfg.alpha_init), requires_grad=True)
        betas = (cfg.adam_beta1, 0.999)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr, betas=betas, foreach=False)
        critic_params = [p for q in self.q for p in q.parameters()]
        self.critic_opt = torch.optim.Adam(critic_params, lr=cfg.critic_lr, betas=betas, foreach=False)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr, betas=betas, foreach=False)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.target_entropy = -1.0  # Pendulum: one action dimension
        self.updates = 0

    def pi(self, obs: torch.Tensor, noise: torch.Tensor, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.actor(obs, train).chunk(2, -1)
        std = log_std.clamp(self.cfg.log_std_min, self.cfg.log_std_max).exp()
        u = mean + std * noise
        log_prob = torch.distributions.Normal(mean, std).log_prob(u) - torch.log(1 - torch.tanh(u) ** 2 + 1e-6)
        return torch.tanh(u) * self.scale + self.bias, log_prob.sum(-1)

    def update(self, data: dict[str, np.ndarray], steps: int) -> list[dict[str, float]]:
        cfg = self.cfg
        noise = torch.randn((steps, 2, len(data["rewards"]) // steps, 1), generator=self.generator)
        out = []
        for i, mb in enumerate(np.array_split(np.arange(len(data["rewards"])), steps)):
            self.updates += 1
            obs, act, rew, nxt, disc = (torch.as_tensor(data[k][mb]) for k in STEP_KEYS[:5])
            alpha = self.log_alpha.exp().detach()
            with torch.no_grad():
                next_act, next_log_prob = self.pi(nxt, noise[i, 0], train=False)
            if cfg.joint_forward:
                both = [q(torch.cat([torch.cat([obs, act], 1), torch.cat([nxt, next_act], 1)]), True) for q in self.q]
                q_now = [x[: len(obs), 0] for x in both]
                q_next = [x[len(obs) :, 0].detach() for x in both]
            else:
                q_now = [q(torch.cat([obs, act], 1), True)[:, 0] for q in self.q]
                with torch.no_grad():
                    q_next = [q(torch.cat([nxt, next_act], 1), False)[:, 0] for q in (self.q_target or self.q)]
            target = rew + disc * (torch.min(*q_next) - alpha * next_log_prob)
            critic_loss = 0.5 * sum(nn.functional.mse_loss(q, target) for q in q_now)
            self.critic_opt.zero_grad()
            critic_loss.backward()
            self.critic_opt.step()
            row = {"critic_loss": critic_loss.item(), "q_mean": q_now[0].mean().item(), "alpha": alpha.item()}
            if self.updates % cfg.policy_delay == 0:
                actions, log_prob = self.pi(obs, noise[i, 1], train=True)
                alpha_loss = -(self.log_alpha * (log_prob + self.target_entropy).detach()).mean()
                self.alpha_opt.zero_grad()
                alpha_loss.backward()
                self.alpha_opt.step()
                q_pi = torch.min(*[q(torch.cat([obs, actions], 1), False)[:, 0] for q in self.q])
                actor_loss = (alpha * log_prob - q_pi).mean()
                self.actor_opt.zero_grad()
                actor_loss.backward()
                self.actor_opt.step()
                row.update(actor_loss=actor_loss.item(), alpha_loss=alpha_loss.item(), entropy=-log_prob.mean().item())
            if self.q_target is not None and self.updates % cfg.target_update_period == 0:
                with torch.no_grad():
                    for q, q_target in zip(self.q, self.q_target, strict=True):
                        for p, p_target in zip(q.parameters(), q_target.parameters(), strict=True):
                            p_target.mul_(1 - cfg.tau).add_(cfg.tau * p)
            out.append(row)
        return out


VARIANTS = {
    "sac": ["algo.policy_delay=2"],
    "sac-layer-norm": ["algo.actor_norm=layer", "algo.critic_norm=layer", "algo.target_update_period=2"],
    "crossq": ["preset=crossq", "algo.renorm_warmup=5"],  # the renormalization starts within the run
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_update_matches_a_plain_reference_loop(pendulum, variant):
    """Twelve steps in three samples of four minibatches: every step's statistics and, at the end, every
    weight of actor and critics and the temperature agree with the textbook loop fed the same noise."""
    cfg = algo_config(load_config(["algo=sac", *SMALL, *VARIANTS[variant], "seed=4"]))
    learner = sac.make_learner(*pendulum, cfg, torch.device("cpu"))
    reference = ReferenceSAC(learner, cfg)
    for call in range(3):
        data = batch(128, rewards=1.0, seed=call)
        stats, priorities = learner.update(data, 4)
        expected = reference.update(data, 4)
        assert priorities.shape == (128,) and np.isfinite(priorities).all()
        for got, want in zip(stats, expected, strict=True):
            for key, value in want.items():
                assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-5), (variant, key)
    assert any("actor_loss" in row for row in expected), "the actor stepped"
    torch.testing.assert_close(learner.log_alpha.detach(), reference.log_alpha.detach(), rtol=0, atol=1e-5)
    for stacked, ref in [(learner.actor.net, [reference.actor]), (learner.critics, reference.q)]:
        for member, mlp in enumerate(ref):
            for layer, (weight, bias) in enumerate(zip(stacked.weights, stacked.biases, strict=True)):
                torch.testing.assert_close(weight[member].T, mlp.linears[layer].weight, rtol=0, atol=1e-5)
                torch.testing.assert_close(bias[member, 0], mlp.linears[layer].bias, rtol=0, atol=1e-5)
    if cfg.critic_norm == "batch_renorm":  # the running statistics followed the same batches
        first = learner.critics.norms[0]
        torch.testing.assert_close(first.running_mean[0, 0], reference.q[0].input_norm.mu, rtol=0, atol=1e-5)
        assert int(first.steps) == reference.q[0].input_norm.seen == 12
    if reference.q_target is not None:
        target_first = reference.q_target[1].linears[0].weight
        torch.testing.assert_close(learner.critics_target.weights[0][1].T, target_first, rtol=0, atol=1e-5)


def test_policy_explores_uniformly_until_the_first_update_then_samples_pi(pendulum):
    cfg = algo_config(load_config(["algo=sac", *SMALL]))
    policy = sac.make_policy(*pendulum, cfg, actor_index=0, num_actors=1)
    learner = sac.make_learner(*pendulum, cfg, torch.device("cpu"))
    policy.load_params(learner.params())
    obs = np.zeros((500, 3), np.float32)
    warm, _ = policy.act(obs)
    assert warm.min() < -1.5 and warm.max() > 1.5  # uniform over [-2, 2]
    learner.update(batch(64, rewards=1.0))
    policy.load_params(learner.params())
    acted, record = policy.act(obs)
    mean = policy.act_deterministic(obs)
    assert np.array_equal(record["actions"], acted) and np.all(np.abs(acted) <= 2.0)
    assert np.all(mean == mean[0]) and 0.3 < acted.std() < 2.0  # one state: one mean, spread by pi's std


def test_checkpoint_round_trip_continues_identically(pendulum):
    """CrossQ's state included: batch renormalization's running statistics and no target network."""
    cfg = algo_config(load_config(["preset=crossq", *SMALL, "algo.renorm_warmup=2", "algo.policy_delay=2"]))
    a = sac.make_learner(*pendulum, cfg, torch.device("cpu"))
    for seed in range(3):
        a.update(batch(64, rewards=1.0, seed=seed), 2)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = sac.make_learner(*pendulum, cfg, torch.device("cpu"))
    b.load_state_dict(torch.load(buffer, weights_only=True))
    data = batch(64, rewards=2.0, seed=9)
    stats_a, prio_a = a.update(data, 2)
    stats_b, prio_b = b.update(data, 2)
    assert stats_a == stats_b and np.array_equal(prio_a, prio_b)
    for key, value in a.params()["actor"].items():
        np.testing.assert_array_equal(value, b.params()["actor"][key])


def everything(learner: sac.SACLearner) -> list[torch.Tensor]:
    """What the optimizers may change: weights, the temperature, and their moments and step counts."""
    moments = [v for opt in learner.optimizers().values() for state in opt.state.values() for v in state.values()]
    nets = [*learner.actor.parameters(), *learner.critics.parameters(), learner.log_alpha]
    return [*nets, *learner.critics_target.parameters(), *moments]


def test_a_non_finite_step_is_skipped_in_the_optimizer_and_the_next_one_learns(pendulum):
    cfg = algo_config(load_config(["algo=sac", *SMALL]))
    learner = sac.make_learner(*pendulum, cfg, torch.device("cpu"))
    learner.update(batch(32, rewards=1.0))  # optimizer state exists from here on
    before = [t.clone() for t in everything(learner)]
    poisoned = {**batch(32, rewards=1.0), "rewards": np.full(32, np.inf, np.float32)}
    [stats], priorities = learner.update(poisoned)
    assert stats["nonfinite_skipped"] == 1.0 and np.isnan(stats["critic_loss"]) and np.isnan(priorities).all()
    for now, then in zip(everything(learner), before, strict=True):
        torch.testing.assert_close(now, then, rtol=0, atol=0)
    mixed = {k: np.concatenate([poisoned[k], v]) for k, v in batch(32, rewards=1.0).items()}
    stats, priorities = learner.update(mixed, 2)
    assert [s["nonfinite_skipped"] for s in stats] == [1.0, 0.0]
    assert np.isnan(priorities[:32]).all() and np.isfinite(priorities[32:]).all()
    assert any(not torch.equal(now, then) for now, then in zip(everything(learner), before, strict=True))


def test_config_rules_and_registry():
    assert get_algorithm("sac") is sac
    assert load_config(["algo=sac"]).replay.mode == "uniform"
    with pytest.raises(ConfigError) as bad:
        load_config(
            ["algo=sac", "algo.joint_forward=true", "algo.critic_norm=batch", "algo.tau=0", "algo.n_step=0"]
            + ["algo.replay_ratio=0", "algo.renorm_momentum=1", "replay.capacity=100"]
        )
    for named in (
        "set algo.target_network=false",
        "algo.critic_norm must be one of",
        "algo.tau",
        "algo.n_step",
        "algo.replay_ratio must be > 0",
        "algo.renorm_momentum must be in [0, 1)",
        "replay.capacity (100) must hold one batch",
    ):
        assert named in str(bad.value)
    with pytest.raises(ConfigError, match="deterministic=true is for on-policy"):
        load_config(["algo=sac", "deterministic=true", "actors=1"])


@pytest.mark.slow
def test_compiled_update_matches_the_eager_one(pendulum):
    """torch.compile of the critic and actor losses (inductor; seconds on CPU) gives the eager numbers, step after
    step (SAC with layer norm; CrossQ's losses in the next test)."""
    cfg = algo_config(load_config(["algo=sac", *SMALL, "algo.critic_norm=layer", "algo.policy_delay=2"]))
    eager, compiled = (sac.make_learner(*pendulum, cfg, torch.device("cpu"), compile=c) for c in (False, True))
    for seed in range(3):
        data = batch(128, rewards=1.0, seed=seed)
        stats_eager, prio_eager = eager.update(data, 4)
        stats_compiled, prio_compiled = compiled.update(data, 4)
        for got, want in zip(stats_compiled, stats_eager, strict=True):
            assert got == pytest.approx(want, rel=1e-5, abs=1e-5, nan_ok=True)  # NaN: no actor step yet
    assert compiled.compile, "the compiled step fell back to eager"
    np.testing.assert_allclose(prio_compiled, prio_eager, atol=1e-5)
    for a, b in zip(networks(eager), networks(compiled), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def networks(learner: sac.SACLearner) -> list[torch.Tensor]:
    return [*learner.actor.state_dict().values(), *learner.critics.state_dict().values(), learner.log_alpha]


@pytest.mark.slow
def test_compiled_crossq_losses_match_the_eager_ones(pendulum):
    """CrossQ's compiled losses give the eager losses, gradients and running statistics (r and d active from the
    first pass: the case where a compiled backward that recomputed them from statistics updated in place got other
    gradients). Compared per step, not over a run: a unit whose ReLU is dead for the whole batch has a zero
    gradient eagerly and about 1e-12 compiled, which Adam's first step turns into a move of +-lr."""
    cfg = algo_config(load_config(["preset=crossq", *SMALL, "algo.renorm_warmup=0"]))
    eager, compiled = (sac.make_learner(*pendulum, cfg, torch.device("cpu"), compile=c) for c in (False, True))
    tensors = eager.sample_tensors(batch(64, rewards=1.0), 1)
    step = {k: v[0] for k, v in tensors.items()}
    outputs = []
    for learner in (eager, compiled):
        loss, q_first, target = learner.critic_loss_fn(**step)
        actor_loss, alpha_loss, log_prob = learner.actor_loss_fn(step["obs"], step["noise"])
        (loss + actor_loss + alpha_loss).backward()
        learner.critics.commit()
        learner.actor.net.commit()
        grads = [p.grad for p in [*learner.critics.parameters(), *learner.actor.parameters(), learner.log_alpha]]
        outputs.append([loss, q_first, target, actor_loss, alpha_loss, log_prob, *grads, *networks(learner)])
    for a, b in zip(*outputs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert int(compiled.critics.norms[0].steps) == 1 and int(compiled.actor.net.norms[0].steps) == 1


@pytest.mark.slow
def test_compiled_crossq_update_stays_compiled(pendulum):
    """The whole compiled CrossQ step, as the learner runs it: it must not fall back to eager (a running
    statistic moved between the loss and its backward did, on CPU and CUDA alike), and gives the eager step's
    numbers through the critic-only and the first actor step (policy_delay 3)."""
    cfg = algo_config(load_config(["preset=crossq", *SMALL, "algo.renorm_warmup=0"]))
    assert cfg.policy_delay == 3
    eager, compiled = (sac.make_learner(*pendulum, cfg, torch.device("cpu"), compile=c) for c in (False, True))
    for seed in range(3):
        data = batch(64, rewards=1.0, seed=seed)
        (stats_eager,), _ = eager.update(data, 1)
        (stats_compiled,), _ = compiled.update(data, 1)
        assert compiled.compile, "the compiled step fell back to eager"
        for key, want in stats_eager.items():
            assert stats_compiled[key] == pytest.approx(want, rel=1e-4, abs=1e-5, nan_ok=True), key
    assert not np.isnan(stats_compiled["actor_loss"]), "the third update steps the actor"
    assert int(compiled.critics.norms[0].steps) == 3 and int(compiled.actor.net.norms[0].steps) == 1


@pytest.mark.gpu
def test_cuda_graph_update_matches_the_eager_one(pendulum):
    """On CUDA, compile=True replays the critic-only and the actor step each as a captured graph."""
    cfg = algo_config(load_config(["algo=sac", *SMALL, "algo.critic_norm=layer", "algo.policy_delay=2"]))
    cuda = torch.device("cuda")
    eager, graphed = (sac.make_learner(*pendulum, cfg, cuda, compile=c) for c in (False, True))
    for seed in range(5):  # past the warm-up calls: both kinds of step captured and replayed
        data = batch(128, rewards=1.0, seed=seed)
        stats_eager, prio_eager = eager.update(data, 4)
        stats_graphed, prio_graphed = graphed.update(data, 4)
    assert graphed.compile and all(step.graph is not None for step in graphed.step_fns.values())
    for got, want in zip(stats_graphed, stats_eager, strict=True):
        assert got == pytest.approx(want, rel=1e-3, abs=1e-4, nan_ok=True)
    np.testing.assert_allclose(prio_graphed, prio_eager, atol=1e-4)


BUDGET = 12_000  # env steps: SAC reaches Pendulum's -200s in about 5-10k (SB3's zoo trains 20k)


@pytest.mark.slow
def test_serial_sac_learns_pendulum(tmp_path, claim):
    torch.set_num_threads(1)
    cfg = load_config(
        [
            "algo=sac",
            "env=Pendulum-v1",
            f"steps={BUDGET}",
            "actors=1",
            "algo.learning_starts=1000",
            "actor.chunk_steps=64",
            "device=cpu",
            "seed=1",
        ]
    )
    started = time.perf_counter()
    result = run_serial(cfg, tmp_path)
    print(f"serial SAC Pendulum-v1: {result} in {time.perf_counter() - started:.0f} s")
    assert result["env_steps"] >= BUDGET
    claim("eval_return_mean", result["eval_return_mean"], at_least=-250)
