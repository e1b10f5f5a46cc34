"""One whole run per topology at toy size, in the default tier: what the long tier's learning and chaos runs do at
length (tests/test_learner_group.py's rank kill, tests/test_runstore_run.py's machine lost), here only completed,
with the wiring each topology adds checked. Real `surreal run` launchers as subprocesses (tests/test_local_run.py's
`LocalRun`), loopback only, every process checked gone afterwards. The processes topology with CURVE is
tests/test_local_run.py's deterministic run, central inference tests/test_inference_run.py's completed run."""

from __future__ import annotations

import pytest

from surreal.metricsfile import read_metrics
from surreal.runstore import RemoteRun
from test_local_run import LocalRun

# PPO on InvertedPendulum in small batches: an update every second or two, a run of a few updates.
TOY_PPO = (
    "env=InvertedPendulum-v5",
    "actors=1",
    "algo.batch_size=512",
    "algo.minibatch_size=128",
    "algo.update_epochs=2",
    "actor.chunk_steps=128",
    "learner.eval_episodes=2",
    "learner.eval_interval=0",
)


@pytest.mark.system
def test_a_learner_group_of_two_ranks_completes_a_toy_run(tmp_path):
    run = LocalRun(tmp_path, "group", *TOY_PPO, "steps=2048", "learner.replicas=2", "learner.group_timeout_s=60")
    try:
        summary = run.wait(300)
    finally:
        run.close()
    assert summary["status"] == "completed" and summary["env_steps"] >= 2048, summary
    assert summary["restarts"] == {name: 0 for name in summary["restarts"]} and "learner-1" in summary["restarts"]
    rank_1 = (run.run_dir / "logs" / "learner-1.log").read_text()
    assert "joined the learner group" in rank_1, rank_1[-2000:]
    updates = [row["updates"] for row in read_metrics(run.run_dir / "metrics.jsonl") if row["updates"]]
    assert updates == list(range(1, 5)), "one row per update, each update the group's"
    run.assert_nothing_left()


@pytest.mark.system
def test_a_run_with_its_folder_in_a_bucket_completes_and_mirrors_what_a_user_reads(tmp_path, s3_bucket):
    uri = f"{s3_bucket}/runs/toy"
    run = LocalRun(tmp_path, "toy", *TOY_PPO, "steps=1024", f"run_uri={s3_bucket}/runs")
    try:
        summary = run.wait(300)
    finally:
        run.close()
    assert summary["status"] == "completed" and summary["env_steps"] >= 1024, summary
    remote = RemoteRun(uri)
    mirrored = set(remote.manifest("learner") or {}) | set(remote.manifest("launcher") or {})
    assert {"config.yaml", "metrics.jsonl", "eval.json", "summary.json", "policy/policy.safetensors"} <= mirrored
    run.assert_nothing_left()
