"""Does a run killed outright and resumed learn as well as runs never stopped? Three uninterrupted seeds, and one
more run SIGKILLed whole (launcher and every role, as a power cut) at a seeded random point of its budget, then
continued with `surreal run --resume`.

    python -m bench.resume_learning [--algo ddpg] [--env Pendulum-v1] [--steps 30000] [--seeds 1 2 3]
                                    [--resumed-seed 1] [--kill-seed 39] [--episodes 100] [--out PATH] [overrides ...]
    python -m bench.resume_learning --collect SEED_RUN [SEED_RUN ...] --resumed-run RUN [--episodes 100]

Every run uses the packaged defaults for what a kill loses: the learner checkpoints every 20 metrics rows and at
least every 60 s, a transition replay snapshots every 30 s. The result (the last line, and
bench/results/resume-learning-<algo>-<env>.json unless --out) holds each run's own final eval (eval.json:
`learner.eval_episodes` episodes on seeds that follow the run's seed) and a common one: every run's final policy
(its last checkpoint) on the same `--episodes` episodes, so that the runs are compared on the same initial states
and with less noise (a Pendulum episode's return depends mostly on where it starts). The verdict is whether the
resumed run's common eval lies within the seeds' spread (min to max of theirs). `--collect` does the evaluations
again on finished run folders.

The default task is DDPG on Pendulum-v1 for 30k env steps with 2 actors (the settings of the suite's DDPG
end-to-end tests): cheap, off-policy (so the replay's restore is exercised: an on-policy FIFO holds nothing across
a SIGKILL) and at its plateau by then.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from bench._runs import RESULTS, WatchedRun, emit, kill_whole_run, machine
from surreal.config import read_config
from surreal.config.schema import NOT_IN_RUN_NAME
from surreal.metricsfile import read_metrics
from surreal.policy.load import load_policy
from surreal.run.resume import checkpoint_counters
from surreal.runtime.rollout import evaluate

DEFAULT_OVERRIDES = ["algo.learning_starts=1000", "algo.hidden_sizes=[64,64]", "actor.chunk_steps=32"]
POLL_S = 0.5
KILL_FILE = "kill.json"  # in the killed run's folder: where it was killed, for --collect
COMMON_EVAL_SEED = 2_000_003  # the common evaluation's episodes: no run trained or evaluated on these seeds


def common_eval(run_dir: Path, episodes: int) -> dict:
    """The run's final policy (`load_policy`: its artifact, or its newest checkpoint) on the common episodes."""
    policy = load_policy(run_dir)
    result = evaluate(policy.env_id, policy, episodes, COMMON_EVAL_SEED, policy.env_kwargs).summary()
    return {"env_steps": policy.metadata["env_steps"], **{k: v for k, v in result.items() if v is not None}}


def row(summary: dict) -> dict:
    keys = ("seed", "status", "env_steps", "wall_s", "eval_return_mean", "eval_return_std", "resumed_at_env_steps")
    return {**{k: summary.get(k) for k in keys}, "run_dir": summary.get("run_dir")}


def verdict(seeds: list[dict], resumed: dict, episodes: int) -> dict:
    """Each run's common eval, the seeds' spread of it and of their own evals, and where the resumed run lies."""
    for run in [*seeds, resumed]:
        run["common_eval"] = common_eval(Path(run["run_dir"]), episodes)
    out: dict = {"common_eval_episodes": episodes, "common_eval_seed": COMMON_EVAL_SEED}
    for key, value in (
        ("own", lambda r: r["eval_return_mean"]),
        ("common", lambda r: r["common_eval"]["eval_return_mean"]),
    ):
        finals = [value(s) for s in seeds if value(s) is not None]
        spread = [min(finals), max(finals)] if finals else None
        mine = value(resumed)
        out[f"seeds_spread_{key}"] = spread
        out[f"resumed_within_spread_{key}"] = None if spread is None or mine is None else spread[0] <= mine <= spread[1]
    return out


