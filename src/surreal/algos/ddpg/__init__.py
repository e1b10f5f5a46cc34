"""DDPG (Lillicrap et al. 2016) with TD3's fixes as switches, distributed: CleanRL's ddpg_continuous_action in parts
(config, nets, policy: the actor's side, learner), which algorithm.py gathers for the roles, on the off-policy path SAC
shares (algos/offpolicy.py, algos/sample_steps.py). config.py is torch-free: the registry imports it."""
