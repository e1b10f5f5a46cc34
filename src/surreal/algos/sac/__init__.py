"""Soft Actor-Critic (Haarnoja et al. 2018) with CrossQ's switches (Bhatt et al. 2024), SB3's SAC in parts, on DDPG's
off-policy path (algos/offpolicy.py, algos/sample_steps.py)."""