def killed_and_resumed(
    name: str, overrides: list[str], steps: int, kill_seed: int, root: Path, timeout_s: float
) -> dict:
    """A run killed whole once its env steps pass a point drawn from `kill_seed` (30-70 % of the budget), then
    resumed to its budget."""
    kill_at = int(random.Random(kill_seed).uniform(0.3, 0.7) * steps)
    run = WatchedRun(name, overrides, root)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = read_metrics(run.run_dir / "metrics.jsonl")
        if rows and rows[-1]["env_steps"] >= kill_at:
            break
        if run.proc.poll() is not None:
            raise RuntimeError(f"{name} ended before the kill point {kill_at}")
        time.sleep(POLL_S)
    killed_after_s = time.monotonic() - (deadline - timeout_s)
    last_row = read_metrics(run.run_dir / "metrics.jsonl")[-1]
    kill_whole_run(run.proc.pid)
    run.proc.wait(timeout=30)
    run.console.close()
    counters = checkpoint_counters(run.run_dir)
    snapshots = sorted((run.run_dir / "replay").glob("shard-*/replay-*.snap"))
    killed = {
        "kill_at_env_steps": kill_at,
        "killed_at_row": {k: last_row[k] for k in ("env_steps", "updates")},
        "killed_after_s": round(killed_after_s, 1),
        "checkpoint_at": None if counters is None else {k: counters[k] for k in ("env_steps", "updates")},
        "replay_snapshot_at_kill": snapshots[-1].name if snapshots else None,
    }
    (run.run_dir / KILL_FILE).write_text(json.dumps(killed, indent=2) + "\n")  # for --collect
    resumed = WatchedRun(name, ["--resume", str(run.run_dir)], root)
    return resumed_row(resumed.wait(timeout_s))


def resumed_row(summary: dict) -> dict:
    """The resumed run's row: its summary's, where it was killed (kill.json) and what its replay restored."""
    run_dir = Path(summary["run_dir"])
    restored = [line for line in _log(run_dir, "replay-0").splitlines() if "restored" in line]
    return {**row(summary), **json.loads((run_dir / KILL_FILE).read_text()), "restored": restored}


def _log(run_dir: Path, name: str) -> str:
    try:
        return (run_dir / "logs" / f"{name}.log").read_text(encoding="utf-8")
    except OSError:
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="ddpg")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--resumed-seed", type=int, default=1, help="the seed of the run killed and resumed")
    parser.add_argument("--kill-seed", type=int, default=39, help="draws where in its budget the kill falls")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--runs-root", type=Path, default=RESULTS / "runs")
    parser.add_argument("--episodes", type=int, default=100, help="episodes of the common evaluation")
    parser.add_argument("--collect", nargs="+", type=Path, metavar="SEED_RUN", help="finished seed runs to evaluate")
    parser.add_argument("--resumed-run", type=Path, help="with --collect: the finished resumed run")
    parser.add_argument("--out", type=Path)
    parser.add_argument("overrides", nargs="*", help=f"extra surreal run overrides (default {DEFAULT_OVERRIDES})")
    args = parser.parse_intermixed_args()
    if args.collect:
        if args.resumed_run is None:
            parser.error("--collect needs --resumed-run")
        summaries = [json.loads((d / "summary.json").read_text()) for d in [*args.collect, args.resumed_run]]
        seeds, resumed = [row(s) for s in summaries[:-1]], resumed_row(summaries[-1])
        first = summaries[0]
        result = {
            "benchmark": "resume_learning",
            "algo": first["algo"],
            "env": first["env"],
            "steps": read_config(args.collect[0] / "config.yaml").total_env_steps,
            "actors": first["actors"],
            "machine": machine(),
            "collected_from": [str(d) for d in [*args.collect, args.resumed_run]],
            "seeds": seeds,
            "resumed": resumed,
            **verdict(seeds, resumed, args.episodes),
        }
        emit(
            result,
            args.out or RESULTS / f"resume-learning-{first['algo']}-{NOT_IN_RUN_NAME.sub('-', first['env'])}.json",
        )
        return
    extra = args.overrides or DEFAULT_OVERRIDES
    stamp = time.strftime("%Y%m%d-%H%M%S")
    env_name = NOT_IN_RUN_NAME.sub("-", args.env)
    base = [f"algo={args.algo}", f"env={args.env}", f"steps={args.steps}", f"actors={args.actors}", *extra]
    started = time.monotonic()
    seeds = []
    for seed in args.seeds:
        run = WatchedRun(f"resume-{args.algo}-{env_name}-s{seed}-{stamp}", [*base, f"seed={seed}"], args.runs_root)
        seeds.append(row(run.wait(args.timeout)))
        print(json.dumps(seeds[-1]), flush=True)
    name = f"resume-{args.algo}-{env_name}-s{args.resumed_seed}-killed-{stamp}"
    resumed = killed_and_resumed(
        name, [*base, f"seed={args.resumed_seed}"], args.steps, args.kill_seed, args.runs_root, args.timeout
    )
    print(json.dumps(resumed), flush=True)
    result = {
        "benchmark": "resume_learning",
        "algo": args.algo,
        "env": args.env,
        "steps": args.steps,
        "actors": args.actors,
        "overrides": extra,
        "machine": machine(),
        "seeds": seeds,
        "resumed": resumed,
        **verdict(seeds, resumed, args.episodes),
        "wall_s": round(time.monotonic() - started, 1),
    }
    emit(result, args.out or RESULTS / f"resume-learning-{args.algo}-{env_name}.json")


if __name__ == "__main__":
    main()
