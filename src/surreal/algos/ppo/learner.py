"""PPO's learner side (Schulman et al. 2017): CleanRL's clipped loss and the update, readable top to bottom.

Follows CleanRL's ppo_continuous_action and the implementation details catalogued by Huang et al. 2022 ("The 37
Implementation Details of PPO"): observation normalization, reward scaling by the running std of the discounted
return, GAE(lambda), per-minibatch advantage normalization, clipped surrogate, optional value clipping, entropy bonus,
global gradient clipping and linear learning-rate annealing. The model's mode (nets.py's feed-forward heads, or
recurrent.py's cell in front of them) says how a batch is valued and cut into entries; data parallelism is the
replica's hooks around the step (algos/replica.py): the update has one path.

What distribution changes: the experience comes from actors running slightly older parameters, so the ratio is taken
against the behavior log-probability each actor recorded, and the observation-normalizer statistics travel inside the
parameter blob so actors normalize exactly as the learner does. Sockets and loops live in the roles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from surreal.algos.capture import CapturedStep, CompiledSteps, load_optimizer_state
from surreal.algos.normalizer import RunningMeanStd
from surreal.algos.ppo.chunk_tensors import observations, stack, stack_per_env
from surreal.algos.ppo.config import PPOConfig
from surreal.algos.ppo.encoded import EncodedModel
from surreal.algos.ppo.nets import Batch
from surreal.algos.ppo.policy import Model, make_model
from surreal.algos.ppo.returns import discounted_returns, gae
from surreal.algos.replica import ALONE, Replica
from surreal.proto.wire import PER_ENV, Chunk
from surreal.spaces import is_channels_first

MINIBATCH_KEYS = ("obs", "actions", "logprobs", "advantages", "returns", "values")  # what the loss scores
STEP_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")  # what ppo_loss reports, in order


class PPOLearner(CompiledSteps):
    """The PPO update, with the speed belonging to the device: the batch is prepared in a few whole-batch
    tensor operations, the epoch loop never waits for the device, and every minibatch step has the same
    shapes, so `compile=True` can compile the loss (and, on CUDA, replay the whole step as a CUDA graph).
    `compile=False` runs the same step eagerly: the reference the compiled path is tested against.

    In a data-parallel group (`learner.replicas` > 1), every rank prepares the whole batch (normalization, values,
    reward scaling, GAE: a few whole-batch operations, so every rank's statistics are the same) and draws the same
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
        replica: Replica = ALONE,
    ) -> None:
        """`compile`: compile the minibatch loss and, on CUDA, replay the step as a CUDA graph (the first update
        then pays the compilation); off, the same step runs eagerly. `replica`: this learner's rank in a
        data-parallel group."""
        self.cfg = cfg
        self.device = device
        self.replica = replica
        torch.manual_seed(cfg.seed)
        self.model: Model = make_model(obs_space, act_space, cfg).to(device)  # checks the spaces
        # Images are never normalized (the encoder divides the uint8 by 255); on a GPU their convolutions run on
        # channels-last tensors (the weights converted here, each batch in the encoder), cuDNN's fastest layout.
        self.normalizes = cfg.obs_norm and not is_channels_first(obs_space)
        if isinstance(self.model, EncodedModel) and device.type == "cuda":
            self.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # a documented form
            self.model.encoder.channels_last = True
        self.autocast = torch.bfloat16 if cfg.autocast == "bf16" else None
        self.compile = compile
        # A captured graph reads the learning rate from a device tensor, so annealing needs no re-capture.
        capture = self.captures()
        lr = torch.tensor(cfg.lr, device=device) if capture else cfg.lr
        # fused: one kernel per step for all parameters (the update is hundreds of tiny steps, so per-tensor
        # overhead dominates, on CPU and GPU alike); fused Adam is also safe to capture in a CUDA graph.
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr, eps=1e-5, fused=True, capturable=capture)
        # A flat Box's statistics (they travel with the parameters); images have none.
        self.obs_rms = None if is_channels_first(obs_space) else RunningMeanStd(tuple(obs_space.shape or ()))
        self.ret_rms = RunningMeanStd(())
        self.return_carry: dict[int, torch.Tensor] = {}  # discounted return so far, per actor, per env
        self.generator = torch.Generator().manual_seed(cfg.seed)  # minibatch shuffles
        self.reset_steps()

    # -- data preparation ---------------------------------------------------------------------------

    def _normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """RunningMeanStd.normalize on the device, in float64 as the actors compute it, so both agree. Images stay
        uint8."""
        if obs.dtype == torch.uint8:
            return obs
        if not self.normalizes or self.obs_rms is None:
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
        rewards = stack(chunks, "rewards", self.device, torch.float64)
        if not cfg.reward_scale:
            return rewards.float()
        done = stack(chunks, "terminated", self.device) | stack(chunks, "truncated", self.device)
        returns, carry_survives = discounted_returns(rewards, done, cfg.gamma)

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
    def _prepare_group(self, chunks: list[Chunk]) -> Batch:
        """Chunks of one length T as one [T, K_total] batch: normalization, one value pass for s_t and s'_t,
        reward scaling and GAE each run once over the whole batch; then the update's entries, as the model's mode
        cuts them (transitions, or sequences with their start states)."""
        cfg = self.cfg
        obs = self._normalize(observations(chunks, self.device))  # [2, T, K_total, ...]: s_t and s'_t
        terminated, truncated = (stack(chunks, key, self.device) for key in ("terminated", "truncated"))
        done = terminated | truncated
        per_env = {key: stack_per_env(chunks, key, self.device) for key in chunks[0].arrays.get(PER_ENV, {})}
        values, next_values = self.model.values(obs, done, per_env)
        rewards = self._scale_rewards(*chunks)
        advantages = gae(rewards, values, next_values, terminated, truncated, cfg.gamma, cfg.gae_lambda)
        batch = {
            "obs": obs[0],
            "actions": stack(chunks, "actions", self.device, torch.float32),
            "logprobs": stack(chunks, "logprobs", self.device, torch.float32),
            "advantages": advantages,
            "returns": advantages + values,
            "values": values,
        }
        return self.model.entries(batch, done, per_env)

    def prepare(self, chunks: list[Chunk]) -> list[tuple[Batch, int]]:
        """The batch on the device, as the update's entries and how many of them make a minibatch. Chunks are grouped
        by length T (every actor uses the same chunk_steps, so normally there is one group), each prepared as one
        [T, K_total] batch."""
        groups: dict[int, list[Chunk]] = {}
        for chunk in chunks:
            groups.setdefault(len(chunk.arrays["rewards"]), []).append(chunk)
        return self.model.minibatches(
            [self._prepare_group(group) for group in groups.values()], self.cfg.minibatch_size
        )

    # -- the update ---------------------------------------------------------------------------------

    def ppo_loss(self, minibatch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """CleanRL's loss on one minibatch; also the STEP_STATS, detached, as one tensor (no host sync). A recurrent
        model's minibatch is N whole sequences, scored step by step once its cell is unrolled over them (CleanRL's
        ppo_atari_lstm)."""
        cfg = self.cfg
        # `algo.autocast`: the forward passes in bfloat16 where autocast lowers them (convolutions, linear layers);
        # what they give the loss is float32 again.
        with torch.autocast(self.device.type, dtype=self.autocast or torch.bfloat16, enabled=self.autocast is not None):
            head, b = self.model.per_step(minibatch)
            obs, actions, logprobs, advantages, returns, values = (b[k] for k in MINIBATCH_KEYS)
            newlogprob, entropy = head.log_prob_entropy(obs, actions)
            newvalue = head.value(obs)
        newlogprob, entropy, newvalue = newlogprob.float(), entropy.float(), newvalue.float()
        logratio = newlogprob - logprobs  # against the behavior policy the actor ran
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - logratio).mean()
            clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()

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

    def minibatch_step(self, minibatch: Batch) -> torch.Tensor:
        """Advantage normalization over the whole minibatch, this rank's share of it, then forward, loss, backward,
        the ranks' averaged gradients, gradient clipping and Adam: the unit that is captured (the loss is what is
        compiled). The optimizer stays outside torch.compile: the annealed learning rate would recompile it every
        update, and fused Adam is one kernel already."""
        if self.cfg.norm_adv:
            advantages = minibatch["advantages"]
            minibatch = {**minibatch, "advantages": (advantages - advantages.mean()) / (advantages.std() + 1e-8)}
        minibatch = self.replica.share_of(minibatch)
        self.optimizer.zero_grad()  # to None: inside a capture, backward then takes the grads from its pool
        loss, stats = self.loss_fn(minibatch)
        loss.backward()
        self.replica.average_gradients(self.model.parameters())  # a non-finite step shows in the update's end
        nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm, foreach=True)
        self.optimizer.step()
        return stats

    def reset_steps(self) -> None:
        """The loss and step functions: eager, or compiled (and CUDA-graph captured on CUDA, unless a rank's step
        holds an all-reduce: algos/replica.py). Called again after a restore: a captured graph holds the optimizer
        state it replaced."""
        self.loss_fn: Callable[[Batch], tuple[torch.Tensor, torch.Tensor]] = self.ppo_loss
        self.step_fn: Callable[[Batch], torch.Tensor] = self.minibatch_step
        if self.compile:
            self.loss_fn = torch.compile(self.ppo_loss, dynamic=False)
        if self.captures():
            self.step_fn = CapturedStep(self.minibatch_step)

    def _step(self, minibatch: Batch) -> torch.Tensor:
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
        batches = self.prepare(chunks)
        saved = [t.detach().clone() for t in self._updated_in_place()]
        plans = []
        for b, per_minibatch in batches:
            entries = len(b["obs"])
            minibatch_size = min(per_minibatch, entries)  # in equal shares (config validation makes it a multiple)
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
        self.replica.mean(last)  # a group's: the whole minibatch's statistics, finite only where it is on every rank
        last[-1] = last[-1] == 1.0
        *losses, clipfrac, var_y_host, explained, all_finite = last.tolist()  # the one wait for the device
        if not all_finite:  # a diverged step: the update never happened
            self._restore_in_place(saved)
            self.ret_rms.load(ret_rms)
            self.return_carry = return_carry
        else:
            # Statistics move only after the update, so this batch was normalized as its actors saw it.
            if self.normalizes and self.obs_rms is not None:
                for chunk in chunks:
                    raw = np.asarray(chunk.arrays["obs"])
                    self.obs_rms.update(raw.reshape(-1, raw.shape[-1]))
        return {
            **dict(zip(STEP_STATS[:-1], losses, strict=True)),
            "clipfrac": clipfrac,
            "explained_variance": float("nan") if var_y_host == 0 else explained,
            "lr": lr,
            "batch_transitions": float(batch_size),
            "nonfinite_skipped": 0.0 if all_finite else 1.0,
        }

    def _kl(self, stats: torch.Tensor) -> float:
        """The last minibatch's approximate KL (over all ranks' shares): `target_kl`'s early stop, the same on every
        rank."""
        return float(self.replica.mean(stats[STEP_STATS.index("approx_kl")].clone()).item())

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
        if self.obs_rms is None:  # images: nothing to normalize with
            return {"policy": policy}
        return {"policy": policy, "obs_norm": self.obs_rms.state()}

    def state_dict(self) -> dict[str, Any]:
        """Everything to resume exactly; only tensors, numbers and containers (torch weights_only load)."""
        as_tensors = lambda state: {k: torch.as_tensor(v) for k, v in state.items()}
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            **({} if self.obs_rms is None else {"obs_rms": as_tensors(self.obs_rms.state())}),
            "ret_rms": as_tensors(self.ret_rms.state()),
            "return_carry": {str(k): v for k, v in self.return_carry.items()},
            "generator": self.generator.get_state(),  # the only torch RNG an update draws from
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"], ours=("lr",))  # the lr tensor a graph reads
        as_arrays = lambda state: {k: v.numpy() for k, v in state.items()}
        if self.obs_rms is not None:
            self.obs_rms.load(as_arrays(state["obs_rms"]))
        self.ret_rms.load(as_arrays(state["ret_rms"]))
        self.return_carry = {int(k): v.to(self.device, torch.float64) for k, v in state["return_carry"].items()}
        self.generator.set_state(state["generator"])
        self.reset_steps()


make_learner = PPOLearner
