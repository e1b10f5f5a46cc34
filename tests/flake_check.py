"""`make test-flaky`: run the timing-sensitive tests several times on the machine as it is and several times with
every core kept busy by a CPU burner, and print how often each passed.

A test's verdict must not depend on how fast the machine is (DESIGN.md, "Quality bar"): one that passes only on a
slow box, or only on a quiet one, shows up here as a pass count below the run count. The burner is one spinning
process per core at the tests' own priority, as another job on a shared CI machine would be.

    python tests/flake_check.py [--runs 3] [--loaded-runs 3] [pytest selection ...]
    python tests/flake_check.py --runs 0 --loaded-runs 1 --default-tier     # `make test`'s tests, both cores busy
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Every test that starts processes and waits on them, sleeps, or reads what a run did over time.
TIMING_SENSITIVE = (
    "tests/test_local_run.py",
    "tests/test_supervisor.py",
    "tests/test_hold_when_done.py",
    "tests/test_services.py",
    "tests/test_fuzz.py",
)


def spin() -> None:
    while True:
        pass


@contextmanager
def cores_busy(processes: int) -> Iterator[None]:
    """`processes` burners spinning until the block ends."""
    burners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(processes)]
    for burner in burners:
        burner.start()
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.join(timeout=10)


def run_once(selection: list[str], report: Path) -> dict[str, str]:
    """One pytest run (slow tests included); each test's outcome: passed, failed or skipped."""
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *selection],
        cwd=REPO,
        check=False,
    )
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        failed = case.find("failure") is not None or case.find("error") is not None
        outcomes[name] = "failed" if failed else "skipped" if case.find("skipped") is not None else "passed"
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs on the machine as it is")
    parser.add_argument("--loaded-runs", type=int, default=3, help="runs with every core kept busy")
    parser.add_argument("--default-tier", action="store_true", help="every test `make test` runs (-m 'not slow')")
    parser.add_argument("selection", nargs="*", default=list(TIMING_SENSITIVE), help="pytest files or node ids")
    args = parser.parse_args()
    if args.default_tier:
        args.selection = ["tests", "-m", "not slow"]
    passes: dict[str, Counter[str]] = {"as is": Counter(), "loaded": Counter()}
    runs = {"as is": args.runs, "loaded": args.loaded_runs}
    names: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for condition, count in runs.items():
            for attempt in range(count):
                started = time.monotonic()
                print(f"== {condition}, run {attempt + 1} of {count}", flush=True)
                report = Path(tmp) / f"{condition.replace(' ', '-')}-{attempt}.xml"
                if condition == "loaded":
                    with cores_busy(os.cpu_count() or 1):
                        outcomes = run_once(args.selection, report)
                else:
                    outcomes = run_once(args.selection, report)
                names.update(outcomes)
                passes[condition].update(n for n, outcome in outcomes.items() if outcome != "failed")
                print(f"   {time.monotonic() - started:.0f} s", flush=True)
    width = max(len(n) for n in names)
    print(f"\n{'test':<{width}}  as is  loaded")
    flaky = 0
    for name in sorted(names):
        as_is, loaded = passes["as is"][name], passes["loaded"][name]
        flaky += as_is < args.runs or loaded < args.loaded_runs
        print(f"{name:<{width}}  {as_is}/{args.runs}    {loaded}/{args.loaded_runs}")
    total_runs = args.runs + args.loaded_runs
    print(f"\n{len(names)} tests x {total_runs} runs: {flaky} failed at least once (skips count as passes)")
    return 1 if flaky else 0


if __name__ == "__main__":
    sys.exit(main())
