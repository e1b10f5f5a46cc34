"""A replay shard killed in the middle of an off-policy run: what it comes back with, and how soon the learner
updates again.

    python -m bench.replay_restart [--interval 30] [--out bench/results/replay_restart.json]

DDPG on Pendulum-v1 (the off-policy end-to-end settings of tests/test_local_run.py, 64-64 networks, 2 actors,
one uniform shard, for 60k steps) with `replay.snapshot_interval_s = --interval`. Once the learner has done 2,000
updates and the shard has written a snapshot, the bench waits for the next one to land, lets half an interval
pass, and SIGKILLs the shard; `surreal run` starts it again in the same run folder. Measured:

- `held_at_kill` (the shard's `replay_size`), `in_last_snapshot` (`replay_snapshot_transitions`) and `restored`
  (the restarted shard's log line): `restored / in_last_snapshot` is the target's ">= 95% of the transitions
  written before its last snapshot"; `restored / held_at_kill` what the half interval since cost;
- `resume_s`: from the new shard process appearing (its start, Python's imports included) to the learner's
  `learner_updates` gauge moving 50 past where it stood then (more than the samples it may still hold from
  before the kill), polled every 50 ms; `serving_s`: from the same start to the shard's /metrics answering;
- then the run goes on to its end: status, eval return, restarts.

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from bench._runs import RESULTS, WatchedRun, emit, machine

DDPG_PENDULUM = [
    "algo=ddpg",
    "env=Pendulum-v1",
    "steps=60000",  # long enough that the kill, two snapshots in, comes well before the end
    "seed=1",
    "algo.learning_starts=1000",
    "algo.hidden_sizes=[64,64]",
    "actor.chunk_steps=32",
    "actors=2",
    "learner.eval_interval=0",  # as measured before the evaluator was on by default: no process beside the roles
]
POLL_S = 0.05
BUFFERED_UPDATES = 50  # more than a learner's prefetched samples hold (2 requests x 4 minibatches)


def gauge(port: int, name: str) -> float:
    """A role's metric, NaN while its /metrics does not answer (starting, or just killed)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return float("nan")
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise LookupError(name)


def role_process(run: WatchedRun, role: str) -> psutil.Process | None:
    for child in psutil.Process(run.proc.pid).children(recursive=True):
        try:
            cmdline = child.cmdline()
            if cmdline[-2:] == ["role", role] or cmdline[-3:-1] == ["role", role]:  # the learner adds --resume
                return child
        except psutil.NoSuchProcess:
            continue
    return None


def wait_for(condition: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(POLL_S)
    raise TimeoutError(f"{what}: not within {timeout_s} s")


def measure(interval_s: float) -> dict[str, Any]:
    overrides = [*DDPG_PENDULUM, f"replay.snapshot_interval_s={interval_s}"]
    run = WatchedRun(f"replay-restart-{int(time.time())}", overrides, RESULTS / "runs")
    try:
        learner = wait_for(lambda: role_process(run, "learner"), 120, "learner started")
        replay = wait_for(lambda: role_process(run, "replay"), 120, "replay started")
        learner_port = int(learner.environ()["SURREAL_METRICS_PORT"])
        replay_port = int(replay.environ()["SURREAL_METRICS_PORT"])
        updates = lambda: gauge(learner_port, "surreal_learner_updates")  # noqa: E731
        snapshots = lambda: gauge(replay_port, "surreal_replay_snapshots_total")  # noqa: E731
        wait_for(lambda: updates() >= 2000 and snapshots() >= 1, 900, "2,000 updates and a snapshot")
        seen = snapshots()
        wait_for(lambda: snapshots() > seen, 3 * interval_s + 60, "the next snapshot")
        time.sleep(interval_s / 2)
        held_at_kill = gauge(replay_port, "surreal_replay_size")
        in_last_snapshot = gauge(replay_port, "surreal_replay_snapshot_transitions")
        updates_at_kill = updates()
        replay.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: (p := role_process(run, "replay")) and p.pid != replay.pid, 120, "the shard restarted")
        restarted = time.monotonic()
        updates_at_restart = updates()
        wait_for(lambda: gauge(replay_port, "surreal_replay_size") >= 0, 120, "the shard serving")
        serving = time.monotonic()
        wait_for(lambda: updates() >= updates_at_restart + BUFFERED_UPDATES, 300, "the learner updating again")
        resumed = time.monotonic()
        log = (run.run_dir / "logs" / "replay-0.log").read_text()
        restored = int(re.findall(r"restored (\d+) transitions", log)[-1])
        summary = run.wait(1800)
    finally:
        run.stop()
    return {
        "interval_s": interval_s,
        "held_at_kill": int(held_at_kill),
        "in_last_snapshot": int(in_last_snapshot),
        "restored": restored,
        "restored_of_last_snapshot": restored / in_last_snapshot,
        "restored_of_held": restored / held_at_kill,
        "updates_at_kill": int(updates_at_kill),
        "updates_at_restart": int(updates_at_restart),
        "restart_after_kill_s": restarted - killed,
        "serving_s": serving - restarted,
        "resume_s": resumed - restarted,
        "status": summary["status"],
        "env_steps": summary["env_steps"],
        "eval_return_mean": summary["eval_return_mean"],
        "restarts": summary["restarts"],
        "run_dir": str(Path(run.run_dir).relative_to(RESULTS.parent.parent)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interval", type=float, default=30.0, help="replay.snapshot_interval_s")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    result = {
        "benchmark": "replay_restart",
        "machine": machine(),
        "load_avg_1m_before": os.getloadavg()[0],  # the box is shared: a busy one slows the run and its restart
        **measure(args.interval),
        "load_avg_1m_after": os.getloadavg()[0],
    }
    print(
        f"killed holding {result['held_at_kill']:,} ({result['in_last_snapshot']:,} in the last snapshot), restored "
        f"{result['restored']:,}; the learner updated again {result['resume_s']:.1f} s after the restart "
        f"({result['restart_after_kill_s']:.1f} s after the kill); run {result['status']}, eval return "
        f"{result['eval_return_mean']}",
        flush=True,
    )
    emit(result, args.out)


if __name__ == "__main__":
    main()
