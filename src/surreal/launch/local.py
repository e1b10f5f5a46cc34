"""`surreal run`: replay shards, ps replicas, the learner and N actors as local supervised processes.

Every role is started exactly as a pod starts it (`python -m surreal role <name>` plus `SURREAL_*`
variables), on loopback ports the OS hands out. Actors that crash are restarted with backoff; a crashed
learner is restarted with `--resume` from its last checkpoint; replay and ps are restarted on the same
ports (actors and the learner reconnect by themselves). The run ends when the learner exits after
training, on Ctrl-C / SIGTERM, or when a role exhausts its restarts.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

from surreal.config import ConfigError, ExperimentConfig, load_config
from surreal.launch.progress import ProgressView
from surreal.launch.runfolder import create_run_folder, write_summary
from surreal.launch.supervisor import ProcessSpec, Supervisor
from surreal.settings import ReplayEndpoint, Settings

POLL_S = 0.2
ACTOR_MAX_RESTARTS = 5
SERVICE_MAX_RESTARTS = 5
LEARNER_MAX_RESTARTS = 3


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plan_processes(cfg: ExperimentConfig, run_dir: Path, base_env: dict[str, str]) -> list[ProcessSpec]:
    """The processes of an experiment, each with its SURREAL_* environment (a pod's, on loopback)."""
    shards = [ReplayEndpoint("127.0.0.1", free_port(), free_port()) for _ in range(cfg.topology.replay_shards)]
    ps_ports = [free_port() for _ in range(cfg.topology.ps_replicas)]
    common = Settings(
        replay=tuple(shards),
        learner_addr=f"tcp://127.0.0.1:{free_port()}",
        ps_addrs=tuple(f"tcp://127.0.0.1:{port}" for port in ps_ports),
        config_path=run_dir / "config.yaml",
        run_dir=run_dir,
    )
    params_pub_port = int(common.learner_addr.rsplit(":", 1)[1])
    role = [sys.executable, "-m", "surreal", "role"]

    def spec(name: str, argv: list[str], restart: str, max_restarts: int, **settings) -> ProcessSpec:
        env = {**base_env, **Settings(**{**common.__dict__, "metrics_port": free_port(), **settings}).to_env(),
               "PYTHONUNBUFFERED": "1"}
        return ProcessSpec(name, argv, env, restart, max_restarts)

    specs = [
        spec(f"replay-{i}", [*role, "replay"], "always", SERVICE_MAX_RESTARTS, index=i,
             experience_port=shard.experience_port, sample_port=shard.sample_port)
        for i, shard in enumerate(shards)
    ]
    specs += [spec(f"ps-{i}", [*role, "ps"], "always", SERVICE_MAX_RESTARTS, index=i, ps_port=port)
              for i, port in enumerate(ps_ports)]
    learner = spec("learner", [*role, "learner"], "on-failure", LEARNER_MAX_RESTARTS, params_pub_port=params_pub_port)
    learner.resume_argv = [*role, "learner", "--resume"]
    specs.append(learner)
    specs += [spec(f"actor-{i}", [*role, "actor"], "on-failure", ACTOR_MAX_RESTARTS, index=i)
              for i in range(cfg.topology.actors)]
    return specs


def stop_order(specs: list[ProcessSpec]) -> list[str]:
    """Actors first (they feed everything), then the learner (it checkpoints on SIGTERM), then services."""
    names = [s.name for s in specs]
    return [n for n in names if n.startswith("actor-")] + ["learner"] + [n for n in names if n.startswith("ps-")] + [
        n for n in names if n.startswith("replay-")
    ]


def run_experiment(overrides: list[str], live: bool = True) -> int:
    """Exit code: 0 completed, 1 failed, 2 bad config, 130 interrupted."""
    try:
        cfg = load_config(overrides)
        run_dir, cfg = create_run_folder(cfg)
    except (ConfigError, FileExistsError) as exc:
        print(f"surreal: {exc}", file=sys.stderr)
        return 2

    interrupted = False

    def on_signal(signum: int, _frame) -> None:
        nonlocal interrupted
        interrupted = True

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    specs = plan_processes(cfg, run_dir, dict(os.environ))
    supervisor = Supervisor(run_dir / "logs")
    progress = ProgressView(run_dir / "metrics.jsonl", cfg.total_env_steps, live)
    print(f"[surreal] {cfg.algo.name} on {cfg.env.id}: {cfg.topology.actors} actors x {cfg.topology.envs_per_actor} "
          f"envs, {cfg.topology.replay_shards} replay shard(s), {cfg.topology.ps_replicas} ps; run folder {run_dir}",
          flush=True)
    started = time.monotonic()
    status = "failed"
    try:
        for spec in specs:
            supervisor.start(spec)
        while True:
            supervisor.poll()
            progress.update(supervisor.restarts())
            if interrupted:
                status = "interrupted"
                break
            if supervisor.failed is not None:
                status = "failed"
                break
            if supervisor.exited("learner") == 0:
                status = "completed"
                break
            time.sleep(POLL_S)
    finally:
        supervisor.stop(stop_order(specs))
        progress.update(supervisor.restarts())
        progress.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    summary = write_summary(run_dir, cfg, time.monotonic() - started, status, supervisor.restarts())
    eval_return = summary["eval_return_mean"]
    print(
        f"[surreal] {status}: {summary['env_steps']:,} env steps in {summary['wall_s']:.0f} s "
        f"({summary['env_steps_per_s']:,.0f}/s), eval return "
        f"{'-' if eval_return is None else f'{eval_return:.1f}'}; {run_dir}/summary.json",
        flush=True,
    )
    return {"completed": 0, "interrupted": 130}.get(status, 1)
