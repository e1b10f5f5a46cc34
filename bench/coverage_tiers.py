"""Line coverage of `src/surreal` by the test tiers: what `make test` covers, what `make test-long` adds, and the
share of the suite's covered lines the default tier keeps (docs/development.md, "Test tiers", holds it at 90 % or
more: moving a test to the long tier must not take its checks out of CI).

`make coverage` runs both tiers under coverage (every process they start included) and calls this with the two
`coverage json` reports; `--full` records a suite measured before it had tiers, as the baseline. Each call adds one
entry, keyed by its label, to bench/results/coverage-tiers.<N>core.json and prints it as the last line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def lines_of(report: Path) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """A `coverage json` report's executed lines and statements per file, keyed by the path below `surreal/` (so that
    reports from two checkouts compare)."""
    files = json.loads(report.read_text())["files"]
    executed: dict[str, set[int]] = {}
    statements: dict[str, set[int]] = {}
    for path, entry in files.items():
        key = path[path.rindex("surreal/") :]
        executed[key] = set(entry["executed_lines"])
        statements[key] = executed[key] | set(entry["missing_lines"])
    return executed, statements


def percent(covered: int, total: int) -> float:
    return round(100.0 * covered / total, 2) if total else 0.0


def tier_figures(default: Path, long: Path) -> dict:
    """The default tier's, the long tier's and both tiers' coverage, and the default tier's share of both."""
    ran_default, statements = lines_of(default)
    ran_long, statements_long = lines_of(long)
    for key, lines in statements_long.items():
        statements[key] = statements.get(key, set()) | lines
    total = sum(len(lines) for lines in statements.values())
    default_lines = sum(len(lines) for lines in ran_default.values())
    long_lines = sum(len(lines) for lines in ran_long.values())
    both_lines = sum(len(ran_default.get(key, set()) | ran_long.get(key, set())) for key in statements)
    return {
        "statements": total,
        "default_tier": {"covered": default_lines, "percent": percent(default_lines, total)},
        "long_tier": {"covered": long_lines, "percent": percent(long_lines, total)},
        "both_tiers": {"covered": both_lines, "percent": percent(both_lines, total)},
        "default_share_of_both_percent": percent(default_lines, both_lines),
    }


def full_figures(full: Path) -> dict:
    ran, statements = lines_of(full)
    total = sum(len(lines) for lines in statements.values())
    covered = sum(len(lines) for lines in ran.values())
    return {"statements": total, "whole_suite": {"covered": covered, "percent": percent(covered, total)}}


def head_commit() -> str:
    command = ["git", "rev-parse", "--short", "HEAD"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--default", type=Path, help="coverage json of `make test`'s pytest run")
    parser.add_argument("--long", type=Path, help="coverage json of `make test-long`'s pytest run")
    parser.add_argument("--full", type=Path, help="coverage json of an untiered suite (a baseline)")
    parser.add_argument("--label", default=None, help="the entry's key (default: the checkout's commit)")
    results = REPO / "bench" / "results" / f"coverage-tiers.{os.cpu_count()}core.json"
    parser.add_argument("--out", type=Path, default=results)
    args = parser.parse_args()
    if args.full is not None:
        figures = full_figures(args.full)
    elif args.default is not None and args.long is not None:
        figures = tier_figures(args.default, args.long)
    else:
        parser.error("give --default and --long, or --full")
    label = args.label or head_commit()
    results = json.loads(args.out.read_text()) if args.out.exists() else {"runs": {}}
    results["runs"][label] = figures
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print(json.dumps({label: figures}))


if __name__ == "__main__":
    main()
