"""`surreal run topology.inference=central` end to end: actors that keep only their envs, inference workers that act
for them, and a worker SIGKILLed mid-run without a chunk lost. Real launcher subprocesses (tests/test_local_run.py's
`LocalRun`), loopback only, every process checked gone afterwards."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from conftest import wait_until
from test_local_run import LocalRun, runs  # noqa: F401  # the fixture

# Pendulum-v1, batches of 1,024 from 128-step chunks: an update every few seconds on a busy 2-core box.
CENTRAL = (
    "env=Pendulum-v1",
    "actors=2",
    "topology.inference=central",
    "algo.batch_size=1024",
    "algo.minibatch_size=256",
    "actor.chunk_steps=128",
    "learner.eval_interval=0",
)


def chunks_sent(logs: Path) -> int:
    """Every actor incarnation's chunks sent, as each says on the way out."""
    found = [
        int(n) for log in logs.glob("actor-*.log") for n in re.findall(r"stopped after (\d+) chunks", log.read_text())
    ]
    assert found, "no actor said how many chunks it sent"
    return sum(found)


def chunks_received(logs: Path) -> int:
    found = [int(n) for n in re.findall(r"(\d+) chunks received", (logs / "replay-0.log").read_text())]
    assert found, "the replay did not say how many chunks it received"
    return sum(found)


@pytest.mark.system  # the default tier's central-inference run: the topology at toy size
def test_a_central_inference_run_completes_with_every_chunk_received(runs):  # noqa: F811
    run = runs("central", *CENTRAL, "algo.batch_size=512", "algo.minibatch_size=128", "steps=2048")
    summary = run.wait(300)
    assert summary["status"] == "completed", summary
    assert summary["env_steps"] >= 2048 and summary["updates"] >= 4
    assert summary["restarts"] == {k: 0 for k in summary["restarts"]} and "inference-0" in summary["restarts"]
    logs = run.run_dir / "logs"
    assert "batches at version" in (logs / "inference-0.log").read_text(), "the worker acted"
    assert chunks_sent(logs) == chunks_received(logs)
    run.assert_nothing_left()


@pytest.mark.slow
def test_an_inference_worker_killed_mid_run_loses_no_chunk(runs):  # noqa: F811
    """Two workers; worker 0 (actor 0's first) SIGKILLed after the second update: its actors' requests time out
    and go to worker 1, the supervisor starts worker 0 again, and every chunk an actor sent reaches the replay."""
    run = runs("central-kill", *CENTRAL, "topology.inference_workers=2", "inference.request_timeout_s=1", "steps=8192")
    wait_until(lambda: run.updates() >= 2, 240)
    run.role("inference-0").send_signal(signal.SIGKILL)
    summary = run.wait(400)
    assert summary["status"] == "completed", summary
    assert summary["restarts"]["inference-0"] >= 1
    assert summary["restarts"]["actor-0"] == summary["restarts"]["actor-1"] == 0, "the actors failed over"
    assert summary["env_steps"] >= 8192
    logs = run.run_dir / "logs"
    assert chunks_sent(logs) == chunks_received(logs)
    assert "0 malformed messages dropped" in (logs / "replay-0.log").read_text()
    run.assert_nothing_left()
