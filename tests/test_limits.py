"""The open-file limit a server role raises at start (runtime/limits.py): up to the hard limit, and one log line
when even that is below what a large fleet needs. Each case runs in a child process started with lowered limits."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from surreal.runtime.limits import OPEN_FILES_WANTED

PROBE = """
import logging, resource, sys
from surreal.runtime.limits import raise_open_files
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(message)s")
print(raise_open_files(logging.getLogger("probe")), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def run_with_limits(soft: int, hard: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
        capture_output=True,
        text=True,
        timeout=60,
    )


def hard_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


@pytest.mark.skipif(hard_limit() < 1024, reason="the hard open-file limit here is below 1,024")
def test_soft_limit_is_raised_to_the_hard_limit():
    hard = min(hard_limit(), 1 << 20)
    result = run_with_limits(256, hard)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(hard), str(hard)]
    assert ("WARNING" in result.stderr) == (hard < OPEN_FILES_WANTED)


def test_a_hard_limit_below_the_need_is_said_in_one_line():
    result = run_with_limits(128, 512)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["512", "512"]
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "open-file limit is 512" in warnings[0], result.stderr
