"""Soft Actor-Critic (Haarnoja et al. 2018) with CrossQ's switches (Bhatt et al. 2024), distributed: SB3's SAC in parts
(config, nets, policy: the actor's side, learner), which algorithm.py gathers for the roles, on DDPG's off-policy path
(algos/offpolicy.py, algos/sample_steps.py). config.py is torch-free: the registry imports it."""
