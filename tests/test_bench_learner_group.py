"""bench.learner_group's rows: the learner alone (`--rank-of 0`) runs without a process group."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.learner_group import rank_main


def test_the_alone_row_times_the_learner_without_joining_a_group(tmp_path: Path) -> None:
    result = tmp_path / "result-0.json"
    args = argparse.Namespace(size=0, algo="ddpg", large=False, device="cpu", threads=1, updates=1, result=str(result))
    rank_main(args)  # a group's barrier or teardown here would raise: no process group was started
    assert json.loads(result.read_text())["updates_per_s"] > 0
