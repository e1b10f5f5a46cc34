"""Surreal: distributed deep reinforcement learning from a laptop to a Kubernetes cluster."""

__version__ = "0.1.0"
