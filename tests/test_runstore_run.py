"""A DDPG run with its run folder in a bucket (moto's S3 server, through s3fs), killed outright and resumed on a
machine with nothing of it on local disk: the learner's checkpoint and the replay shard's snapshot come back from
the bucket, and `surreal plot` and `surreal eval` read the bucket's run."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wait_until
from surreal.metricsfile import read_metrics
from surreal.runstore import RemoteRun
from test_local_run import DDPG_PENDULUM, LocalRun, assert_no_counter_goes_backwards

CHECKPOINT = re.compile(r"^checkpoints/ckpt-(\d{10})\.pt$")


def mirrored_updates(remote: RemoteRun) -> int:
    """The newest checkpoint the learner's manifest lists (its updates), 0 without one."""
    files = remote.manifest("learner") or {}
    return max((int(m[1]) for name in files if (m := CHECKPOINT.match(name))), default=0)


def mirrored_snapshot(remote: RemoteRun) -> bool:
    return bool(remote.manifest("replay-0"))


@pytest.mark.slow
def test_a_ddpg_run_killed_outright_resumes_from_the_bucket_with_nothing_on_local_disk(tmp_path, s3_bucket):
    uri = f"{s3_bucket}/runs/pend"
    remote = RemoteRun(uri)
    overrides = (*DDPG_PENDULUM, "steps=8000", "replay.snapshot_interval_s=2", "learner.checkpoint_interval=4")
    first = LocalRun(tmp_path, "pend", *overrides, f"run_uri={s3_bucket}/runs")
    try:
        wait_until(lambda: mirrored_updates(remote) >= 8 and mirrored_snapshot(remote), 600, interval_s=0.5)
        # The machine is lost: the learner and the replay shard SIGKILLed, then the launcher and everything else.
        for name in ("learner", "replay-0"):
            first.role(name).send_signal(signal.SIGKILL)
        first.children()
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=30)
    finally:
        first.close()
    first.assert_nothing_left()
    at_kill = mirrored_updates(remote)
    shutil.rmtree(first.run_dir)

    second = LocalRun(tmp_path, "pend", "--resume", uri)
    try:
        summary = second.wait(900)
    finally:
        second.close()
    assert summary["status"] == "completed" and summary["env_steps"] >= 8000, summary
    console = (tmp_path / "pend.console.log").read_text()
    assert re.search(rf"pulled \d+ file\(s\), [\d.,]+ MB, from {re.escape(uri)}", console), console
    learner_log = (second.run_dir / "logs" / "learner.log").read_text()
    resumed = re.search(r"resumed at update (\d+),", learner_log)
    assert resumed and int(resumed[1]) >= at_kill >= 8, "from the bucket's newest checkpoint, not afresh"
    restored = re.findall(r"restored (\d+) transitions", (second.run_dir / "logs" / "replay-0.log").read_text())
    assert restored and int(restored[0]) > 0, "the shard's snapshot came back from the bucket"
    assert_no_counter_goes_backwards(read_metrics(second.run_dir / "metrics.jsonl"))
    parts = remote.parts()
    assert {"learner", "replay-0", "launcher"} <= set(parts), parts
    mirrored = set(remote.manifest("learner") or {}) | set(remote.manifest("launcher") or {})
    assert {"eval.json", "summary.json", "policy/policy.safetensors"} <= mirrored
    second.assert_nothing_left()

    env = {**os.environ, "SURREAL_CACHE_DIR": str(tmp_path / "cache")}
    plot = subprocess.run(
        [sys.executable, "-m", "surreal", "plot", uri], env=env, capture_output=True, text=True, timeout=300
    )
    assert plot.returncode == 0, plot.stderr
    png = Path(plot.stdout.strip().splitlines()[-1])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "eval.json"
    evaluated = subprocess.run(
        [sys.executable, "-m", "surreal", "eval", uri, "--episodes", "2", "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    result = json.loads(out.read_text())
    assert result["eval_episodes"] == 2 and result["policy_env_steps"] == summary["env_steps"], result
