"""A prepared run's roles as supervised local processes (local.py, supervisor.py), with chaos and live progress."""
