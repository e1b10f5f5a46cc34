"""PPO's hyperparameters: torch-free, so the replay and ps roles read them too (the registry imports this file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from surreal.config.encoders import ENCODERS, encoder_widths
from surreal.config.schema import ExperimentConfig, StalenessConfig

RECURRENT_CELLS = ("lstm", "gru")  # `algo.recurrent`
AUTOCAST = ("bf16",)  # `algo.autocast`


@dataclass
class PPOConfig(StalenessConfig):
    """PPO (Schulman et al. 2017, https://arxiv.org/abs/1707.06347). Defaults are CleanRL's ppo_continuous_action.py
    (https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo_continuous_action.py), the paper's MuJoCo settings
    with the details catalogued by Huang et al. 2022, "The 37 Implementation Details of Proximal Policy Optimization",
    except four keys from Tianshou's MuJoCo PPO (https://github.com/thu-ml/tianshou/blob/master/examples/mujoco/
    mujoco_ppo.py, about 5,800 on HalfCheetah at 1M steps): log_std_init -0.5, no value clipping, no advantage
    normalization, vf_coef 0.25. Measured here (docs/ppo.md, bench.learning) they lift PPO on HalfCheetah-v5 at 1M
    steps from ~1,800 to ~4,000 at the same cost; `preset=ppo-cleanrl` restores CleanRL's four. Optimizer steps per
    update are update_epochs x batch_size / minibatch_size (320 here): when the batch grows with the actors, grow
    minibatch_size with it, so an update stays what the learner can afford (the chart's values do)."""

    module: ClassVar[str] = "surreal.algos.ppo.algorithm"
    # An image: a convolutional encoder (`encoder`) in front of the heads; a flat Box: the MLPs of `hidden_sizes`.
    observation_spaces: ClassVar[frozenset[str]] = frozenset({"box", "image"})
    action_spaces: ClassVar[frozenset[str]] = frozenset({"box", "discrete"})  # Discrete: a categorical head

    name: str = "ppo"
    lr: float = 3e-4  # Adam step size
    anneal_lr: bool = True  # decay lr linearly to 0 over total_env_steps
    gamma: float = 0.99  # discount factor
    gae_lambda: float = 0.95  # GAE's lambda: bias (0) against variance (1) of the advantages
    batch_size: int = 2048  # transitions per update (CleanRL's num_envs x num_steps), from all actors together
    minibatch_size: int = 64  # transitions per gradient step; update_epochs x batch_size / minibatch_size steps
    update_epochs: int = 10  # passes over each batch
    clip_coef: float = 0.2  # the surrogate's clipping range for the probability ratio (and the value's)
    clip_vloss: bool = False  # clip the value loss as the policy's (CleanRL: true)
    norm_adv: bool = False  # normalize advantages per minibatch (CleanRL: true)
    ent_coef: float = 0.0  # weight of the entropy bonus
    vf_coef: float = 0.25  # weight of the value loss (CleanRL: 0.5)
    max_grad_norm: float = 0.5  # global gradient-norm clip
    target_kl: float | None = None  # stop an update's epochs early once the approximate KL passes this; null: never
    # tanh MLP widths of actor and critic each, on flat observations; on an image encoder's features the heads are
    # single linear layers (CleanRL's ppo_atari), so these are not used
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    log_std_init: float = -0.5  # the state-independent log-std's start (Tianshou's MuJoCo PPO; CleanRL 0)
    # Normalize flat observations by running mean and std (the statistics travel to the actors). Images are never
    # normalized: they stay uint8 until the encoder divides them by 255, whatever this says
    obs_norm: bool = True
    obs_clip: float = 10.0  # clip normalized observations to +-this
    # The convolutional encoder of image observations (algos/encoders.py): nature (Mnih et al. 2015's CNN, 512
    # features) | impala (Espeholt et al. 2018's 15-layer ResNet, 256 features). Flat observations have none
    encoder: str = "nature"
    # bf16: the update's forward passes under torch.autocast in bfloat16 (a GPU's tensor cores; the parameters, the
    # optimizer and the loss's reductions stay float32). null: float32 throughout
    autocast: str | None = None
    reward_scale: bool = True  # divide rewards by the running std of the discounted return
    reward_clip: float = 10.0  # clip scaled rewards to +-this
    # lstm | gru: a recurrent cell over the observations feeding both heads, trained by truncated backpropagation
    # through time over each chunk from its stored start state; minibatches are whole chunk sequences. null: MLPs
    recurrent: str | None = None
    rnn_hidden_size: int = 64  # the recurrent cell's width (its state: h and c for an LSTM, h for a GRU)

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = super().problems(cfg) + self.breaking(
            "> 0",
            "minibatch_size",
            "rnn_hidden_size",
            "update_epochs",
            "lr",
            "clip_coef",
            "max_grad_norm",
            "obs_clip",
            "reward_clip",
        )
        out += self.breaking(">= 0", "ent_coef", "vf_coef")
        out += self.breaking("in (0, 1]", "gamma")
        out += self.breaking("in [0, 1]", "gae_lambda")
        out += self.breaking("> 0 or null", "target_kl")
        out += self.bad_sizes("hidden_sizes")
        if self.encoder not in ENCODERS:
            out.append(f"algo.encoder must be one of {', '.join(ENCODERS)} (got {self.encoder!r})")
        if self.autocast is not None and self.autocast not in AUTOCAST:
            out.append(f"algo.autocast must be one of {', '.join(AUTOCAST)} or null (got {self.autocast!r})")
        if self.minibatch_size > self.batch_size:
            out.append(f"algo.minibatch_size ({self.minibatch_size}) must be <= algo.batch_size ({self.batch_size})")
        if self.recurrent is not None and self.recurrent not in RECURRENT_CELLS:
            out.append(f"algo.recurrent must be one of {', '.join(RECURRENT_CELLS)} or null (got {self.recurrent!r})")
        elif self.recurrent is not None and self.minibatch_size < cfg.actor.chunk_steps:
            out.append(
                f"algo.minibatch_size ({self.minibatch_size}) must be >= actor.chunk_steps ({cfg.actor.chunk_steps})"
                f" with algo.recurrent: a minibatch is minibatch_size // chunk_steps whole chunk sequences"
            )
        return out

    def encoder_widths(self, shape: tuple[int, ...]) -> list[int]:
        """The widths of the encoder's dense layer for images of `shape` (C, H, W) (`encoder_widths`)."""
        return encoder_widths(self.encoder, shape)

    def central_inference(self) -> bool:
        return self.recurrent is None  # an MLP policy: one for every actor, its sampling per worker

    def replica_problems(self, replicas: int) -> list[str]:
        """Each rank computes its share of every minibatch: `minibatch_size` must split evenly."""
        if self.minibatch_size % replicas:
            return [f"algo.minibatch_size ({self.minibatch_size}) must be a multiple of learner.replicas ({replicas})"]
        return []
