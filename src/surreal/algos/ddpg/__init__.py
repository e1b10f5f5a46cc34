"""DDPG (Lillicrap et al. 2016) with TD3's fixes as switches, distributed: CleanRL's ddpg_continuous_action and
td3_continuous_action in parts. The n-step collector and the off-policy policy's warm-up are algos/offpolicy.py's, the
sample-stepping learner machinery algos/sample_steps.py's: SAC shares them.

    config.py     DDPGConfig, the hyperparameters (torch-free: the registry and the replay and ps roles import it)
    nets.py       the ReLU MLPs and the tanh-squashed deterministic actor
    policy.py     the actor's side: mu(s) plus this actor's Gaussian or Ornstein-Uhlenbeck noise
    learner.py    the learner's side: the critic and actor losses and the step, target networks
    algorithm.py  the calls the roles make (surreal.algos.interface.Algorithm), named by the config's `module`
"""
