"""Reading metrics.jsonl, the learner's one-JSON-object-per-line log of its updates.

The file is read while the learner appends to it and after a resumed learner rewrote it, so a reader
meets a half-written last line, and whatever a crash left: a line that is not a JSON object is not a
row and is skipped, never an error. `parse_row` is that rule; the whole-file and the incremental reader
apply it. Torch-free and launcher-free, so any role, the launcher and the benchmarks can share it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from surreal.boundedjson import JsonBounds, loads

METRICS_FILE = "metrics.jsonl"  # in the run folder, written by the learner
EVALS_FILE = "evals.jsonl"  # in the run folder, written by the evaluator (roles/evaluator.py): the same rule
# One row: a flat object of counters and statistics (NaN included, as json writes a diverged one). A line over these
# bounds is no row (a run folder may come from a bucket or a download: `surreal plot` reads it).
ROW_JSON = JsonBounds(1 << 20, max_depth=8, max_items=1 << 16, max_string=1 << 16, allow_nan=True)


def parse_row(line: str | bytes) -> dict[str, Any] | None:
    """The row a line holds, or None for a line that is not a JSON object (partly written, cut short
    by a crash, not UTF-8)."""
    try:
        row = loads(line, ROW_JSON, METRICS_FILE)
    except ValueError:  # JsonBoundsError: not JSON, not UTF-8, or over the bounds
        return None
    return row if isinstance(row, dict) else None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl (none if it does not exist yet); lines that are not rows are skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [row for line in text.splitlines() if (row := parse_row(line)) is not None]


def read_evals(run_dir: Path) -> list[dict[str, Any]]:
    """The evaluator's rows in a run folder (none when no evaluator ran): env_steps, eval_return_mean, ..."""
    return read_metrics(run_dir / EVALS_FILE)


class MetricsTail:
    """Reads the rows appended to metrics.jsonl since the last call, keeping an unfinished last line.

    A file that shrank was rewritten (a resumed learner drops the rows after its checkpoint): it is read
    again from the start.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size < self._offset:
                    self._offset, self._partial = 0, b""
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [row for line in lines if (row := parse_row(line)) is not None]
