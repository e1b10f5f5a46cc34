"""PPO: its config (torch-free, what the registry imports), and its code, imported only where a role needs it."""
