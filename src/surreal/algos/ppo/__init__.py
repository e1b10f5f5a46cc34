"""PPO (Schulman et al. 2017) for continuous and discrete actions, distributed: CleanRL's ppo_continuous_action in
parts, each readable top to bottom (config, nets, recurrent, policy: the actor's side, learner), which algorithm.py
gathers for the roles. config.py is torch-free: the registry and the replay and ps roles import it."""
