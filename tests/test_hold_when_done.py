"""SURREAL_HOLD_WHEN_DONE, what the chart's workloads need: a finished learner, actor and evaluator stay up (idle,
/metrics answering) until SIGTERM instead of exiting into a restart loop, and a learner resumed after it
finished announces `done` without evaluating again. Real role processes on loopback with a tiny PPO run."""

from __future__ import annotations

import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from conftest import free_port, loopback_settings, wait_until

TINY_PPO = {
    "algo": {"name": "ppo", "batch_size": 128, "minibatch_size": 64, "update_epochs": 1},
    "env": {"id": "InvertedPendulum-v5"},
    "total_env_steps": 256,
    "device": "cpu",
    "topology": {"actors": 1},
    "actor": {"chunk_steps": 64},
    "learner": {"eval_episodes": 1, "eval_interval": 128},  # the interval only matters to the evaluator
}


def log_of(roles, index: int) -> str:
    return sorted(roles.tmp_path.glob(f"*-{index}.log"))[0].read_text()


def answers_metrics(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.status == 200


@pytest.mark.system
def test_finished_roles_hold_until_stopped_and_a_resumed_learner_does_not_evaluate_again(roles, tmp_path: Path):
    config = tmp_path / "experiment.yaml"
    config.write_text(yaml.safe_dump(TINY_PPO))
    run_dir = tmp_path / "run"
    base = loopback_settings(run_dir=run_dir, hold_when_done=True, config_path=config, metrics_port=0)
    learner_port, actor_port = free_port(), free_port()
    roles.start("replay", base)  # log index 0
    roles.start("ps", base)  # 1
    learner = roles.start("learner", replace(base, metrics_port=learner_port), "--resume")  # 2
    actor = roles.start("actor", replace(base, metrics_port=actor_port))  # 3

    eval_json = run_dir / "eval.json"
    wait_until(eval_json.exists, timeout_s=180, interval_s=0.2)
    wait_until(lambda: "holding until stopped" in log_of(roles, 3), timeout_s=60, interval_s=0.2)
    wait_until(lambda: "holding until stopped" in log_of(roles, 2), timeout_s=60, interval_s=0.2)
    assert learner.poll() is None and actor.poll() is None, "finished roles stay up"
    assert answers_metrics(learner_port) and answers_metrics(actor_port), "their probes keep passing"

    learner.terminate()
    assert learner.wait(timeout=20) == 0
    actor.terminate()
    assert actor.wait(timeout=20) == 0

    evaluated = eval_json.read_text()
    mtime = eval_json.stat().st_mtime_ns
    again = roles.start("learner", replace(base, metrics_port=learner_port), "--resume")  # 4
    wait_until(lambda: "holding until stopped" in log_of(roles, 4), timeout_s=60, interval_s=0.2)
    assert "not evaluating again" in log_of(roles, 4)
    assert eval_json.stat().st_mtime_ns == mtime and eval_json.read_text() == evaluated
    late_actor = roles.start("actor", replace(base, metrics_port=actor_port))  # 5: a restarted actor sees `done`
    wait_until(lambda: "holding until stopped" in log_of(roles, 5), timeout_s=60, interval_s=0.2)
    assert "stopped after 0 chunks" not in log_of(roles, 5), "it is still holding, not exited"
    evaluator_port = free_port()
    evaluator = roles.start("evaluator", replace(base, metrics_port=evaluator_port))  # 6: the chart's Deployment's
    wait_until(lambda: "holding until stopped" in log_of(roles, 6), timeout_s=60, interval_s=0.2)
    assert evaluator.poll() is None and answers_metrics(evaluator_port)
    again.terminate()
    late_actor.terminate()
    evaluator.terminate()
    assert again.wait(timeout=20) == 0 and late_actor.wait(timeout=20) == 0 and evaluator.wait(timeout=20) == 0
