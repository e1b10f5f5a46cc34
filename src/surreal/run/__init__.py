"""The run service under both front doors (the CLI's `surreal run`, the API's `surreal.train`): `prepare` an
experiment once, in the caller's process (config, preflight, run folder: prepare.py), then `start` it (start.py) as
supervised local processes (launch/) or with every role's core in one thread (serial.py)."""
