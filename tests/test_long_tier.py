"""The long tier's results file holds the long tier to its claims (docs/development.md, "Test tiers").

`make test-long` writes each slow test's outcome, its seconds and the figures it held to a bound (the `claim` fixture
in conftest.py) into bench/results/test-long.2core.json. Here, in the default tier, that file is held to the suite as
it is now: every test marked slow has an entry, it passed, every figure keeps its bound, and no entry names a test
that is gone or no longer slow. A new slow test lands with its result: `make test-long` (or `pytest -m slow
--long-results bench/results/test-long.2core.json tests/test_x.py::test_y` for just that one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "test-long.2core.json"


@pytest.fixture(scope="module")
def slow_tests() -> set[str]:
    """The node ids pytest collects as slow, from a collection of its own (markers, parametrized marks and all)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", "-p", "no:cacheprovider", "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads(RESULTS.read_text())


def holds(claim: dict) -> bool:
    low, high = claim["at_least"], claim["at_most"]
    return (low is None or claim["value"] >= low) and (high is None or claim["value"] <= high)


def test_every_slow_test_has_a_passing_result_and_no_result_is_stale(slow_tests, results):
    tests = results["tests"]
    assert slow_tests, "the long tier is empty"
    missing = sorted(slow_tests - tests.keys())
    assert not missing, f"slow tests without a result (run them with --long-results {RESULTS.name}): {missing}"
    stale = sorted(tests.keys() - slow_tests)
    assert not stale, f"results of tests that are gone or no longer slow: {stale}"
    failed = sorted(test for test, entry in tests.items() if entry["outcome"] != "passed")
    assert not failed, f"the long tier's last run failed these: {failed}"


def test_every_claimed_figure_keeps_its_bound(results):
    broken = [
        f"{test}: {claim['name']} = {claim['value']}"
        for test, entry in results["tests"].items()
        for claim in entry["claims"]
        if not holds(claim)
    ]
    assert not broken, broken
    assert any(entry["claims"] for entry in results["tests"].values()), "the learning runs claim their returns"


def test_a_claim_outside_its_bound_is_caught():
    assert holds({"value": -200.0, "at_least": -250.0, "at_most": None})
    assert not holds({"value": -300.0, "at_least": -250.0, "at_most": None})
    assert not holds({"value": 3.0, "at_least": None, "at_most": 2.0})
