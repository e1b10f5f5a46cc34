"""OpenAI Evolution Strategies (Salimans et al. 2017), distributed over the shared roles, in parts (config, nets: the
flat MLP and the shared noise table, policy: the actor's side, learner), which algorithm.py gathers for the roles.
config.py is torch-free: the registry imports it."""
