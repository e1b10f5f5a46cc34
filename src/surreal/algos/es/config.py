"""OpenAI-ES's hyperparameters, torch-free (the registry imports this file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from surreal.config.schema import ExperimentConfig, OnPolicyConfig


@dataclass
class ESConfig(OnPolicyConfig):
    """OpenAI-ES (Salimans et al. 2017, "Evolution Strategies as a Scalable Alternative to Reinforcement Learning",
    https://arxiv.org/abs/1703.03864; code https://github.com/openai/evolution-strategies-starter). From the paper's
    MuJoCo settings: sigma 0.02, Adam step size 0.01, L2 coefficient 0.005, antithetic (mirrored) sampling,
    centered-rank fitness shaping, observation normalization, a 2x64 tanh policy and a shared Gaussian noise table (so
    only seeds and returns travel; the paper's held 250M entries). The paper ran 10,000 episodes per generation on
    1,440 cores; the population here fits one machine and grows with `batch_size`. Shorter episodes:
    env.kwargs.max_episode_steps=N."""

    module: ClassVar[str] = "surreal.algos.es.algorithm"
    action_spaces: ClassVar[frozenset[str]] = frozenset({"box", "discrete"})  # Discrete: the argmax of the outputs

    name: str = "es"
    batch_size: int = 128  # antithetic pairs per generation: the population is 2 x batch_size episodes
    pairs_per_chunk: int = 4  # pairs an actor evaluates per message
    sigma: float = 0.02  # std of the parameter perturbations
    lr: float = 0.01  # Adam step size on theta
    weight_decay: float = 0.005  # the paper's l2coeff
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])  # tanh MLP widths of the policy
    noise_table_size: int = 10_000_000  # float32 entries (40 MB), the same table in every process
    noise_seed: int = 123  # every process builds the same noise table from it
    obs_norm: bool = True  # normalize observations by the running statistics the actors report
    obs_clip: float = 5.0  # clip normalized observations to +-this

    def problems(self, cfg: ExperimentConfig) -> list[str]:
        out = super().problems(cfg) + self.breaking(
            "> 0", "pairs_per_chunk", "sigma", "lr", "noise_table_size", "obs_clip"
        )
        out += self.breaking(">= 0", "weight_decay")
        return out + self.bad_sizes("hidden_sizes")

    def chunk_size(self, cfg: ExperimentConfig) -> int:
        return self.pairs_per_chunk

    def max_env_steps_per_unit(self, max_episode_steps: int | None) -> int | None:
        return None if max_episode_steps is None else 2 * max_episode_steps  # a unit is two whole episodes
