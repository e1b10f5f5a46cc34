"""A prepared run folder's roles as local supervised processes (`surreal run`, `surreal.train(mode="processes")`):
replay shards, ps replicas, the learner and N actors (and, with `topology.inference=central`, the inference workers
the actors send their observations to). The run service (surreal/run/) prepares the folder first.

Every role is started exactly as a pod starts it (`python -m surreal role <name>` plus `SURREAL_*`
variables), on loopback ports the OS hands out. Actors that crash are restarted with backoff; a crashed
learner is restarted with `--resume` from its last checkpoint; replay and ps are restarted on the same
ports (actors and the learner reconnect by themselves), a replay shard with what its last snapshot in
`<run dir>/replay/` held. A run folder can be resumed (`surreal run --resume`, run/resume.py), also once
completed and with a larger budget, so its snapshots stay when the run ends (the result says how much disk
they take). A learner, shard or ps stopped by a signal from outside (a drain, a preemption notice) saves its
state and is started again at once, which counts as no failure; the launcher's own stop gives the learner and
the shards the grace periods below to do so. `chaos.*` kills actors on a schedule (launch/chaos.py) to
rehearse preemption. The run ends when the learner exits after training, on Ctrl-C / SIGTERM, or when a role
exhausts its restarts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from surreal.config import ExperimentConfig
from surreal.launch.chaos import Chaos
from surreal.launch.progress import ProgressView, format_duration
from surreal.launch.supervisor import MAX_RESTARTS, ProcessSpec, Restart, Supervisor
from surreal.proto.curve import CurveKeys
from surreal.roles.common import StopFlag
from surreal.runjson import write_summary
from surreal.runstore import LAUNCHER, Mirror
from surreal.runtime.limits import raise_open_files
from surreal.settings import ReplayEndpoint, Settings, group_env

ROLE_COMMAND = (sys.executable, "-m", "surreal", "role")  # what a pod's container runs
LOOPBACK = "127.0.0.1"
POLL_S = 0.2
# SIGTERM to SIGKILL for a replay shard, which writes its final snapshot first: a full 1 M-transition
# HalfCheetah shard takes 0.85 s on a busy 2-core box (bench/results/replay_snapshot.2core.json), after up to
# 0.65 s for a periodic one in flight; the rest is margin for bigger shards and slower disks. It exits when done.
REPLAY_GRACE_S = 60.0
# SIGTERM to SIGKILL for the learner, which finishes the update it is in and then checkpoints: one update of the
# HalfCheetah defaults takes 0.93 s (PPO) and 0.07 s (DDPG) on a busy 2-core box, PPO's 65,536-sample batch
# 6.3 s there (bench/results/stop_grace.2core.json) and 15-18 s under bench.fleet's load; a checkpoint 0.01 s.
# The supervisor's 5 s killed such a learner before its checkpoint; it exits as soon as it is written.
LEARNER_GRACE_S = 120.0


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on 127.0.0.1. All sockets stay bound until every port is chosen,
    so the OS cannot hand out one port twice."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in socks]


def plan_processes(
    cfg: ExperimentConfig,
    run_dir: Path,
    base_env: Mapping[str, str],
    ipc_dir: Path | None = None,
    resume: bool = False,
    run_uri: str | None = None,
    curve_dir: Path | None = None,
) -> list[ProcessSpec]:
    """The processes of an experiment in start order, each with the environment a pod of its role gets:
    `base_env` plus every SURREAL_* variable (own ports, peers' addresses, config and run folder). With
    `ipc_dir`, the roles talk over Unix sockets there (SURREAL_IPC_DIR): a restarted replay or ps gets its
    address back even if another program took its TCP port meanwhile. `resume`: the learner's first start is
    `--resume` too (a resumed run), not only its restarts. `run_uri`: the run folder's mirror (SURREAL_RUN_URI).
    `curve_dir`: the CURVE keys every role reads (SURREAL_CURVE_DIR); None: plaintext."""
    topo = cfg.topology
    evaluators = 1 if cfg.evaluates_while_training else 0
    replicas = cfg.learner.replicas
    workers = topo.inference_workers if topo.inference == "central" else 0  # inference workers
    processes = topo.replay_shards + topo.ps_replicas + workers + replicas + topo.actors + evaluators
    ports = iter(free_ports(2 * topo.replay_shards + topo.ps_replicas + workers + 2 + processes))
    shards = tuple(ReplayEndpoint(LOOPBACK, next(ports), next(ports)) for _ in range(topo.replay_shards))
    ps_ports = [next(ports) for _ in range(topo.ps_replicas)]
    inference_ports = [next(ports) for _ in range(workers)]
    pub_port = next(ports)
    common = Settings(
        bind_host=LOOPBACK,
        replay=shards,
        learner_addr=f"tcp://{LOOPBACK}:{pub_port}",
        ps_addrs=tuple(f"tcp://{LOOPBACK}:{port}" for port in ps_ports),
        inference_addrs=tuple(f"tcp://{LOOPBACK}:{port}" for port in inference_ports),
        config_path=run_dir / "config.yaml",
        run_dir=run_dir,
        ipc_dir=ipc_dir,
        run_uri=run_uri,
        curve_dir=curve_dir,
    )

    master_port = next(ports)  # the learner group's rendezvous (rank 0's), used when learner.replicas > 1

    def spec(
        role: str,
        index: int,
        restart: Restart,
        resumes: bool = False,
        grace_s: float | None = None,
        group: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        **own: Any,
    ) -> ProcessSpec:
        settings = replace(common, index=index, metrics_port=next(ports), **own)
        argv = [*ROLE_COMMAND, role]
        resume_argv = [*argv, "--resume"] if resumes else None
        return ProcessSpec(
            name=role if role == "learner" and index == 0 else f"{role}-{index}",
            role=role,
            index=index,
            argv=resume_argv if resume and resume_argv else argv,
            env={**base_env, **settings.to_env(), **(extra_env or {}), "PYTHONUNBUFFERED": "1"},
            restart=restart,
            max_restarts=MAX_RESTARTS,
            resume_argv=resume_argv,
            grace_s=grace_s,
            group=group,
        )

    def learner(rank: int) -> ProcessSpec:
        """Rank `rank` of the learner group (alone: the learner), named `learner` for rank 0, `learner-<rank>`
        after; a group's ranks restart together (launch/supervisor.py)."""
        group = replicas > 1
        return spec(
            "learner",
            rank,
            "on-failure",
            resumes=True,
            grace_s=LEARNER_GRACE_S,
            group="learner" if group else None,
            extra_env=group_env(rank, replicas, LOOPBACK, master_port) if group else None,
            params_pub_port=pub_port,
        )

    return [
        *(
            spec(
                "replay",
                i,
                "always",
                grace_s=REPLAY_GRACE_S,
                experience_port=s.experience_port,
                sample_port=s.sample_port,
            )
            for i, s in enumerate(shards)
        ),
        *(spec("ps", i, "always", ps_port=port) for i, port in enumerate(ps_ports)),
        # Central inference (topology.inference=central): stateless like the ps, restarted on the same port.
        *(spec("inference", i, "always", inference_port=port) for i, port in enumerate(inference_ports)),
        *(learner(rank) for rank in range(replicas)),
        *(spec("actor", i, "on-failure") for i in range(topo.actors)),
        *(spec("evaluator", 0, "on-failure") for _ in range(evaluators)),
    ]


def verdict(supervisor: Supervisor, stop: StopFlag, run_dir: Path) -> tuple[str, str | None] | None:
    """(status, reason) once the run is over, else None."""
    if stop:
        assert stop.signal is not None
        return "interrupted", f"{signal.Signals(stop.signal).name} received"
    if supervisor.failed is not None:
        log = run_dir / "logs" / f"{supervisor.failed}.log"
        return "failed", f"{supervisor.failed} exhausted its restarts; see {log}"
    if supervisor.returncode("learner") == 0:
        if (run_dir / "eval.json").exists():
            return "completed", None
        return "failed", "the learner exited before finishing training (no eval.json)"
    return None


def supervise(
    cfg: ExperimentConfig,
    run_dir: Path,
    specs: list[ProcessSpec],
    stop: StopFlag,
    live: bool,
    resumed_at: int | None = None,
) -> dict[str, Any]:
    """Start everything, watch until the run is over, stop everything (also on an exception); returns summary.json
    as written then (its status: completed, interrupted or failed)."""
    supervisor = Supervisor(run_dir / "logs")
    chaos = Chaos(cfg.chaos, run_dir) if cfg.chaos.active else None
    started = time.monotonic()
    view = ProgressView(run_dir / "metrics.jsonl", cfg.total_env_steps, live, resumed_at)
    with supervisor, view as progress:
        for spec in specs:
            supervisor.start(spec)
        while (result := verdict(supervisor, stop, run_dir)) is None:
            time.sleep(POLL_S)
            supervisor.poll()
            if chaos is not None:
                chaos.tick(supervisor, time.monotonic() - started)
            progress.update(supervisor.restarts())
        wall_s = time.monotonic() - started
        status, reason = result
        why = f" ({reason})" if reason else ""
        print(f"[surreal] {status}{why}; stopping all processes", flush=True)
    return write_summary(run_dir, cfg, wall_s, status, supervisor.restarts(), reason, resumed_at)


def launch(
    cfg: ExperimentConfig,
    run_dir: Path,
    live: bool,
    resume: bool = False,
    resumed_at: int | None = None,
    run_uri: str | None = None,
) -> dict[str, Any]:
    """Start every role of `cfg` in `run_dir` (prepared and locked: run/prepare.py), supervise until the run is
    over, write summary.json and print the result; returns the summary. `resume`, `run_uri`: as `plan_processes`
    takes them (the launcher adds the summary and logs to the bucket at the end); `resumed_at`: the env steps of the
    checkpoint it resumes from, for the progress line and summary.json."""
    topo = cfg.topology
    raise_open_files()  # ports for every actor are chosen at once; the roles inherit the raised limit
    print(
        f"[surreal] {cfg.name}: {cfg.algo.name} on {cfg.env.id}, {topo.actors} actor(s) x "
        f"{topo.envs_per_actor} env(s), {topo.replay_shards} replay shard(s), {topo.ps_replicas} ps; "
        f"logs in {run_dir / 'logs'}",
        flush=True,
    )
    # Unix sockets live in a short folder of their own: a socket path must stay under ~100 characters. The launch's
    # CURVE keys live beside them, readable by this user only and gone when the launch ends (`launch_keys`).
    with tempfile.TemporaryDirectory(prefix="surreal-") as private, StopFlag() as stop:
        keys = launch_keys(Path(private))
        specs = plan_processes(cfg, run_dir, os.environ, Path(private), resume=resume, run_uri=run_uri, curve_dir=keys)
        summary = supervise(cfg, run_dir, specs, stop, live, resumed_at)
        if run_uri is not None:
            Mirror.open(run_uri, run_dir, LAUNCHER).push()  # a failure is logged: the run's own parts are there
            summary["run_uri"] = run_uri
        print_result(summary)
    return summary


def launch_keys(private: Path) -> Path:
    """A fresh pair of CURVE keys for one launch (proto/curve.py), in `private` (a folder only this user can open,
    removed when the launch ends); the folder to hand the roles as SURREAL_CURVE_DIR.

    Not in the run folder: that one outlives the run and is copied, shared, and synced to buckets, and a key there
    would travel with it. Not in the roles' environment: a file is what the chart's Secret gives a pod, so a role reads
    its keys one way everywhere. A resumed run gets new keys with its new roles; nothing stored needs the old ones."""
    return CurveKeys.generate().write(private / "curve")


def print_result(summary: dict[str, Any]) -> None:
    lines = [
        f"{summary['status']}: {summary['env_steps']:,} env steps in {format_duration(summary['wall_s'])} "
        f"({summary['env_steps_per_s']:,.0f}/s), {summary['updates']:,} updates",
    ]
    if summary["reason"]:
        lines.append(f"reason: {summary['reason']}")
    if summary["eval_return_mean"] is not None:
        std = summary["eval_return_std"] or 0.0
        line = f"eval return {summary['eval_return_mean']:.1f} +- {std:.1f} over {summary['eval_episodes']} episodes"
        if summary["eval_success_rate"] is not None:
            line += f", success rate {summary['eval_success_rate']:.0%}"
        lines.append(line)
    restarted = {name: n for name, n in summary["restarts"].items() if n}
    if restarted:
        lines.append("restarts: " + ", ".join(f"{name} x{n}" for name, n in restarted.items()))
    snapshots = [p for p in Path(summary["run_dir"], "replay").rglob("*.snap") if p.is_file()]
    if snapshots:
        size = sum(p.stat().st_size for p in snapshots) / 1e6
        lines.append(
            f"replay snapshots kept for `surreal run --resume` ({size:,.1f} MB in {Path(summary['run_dir'], 'replay')})"
        )
    lines.append(f"run folder {summary['run_dir']} (summary.json; `surreal plot {summary['run_dir']}`)")
    if summary.get("run_uri"):
        lines.append(f"mirrored at {summary['run_uri']} (`surreal run --resume {summary['run_uri']}` on any machine)")
    print("\n".join(f"[surreal] {line}" for line in lines), flush=True)
