"""Soft Actor-Critic (Haarnoja et al. 2018) with CrossQ's switches (Bhatt et al. 2024), distributed: Stable-Baselines3's
SAC in parts, on DDPG's off-policy path (algos/offpolicy.py, algos/sample_steps.py).

    config.py     SACConfig, the hyperparameters (torch-free: the registry and the replay and ps roles import it)
    nets.py       the tanh-squashed Gaussian actor and its mean action
    policy.py     the actor's side: a sample of pi(.|s), its own noise stream per actor
    learner.py    the learner's side: twin soft Q critics, the actor and temperature losses, the step
    algorithm.py  the calls the roles make (surreal.algos.interface.Algorithm), named by the config's `module`
"""
