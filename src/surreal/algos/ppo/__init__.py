"""Proximal Policy Optimization (Schulman et al. 2017) for continuous and discrete actions, distributed: CleanRL's
ppo_continuous_action in parts, each readable top to bottom.

    config.py     PPOConfig, the hyperparameters (torch-free: the registry and the replay and ps roles import it)
    nets.py       the tanh MLPs and the actor-critic heads: Gaussian for Box actions, categorical for Discrete ones
    recurrent.py  SURREAL-PPO's recurrent policy: an LSTM or GRU cell in front of the same heads
    policy.py     the actor's side: the model for the env's spaces, PPOPolicy, its collector and chunk fields
    learner.py    the learner's side: GAE, the clipped loss, the update
    algorithm.py  the calls the roles make (surreal.algos.interface.Algorithm), named by the config's `module`
"""
