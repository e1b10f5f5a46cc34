"""A deterministic simulation of a whole Surreal experiment: the roles' own cores on a virtual clock.

world.py (the clock, the seeded scheduler, the network), nodes.py (each role's core driven as its shell drives
it), hostile.py (peers that send what no honest role would), ledger.py (the invariants), scenarios.py (the
scenarios and `run`). docs/simulator.md says how to use it.
"""
