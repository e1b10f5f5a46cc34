"""DDPG (Lillicrap et al. 2016) with TD3's fixes as switches, CleanRL's ddpg_continuous_action in parts, on the
off-policy path SAC shares (algos/offpolicy.py, algos/sample_steps.py)."""
