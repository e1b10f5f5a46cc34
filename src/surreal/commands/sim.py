"""`surreal sim`: run scenarios from their seeds and report each; exit 1 if any invariant broke, 2 for a name
that is no scenario."""

from __future__ import annotations

import difflib
import logging
import sys

from surreal.sim.scenarios import SCENARIOS, run


def main(names: list[str], list_only: bool, seed: int, seeds: int) -> int:
    if list_only:
        width = max(len(name) for name in SCENARIOS)
        for name, scenario in SCENARIOS.items():
            print(f"{name:<{width}}  {scenario.doc}")
        return 0
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        near = difflib.get_close_matches(unknown[0], SCENARIOS, n=3)
        hint = f"; did you mean {' or '.join(near)}?" if near else " (surreal sim --list)"
        print(f"surreal sim: no scenario {unknown[0]!r}{hint}", file=sys.stderr)
        return 2
    if seeds < 1:
        print("surreal sim: --seeds must be at least 1", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING)  # the learner's checkpoint lines stay out of the report
    failed = 0
    for name in names or list(SCENARIOS):
        for s in range(seed, seed + seeds):
            report = run(SCENARIOS[name], s)
            print(report.summary(), flush=True)
            for rule, found in report.violations.items():
                for line in found:
                    print(f"    {rule}: {line}")
            failed += not report.ok
    return 1 if failed else 0
