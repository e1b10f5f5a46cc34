"""Work lost to faults: the learner, the replay shard, or everything SIGKILLed at random times in a local run,
against the same run without faults, measured in one invocation.

    python -m bench.work_lost [--seconds 110] [--events 2] [--seed 0] [--out bench/results/work_lost.json]

DDPG on Pendulum-v1 (the off-policy end-to-end settings of tests/test_local_run.py: 64-64 networks, 2 actors,
one uniform shard; checkpoints and snapshots at their defaults, every 60 s and 30 s), one run per scenario, each
`--seconds` of wall time from the launcher's start:

- `none`, first and again last: no faults, the baseline (their mean); `noise_env_steps` and `noise_updates`
  are how far the two differ, what a loss per event must exceed to mean anything on the box it ran on;
- `learner`: the learner SIGKILLed `--events` times (it resumes from its newest checkpoint);
- `replay`: the replay shard SIGKILLed (it restores its newest snapshot);
- `all`: learner, replay shard and ps SIGKILLed together (a whole node lost).

Kill times are drawn from a seeded generator, one uniformly inside each of `--events` equal slots of the window
between `--warmup` seconds and 20 s before the end (so events never overlap a restart). Reported per scenario:

- `env_steps_lost_per_event`, `updates_lost_per_event`: (baseline's - this run's) env steps and updates at the
  end of the same wall time, divided by the events: everything a fault costs (the rollback, the restart, the
  learner held by its replay ratio while a shard refills). A loaded box's run-to-run noise is in these too;
- per event, what the logs and /metrics show: `updates_rolled_back` (the learner's `learner_updates` at the kill
  minus the update it resumed at) and `transitions_dropped` (the shard's `replay_size` at the kill minus what it
  restored).

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import time
from pathlib import Path
from typing import Any

from bench._runs import RESULTS, WatchedRun, emit, machine_at_end
from bench.replay_restart import DDPG_PENDULUM, gauge, role_process

SCENARIOS: dict[str, tuple[str, ...]] = {
    "none": (),
    "learner": ("learner",),
    "replay": ("replay",),
    "all": ("learner", "replay", "ps"),
    "none_again": (),  # the baseline once more, last: how far two runs without faults differ on this box
}
TAIL_S = 20.0  # no kill in the last seconds of a run: its restart must be inside the measured window
POLL_S = 0.1


def kill_times(seconds: float, warmup_s: float, events: int, rng: random.Random) -> list[float]:
    """One time drawn uniformly in each of `events` equal slots of [warmup_s, seconds - TAIL_S]."""
    slot = (seconds - TAIL_S - warmup_s) / events
    return [warmup_s + i * slot + rng.uniform(0.0, slot) for i in range(events)]


def snapshot_of_roles(run: WatchedRun, roles: tuple[str, ...]) -> dict[str, Any]:
    """What the roles about to be killed hold: the learner's counters, the shard's size."""
    state: dict[str, Any] = {}
    for role in roles:
        process = role_process(run, role)
        if process is None:
            continue
        port = int(process.environ()["SURREAL_METRICS_PORT"])
        if role == "learner":
            state["updates"] = gauge(port, "surreal_learner_updates")
        if role == "replay":
            state["replay_size"] = gauge(port, "surreal_replay_size")
    return state


def kill(run: WatchedRun, roles: tuple[str, ...]) -> None:
    """SIGKILL every one of `roles` running now, one right after the other."""
    processes = [p for role in roles if (p := role_process(run, role)) is not None]
    for process in processes:
        process.send_signal(signal.SIGKILL)


def per_event(run: WatchedRun, held: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Event i's rollback: the i-th resume and restore after the start, from the roles' logs."""
    logs = run.run_dir / "logs"
    learner_log = (logs / "learner.log").read_text() if (logs / "learner.log").exists() else ""
    replay_log = (logs / "replay-0.log").read_text() if (logs / "replay-0.log").exists() else ""
    resumed = [int(u) for u in re.findall(r"resumed at update (\d+),", learner_log)]
    restored = [int(n) for n in re.findall(r"restored (\d+) transitions", replay_log)]
    events = []
    for i, before in enumerate(held):
        event: dict[str, Any] = {"at_s": round(before["at_s"], 1)}
        if "updates" in before and i < len(resumed):
            event["updates_rolled_back"] = int(before["updates"]) - resumed[i]
        if "replay_size" in before:
            event["transitions_dropped"] = int(before["replay_size"]) - (restored[i] if i < len(restored) else 0)
        events.append(event)
    return events


def measure(name: str, roles: tuple[str, ...], times: list[float], seconds: float) -> dict[str, Any]:
    run = WatchedRun(f"work-lost-{name}-{int(time.time())}", [*DDPG_PENDULUM, "steps=100000000"], RESULTS / "runs")
    started = time.monotonic()
    pending = sorted(times) if roles else []
    held: list[dict[str, Any]] = []
    try:
        while (elapsed := time.monotonic() - started) < seconds and run.proc.poll() is None:
            run.poll()
            if pending and elapsed >= pending[0]:
                pending.pop(0)
                before = snapshot_of_roles(run, roles)
                kill(run, roles)
                held.append({**before, "at_s": elapsed})
            time.sleep(POLL_S)
        run.poll()
    finally:
        run.stop()
    last = run.rows[-1][1] if run.rows else {"env_steps": 0, "updates": 0}
    return {
        "env_steps": last["env_steps"],
        "updates": last["updates"],
        "events": len(held),
        "per_event": per_event(run, held),
        "run_dir": str(Path(run.run_dir).relative_to(RESULTS.parent.parent)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=110.0, help="wall time of each run")
    parser.add_argument("--events", type=int, default=2, help="kills per faulty run")
    parser.add_argument("--warmup", type=float, default=30.0, help="no kill before this many seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    results: dict[str, Any] = {}
    for name, roles in SCENARIOS.items():
        times = kill_times(args.seconds, args.warmup, args.events, rng) if roles else []
        results[name] = measure(name, roles, times, args.seconds)
        print(name, results[name], flush=True)
    baselines = [results["none"], results["none_again"]]
    base = {key: sum(b[key] for b in baselines) / 2 for key in ("env_steps", "updates")}
    noise = {f"noise_{key}": abs(baselines[0][key] - baselines[1][key]) for key in ("env_steps", "updates")}
    for got in results.values():
        if got["events"]:
            got["env_steps_lost_per_event"] = round((base["env_steps"] - got["env_steps"]) / got["events"])
            got["updates_lost_per_event"] = round((base["updates"] - got["updates"]) / got["events"])
    emit(
        {
            "bench": "work_lost",
            "config": "DDPG Pendulum-v1, 2 actors, 64-64 networks; checkpoints every 60 s, snapshots every 30 s",
            "seconds": args.seconds,
            "seed": args.seed,
            "machine": machine_at_end(),
            **noise,
            **results,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
