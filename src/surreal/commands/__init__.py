"""The `surreal` command's subcommands (cli.py parses, these act): run.py (`surreal run` on the run service),
sweep.py (`--multirun`), plot.py, policy.py (`eval`, `export`), helm_values.py, catalog.py (`config`, `run --help`),
sim.py, probe.py."""
