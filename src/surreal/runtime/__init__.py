"""Algorithm-agnostic runtime pieces: rollouts, checkpoints, the single-process serial mode."""
