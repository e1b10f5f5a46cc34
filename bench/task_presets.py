"""A task entry's claim measured as a user gets it (surreal/conf/tasks.yaml: the tuned defaults per env and algorithm).

    python -m bench.task_presets Pendulum-v1 sac [--seeds 1 2 3] [--jobs 1] [--timeout S] [--runs-root DIR] [--out PATH]

Runs exactly `surreal run --multirun seed=1,2,3 env=ENV algo=ALGO --jobs N`: nothing else is set, so every value is
the task entry's or the package's. It times the whole sweep on the wall clock and writes
bench/results/task-<algo>-<env>.<N>core.json (or `--out`): the command, the machine and its load average at the start
and the end (other work on the box slows the sweep, not its learning), the sweep's wall time, one row per member with
bench.learning's fields (eval return, env steps, wall time, the evaluator's curve), and the value of every key the
entry sets as the members' config.yaml resolved it. tests/test_tasks.py holds the registry's claims to these files.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench._runs import RESULTS, emit
from bench.learning import REFERENCES, collect_row, learning_result
from surreal.config import read_config
from surreal.config.schema import NOT_IN_RUN_NAME
from surreal.config.tasks import task_for


def default_out(algo: str, env: str) -> Path:
    return RESULTS / f"task-{algo}-{NOT_IN_RUN_NAME.sub('-', env)}.{os.cpu_count()}core.json"


def value_at(cfg: Any, key: str) -> Any:
    """The value of a dotted key in a config (`env.kwargs.K` included)."""
    node = cfg
    for part in key.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env")
    parser.add_argument("algo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds for the whole sweep")
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs", help="where the sweep folder goes")
    parser.add_argument("--out", type=Path, help="write the JSON object to this file")
    args = parser.parse_args()
    task = task_for(args.env, args.algo)
    if task is None:
        parser.error(f"no task entry for {args.env}/{args.algo} in surreal/conf/tasks.yaml")
    sweep = f"task-{args.algo}-{NOT_IN_RUN_NAME.sub('-', args.env)}-{time.strftime('%Y%m%d-%H%M%S')}"
    command = ["--multirun", f"seed={','.join(map(str, args.seeds))}", f"env={args.env}", f"algo={args.algo}"]
    command += ["--jobs", str(args.jobs)]
    args.runs_root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SURREAL_RUNS_ROOT": str(args.runs_root), "PYTHONUNBUFFERED": "1"}
    load_start = os.getloadavg()[0]
    started = time.monotonic()
    with open(args.runs_root / f"{sweep}.console.log", "wb") as console:
        done = subprocess.run(
            [sys.executable, "-m", "surreal", "run", *command, f"name={sweep}", "--no-progress"],
            env=env,
            stdout=console,
            stderr=subprocess.STDOUT,
            timeout=args.timeout,
            check=False,
        )
    wall_s = time.monotonic() - started
    sweep_dir = args.runs_root / sweep
    members = sorted(p for p in sweep_dir.iterdir() if (p / "summary.json").exists())
    rows, values = [], []
    for run_dir in members:
        summary = json.loads((run_dir / "summary.json").read_text())
        rows.append(collect_row(run_dir, summary, REFERENCES.get(args.algo, {}).get(args.env, {})))
        cfg = read_config(run_dir / "config.yaml")
        values.append({key: value_at(cfg, key) for key in task.values})
    if not rows or any(v != values[0] for v in values):
        sys.exit(f"the sweep's members did not all run with one set of the task's values: {values}")
    cfg = read_config(members[0] / "config.yaml")
    result = {
        **learning_result(args.algo, args.env, cfg.total_env_steps, cfg.topology.actors, [], rows),
        "benchmark": "task_presets",
        "command": f"surreal run {' '.join(command)}",
        "exit_code": done.returncode,
        "load_average": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
        "sweep_wall_s": round(wall_s, 1),
        "task_values": values[0],
        "claim": {"metric": task.claim.metric, "at_least": task.claim.at_least},
    }
    emit(result, args.out or default_out(args.algo, args.env))


if __name__ == "__main__":
    main()
