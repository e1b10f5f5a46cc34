"""OpenAI Evolution Strategies (Salimans et al. 2017), distributed over the shared roles, in parts:

config.py     ESConfig, the hyperparameters (torch-free: the registry and the replay and ps roles import it)
nets.py       the flat-parameter MLP and the shared noise table
policy.py     the actor's side: theta acting deterministically, the collector of antithetic pairs
learner.py    the learner's side: rank shaping, the gradient estimate, Adam on theta
algorithm.py  the calls the roles make (surreal.algos.interface.Algorithm), named by the config's `module`
"""
