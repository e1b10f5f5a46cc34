"""`surreal probe progress`, the chart's `helm test`: against a served learner-like registry it passes once the
updates gauge reaches the threshold, keeps polling while the endpoint is unreachable or shows too few updates,
fails after its timeout, refuses an endpoint that is not a learner's, and loads no torch (it runs in the replay
image)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import free_port
from surreal.commands.probe import read_learner, wait_for_progress
from surreal.metrics import RoleMetrics


@pytest.fixture
def learner_metrics():
    metrics = RoleMetrics("learner", 0)
    updates = metrics.gauge("learner_updates", "updates done")
    steps = metrics.gauge("learner_env_steps", "environment steps consumed")
    port = metrics.serve("127.0.0.1", free_port())
    try:
        yield f"http://127.0.0.1:{port}/metrics", updates, steps
    finally:
        metrics.close()


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_reads_the_learner_gauges(learner_metrics) -> None:
    url, updates, steps = learner_metrics
    updates.set(3)
    steps.set(1536)
    assert read_learner(url) == {"updates": 3.0, "env_steps": 1536.0}


def test_waits_until_the_learner_has_done_enough_updates(learner_metrics) -> None:
    url, updates, _ = learner_metrics
    clock, lines = FakeClock(), []

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        updates.inc()  # the learner makes one update per poll

    assert wait_for_progress(url, 3, timeout_s=60, interval_s=5, say=lines.append, clock=clock, sleep=sleep)
    assert clock.now == 15  # polled at 0 (0 updates), 5, 10, passed at 15 with 3
    assert lines[-1] == "progress: 3 updates >= 3"


def test_fails_after_its_timeout_when_the_learner_makes_no_progress(learner_metrics) -> None:
    url, updates, _ = learner_metrics
    updates.set(1)
    clock, lines = FakeClock(), []
    assert not wait_for_progress(url, 2, timeout_s=20, interval_s=5, say=lines.append, clock=clock, sleep=clock.sleep)
    assert "no progress within 20 s" in lines[-1]
    assert clock.now <= 20


def test_an_unreachable_learner_is_retried_until_the_timeout() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    clock, lines = FakeClock(), []
    assert not wait_for_progress(url, 1, timeout_s=3, interval_s=1, say=lines.append, clock=clock, sleep=clock.sleep)
    assert sum("not reachable yet" in line for line in lines) >= 3


def test_an_endpoint_without_the_learner_gauge_never_passes() -> None:
    metrics = RoleMetrics("replay", 0)
    metrics.gauge("replay_size", "transitions held").set(10)
    port = metrics.serve("127.0.0.1", free_port())
    try:
        clock, lines = FakeClock(), []
        url = f"http://127.0.0.1:{port}/metrics"
        assert not wait_for_progress(
            url, 1, timeout_s=2, interval_s=1, say=lines.append, clock=clock, sleep=clock.sleep
        )
        assert any("serves no surreal_learner_updates" in line for line in lines)
    finally:
        metrics.close()


@pytest.mark.system
def test_the_command_exits_0_on_progress_and_1_without(learner_metrics) -> None:
    url, updates, _ = learner_metrics
    command = [sys.executable, "-m", "surreal", "probe", "progress", "--url", url, "--interval-s", "0.2"]
    slow = subprocess.run(
        [*command, "--min-updates", "5", "--timeout-s", "1"], capture_output=True, text=True, timeout=30
    )
    assert slow.returncode == 1 and "no progress within 1 s" in slow.stdout
    updates.set(5)
    ok = subprocess.run(
        [*command, "--min-updates", "5", "--timeout-s", "10"], capture_output=True, text=True, timeout=30
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "[surreal probe] learner: updates=5" in ok.stdout


def test_the_probe_loads_no_torch() -> None:
    code = "import sys; from surreal.cli import main; from surreal.commands import probe; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"
