"""`surreal run`: an experiment as supervised local processes, with a run folder and live progress."""
