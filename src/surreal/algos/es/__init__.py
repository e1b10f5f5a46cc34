"""OpenAI Evolution Strategies (Salimans et al. 2017) in parts: nets.py holds the flat MLP and the noise table."""
