"""Fleet scale: N simulated actors (1 ... 1,024 and beyond) against the real replay shards, ps replicas and learner.

    python -m bench.fleet --algo ppo|ddpg --actors N [N ...] --seconds S [--network none|datacenter|degraded]
                          [--rate STEPS_PER_S] [--processes P] [--chunk-steps T] [--curve on|off] [--set KEY=VALUE ...]

For each N the services start exactly as `surreal run` starts them (`plan_processes`, `python -m surreal role X`
with SURREAL_* variables, Unix sockets in a folder of their own, a `Supervisor` restarting what crashes), and P
processes (bench/fleet_actors.py, P = min(N, 4) by default) simulate the N actors, each a full peer: its own
sockets, the real wire format with chunks cut from a recorded HalfCheetah-v5 rollout, the real actor side of flow
control and fetch cadence, at `--rate` env steps/s (default: the recording's, one actor on one core of this box).
After a warm-up (every actor has sent a chunk, then the learner has written two more rows) S seconds are
measured, then everything stops as `surreal run` stops it: actors first (SIGTERM: they flush), then learner, ps
and replay. PPO learns from batches of 2,048 steps at every N (from 64 actors on, the actors outnumber a batch's
32 chunks: each sends a chunk on its turn, every N / 32 versions); DDPG runs at replay ratio 0.1 from 5,000 env
steps; `--set` overrides any config key.

Every connection is over CURVE with keys made for the run (`--curve on`, the default, as `surreal run` and the
chart run) or plaintext (`--curve off`); `handshakes_refused` should be 0 (every simulated actor holds the keys).
`--network datacenter|degraded` runs the fleet in a network namespace of its own, over TCP to the services on the
box's end of a veth pair shaped by tc (bench/netem.py: 0.1 ms each way and 10 Gbit/s; 1 ms, 1 Gbit/s and 0.1 %
loss); `none` (the default) uses Unix sockets as `surreal run` does. The results file keeps each network's results
beside the others (`networks.<profile>.<algo>`).

Per N: env steps/s accepted (the learner's count), learner updates/s and its wait share (1 - (update + io) / wall,
from `surreal_learner_seconds_total`: its time spent on anything but updating), version lag and staleness drops,
ps fetch p50/p99 as the actors see them for two kinds of answer: at once (request to answer: `ps_fetch_at_once_*`)
and a held fetch answered by a new blob (from that blob's first arrival in the actor's process to this actor's:
`ps_fanout_*`, the ps's fan-out of a version to the actors it wakes; the hold itself waits for the learner, not
the ps), replay ingest and egress where they happen (`surreal_replay_transitions_{in,out}_total`), CPU (cores)
and peak RSS of every service and of the fleet, open descriptors and sockets of every service, drops by reason
on every role and actor (`honest_dropped`: all of them plus chunks lost on stop; 0 expected), FIFO evictions,
restarts, the live-actor count the learner published (`live_actors_min` / `_max` over the window's rows) and
whether the run ended cleanly (every process exited 0, nothing left running).

`slow_fetches` says what the fetches slower than 50 ms (issue #23's p99 bound) had in common (bench/fleet_trace.py):
how many overlapped a busy turn or late wake-up of their own process's event loop, one of its garbage collections,
or a replay snapshot, how many none of these, and every process's CPU and run-queue wait and the box's pressure
stalls in the seconds that held a slow fetch against the others. The raw events and samples go to the run
folder's trace.json (kept with `--workdir`).

**Bottleneck** (one name per N, the first rule that holds): `learner` when its wait share is under 0.1 (it
updates all the time: the actors wait for it); else the service using the most CPU if at least 0.9 of a core
(`replay-0`, `ps-0`, ...); else `fleet` if a simulated-actor process uses 0.9 of a core (the simulation, not the
system, is the limit); else `machine` if the box's cores are 90% busy (other programs on a shared box included:
`others_busy_cores` says how much was theirs); else `actors` (the fleet's own pacing: it sends everything its rate
allows and the services keep up).

The last line printed is one JSON object; results are also merged into bench/results/fleet.<cores>core.json (one
key per algorithm) with a PNG of throughput against N beside it, the bottleneck named at every point.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench._runs import RESULTS, machine
from bench.fleet_actors import HIST_BINS, hist_percentile
from bench.fleet_trace import Timeline, explain, pressure_totals, run_queue_wait_s
from bench.netem import PROFILES, Link, emulated_network
from bench.rollouts import load as load_rollout
from surreal.config import ExperimentConfig, load_config, save_config
from surreal.launch.local import LOOPBACK, launch_keys, plan_processes
from surreal.launch.supervisor import ProcessSpec, Supervisor
from surreal.metricsfile import METRICS_FILE, MetricsTail
from surreal.roles.common import EXIT_STOPPED
from surreal.runtime.limits import raise_open_files

REPO = Path(__file__).resolve().parents[1]
SAMPLE_S = 1.0
STOP_GRACE_S = 15.0  # a simulated actor's flush: its chunk's steps, SEND_TIMEOUT_S and FLUSH_S
# The learner stops after the update it is in: a PPO batch of N x chunk steps can take longer than `surreal run`'s
# 5 s on a busy 2-core box (bench.fleet then reports `services_stop_s`).
SERVICE_GRACE_S = 120.0
WAIT_SHARE_BUSY = 0.1
WARMUP_ROWS = 2  # learner rows after every actor has sent, before the window opens
CORE_BUSY = 0.9


def config_overrides(algo: str, actors: int, chunk_steps: int) -> list[str]:
    common = [
        "env=HalfCheetah-v5",
        f"actors={actors}",
        "topology.envs_per_actor=1",
        "device=cpu",
        f"actor.chunk_steps={chunk_steps}",
        "steps=1000000000",
        "learner.checkpoint_interval=1000000",
        "learner.checkpoint_interval_s=100000",
        "learner.eval_interval=0",  # the services alone: no evaluator beside them (on by default since 25,000)
    ]
    if algo == "ppo":
        batch = 2048
        return [
            "algo=ppo",
            *common,
            f"algo.batch_size={batch}",
            f"algo.minibatch_size={max(64, batch // 32)}",
            f"replay.capacity={4 * batch}",
        ]
    return ["algo=ddpg", *common, "algo.learning_starts=5000", "algo.replay_ratio=0.1"]


# -- reading the processes ---------------------------------------------------------------------------------


def scrape(host: str, port: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A role's /metrics as {(sample name, labels other than role/index): value}; {} when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("role", "index")))
            out[(s.name, labels)] = s.value
    return out


def total(metrics: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in metrics.items() if n == name and want <= set(lab))


def by_label(metrics: dict, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for (n, lab), v in metrics.items():
        if n == name:
            out[dict(lab).get(label, "")] += v
    return dict(out)


def our_processes() -> dict[str, psutil.Process]:
    """The roles and simulated-actor processes this benchmark started, by name (replay-0, ps-0, learner, fleet-0)."""
    found: dict[str, psutil.Process] = {}
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmd = proc.cmdline()
            if "role" in cmd and "surreal" in cmd:
                role = cmd[cmd.index("role") + 1]
                found[role if role == "learner" else f"{role}-{proc.environ().get('SURREAL_INDEX', '0')}"] = proc
            elif "bench.fleet_actors" in cmd:
                found[f"fleet-{cmd[cmd.index('--process') + 1]}"] = proc
    return found


class Usage:
    """CPU seconds, peak RSS, peak open descriptors and sockets of every process, sampled."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.rss: dict[str, int] = defaultdict(int)
        self.fds: dict[str, int] = defaultdict(int)
        self.sockets: dict[str, int] = defaultdict(int)

    def sample(self, procs: dict[str, psutil.Process], sockets: bool = False) -> dict[str, float]:
        cpu = {}
        for name, proc in procs.items():
            with contextlib.suppress(psutil.Error):
                with proc.oneshot():
                    t = proc.cpu_times()
                    cpu[name] = t.user + t.system
                    self.rss[name] = max(self.rss[name], proc.memory_info().rss)
                    self.fds[name] = max(self.fds[name], proc.num_fds())
                if sockets:
                    self.sockets[name] = max(self.sockets[name], len(proc.net_connections(kind="all")))
        return cpu


def fleet_stats(folder: Path) -> list[dict[str, Any]]:
    stats = []
    for path in sorted(folder.glob("fleet-*.json")):
        with contextlib.suppress(OSError, ValueError):
            stats.append(json.loads(path.read_text()))
    return stats


def summed(stats: list[dict[str, Any]], key: str) -> float:
    return float(sum(s["counters"].get(key, 0) for s in stats))


# -- one point ----------------------------------------------------------------------------------------------


def run_point(args: argparse.Namespace, actors: int, rate: float, link: Link | None, workdir: Path) -> dict[str, Any]:
    """One N, with main's options. With `link`, over TCP: the services bind the box's end of the emulated network
    and the fleet runs in its namespace; without, as `surreal run` runs (Unix sockets in a folder of their own).
    `--curve on`: every connection over CURVE, with keys made for this point in that private folder (as `surreal
    run` makes them)."""
    algo, curve = args.algo, args.curve == "on"
    cfg = load_config([*config_overrides(algo, actors, args.chunk_steps), *args.set], tasks=False)
    cfg = replace(cfg, name=f"fleet-{algo}-{actors}")
    run_dir = workdir / f"{algo}-{actors}"
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    fleet_dir = run_dir / "fleet"
    fleet_dir.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="surreal-") as sockets:
        # One actor's spec is enough: its environment is what every simulated actor gets (no port per actor).
        one_actor = replace(cfg, topology=replace(cfg.topology, actors=1))
        keys = launch_keys(Path(sockets)) if curve else None
        specs = plan_processes(one_actor, run_dir, env, None if link else Path(sockets), curve_dir=keys)
        if link is not None:
            specs = [replace(s, env=on_host(s.env, link, s.role == "actor")) for s in specs]
        services = [s for s in specs if s.role != "actor"]
        actor_env = next(s for s in specs if s.role == "actor").env
        processes = args.processes or min(actors, 4)
        fleet = fleet_specs(actors, processes, rate, link, actor_env, fleet_dir)
        host = link.host if link else LOOPBACK
        point = measure(cfg, run_dir, fleet_dir, services, fleet, args.seconds, started, host)
    point["curve"] = curve
    point["left_behind"] = [p.pid for p in psutil.Process().children(recursive=True)]
    point["sockets_folder_removed"] = not Path(sockets).exists()
    point["clean"] = point["clean"] and not point["left_behind"] and point["sockets_folder_removed"]
    return point


def on_host(env: dict[str, str], link: Link, in_fleet: bool) -> dict[str, str]:
    """A role's environment with the services' addresses on the box's end of `link` instead of the loopback (TCP,
    as in a cluster); what the fleet itself binds is on its own end."""
    peers = ("SURREAL_REPLAY_ADDRS", "SURREAL_LEARNER_ADDR", "SURREAL_PS_ADDRS")
    out = {k: v.replace(LOOPBACK, link.host) if k in peers else v for k, v in env.items()}
    return {**out, "SURREAL_BIND_HOST": link.peer if in_fleet else link.host}


def fleet_specs(
    actors: int, processes: int, rate: float, link: Link | None, actor_env: dict[str, str], folder: Path
) -> list[ProcessSpec]:
    specs, first = [], 0
    for p in range(processes):
        count = actors // processes + (1 if p < actors % processes else 0)
        argv = [
            *(link.exec_prefix if link else []),
            sys.executable,
            "-m",
            "bench.fleet_actors",
            "--process",
            str(p),
            "--first",
            str(first),
            "--count",
            str(count),
            "--rate",
            str(rate),
            "--stats",
            str(folder / f"fleet-{p}.json"),
            "--delay-ms",
            str(link.fleet_delay_ms if link else 0.0),
        ]
        specs.append(ProcessSpec(f"fleet-{p}", "actor", p, argv, actor_env, restart="never"))
        first += count
    return specs


def measure(
    cfg: ExperimentConfig,
    run_dir: Path,
    fleet_dir: Path,
    services: list[ProcessSpec],
    fleet: list[ProcessSpec],
    seconds: float,
    started: float,
    host: str,
) -> dict[str, Any]:
    actors = cfg.topology.actors
    ports = {s.name: s.env["SURREAL_METRICS_PORT"] for s in services}
    rows_tail = MetricsTail(run_dir / METRICS_FILE)
    rows: list[tuple[float, dict[str, Any]]] = []
    usage = Usage()
    service_sup = Supervisor(run_dir / "logs", grace_s=SERVICE_GRACE_S)
    fleet_sup = Supervisor(run_dir / "logs", grace_s=STOP_GRACE_S)
    point: dict[str, Any] = {"actors": actors, "processes": len(fleet)}
    warmup_limit = 120.0 + 0.1 * actors  # only catches a hang
    with service_sup, fleet_sup:
        for spec in services:
            service_sup.start(spec)
        for spec in fleet:
            fleet_sup.start(spec)

        def tick() -> None:
            service_sup.poll()
            fleet_sup.poll()
            rows.extend((time.monotonic(), row) for row in rows_tail.read() if row.get("updates"))  # not the warm-up's
            if service_sup.failed or fleet_sup.failed:
                raise RuntimeError(f"{service_sup.failed or fleet_sup.failed} failed; logs in {run_dir / 'logs'}")

        # Warm-up: every actor has sent a chunk, then the learner has written WARMUP_ROWS more rows (the live-actor
        # count looks back LIVE_ROUNDS versions: rows from the fleet's first seconds still miss late starters).
        ready, rows_when_all_sent = False, None
        while time.monotonic() - started < warmup_limit:
            tick()
            if rows_when_all_sent is None and sum(s["have_sent"] for s in fleet_stats(fleet_dir)) >= actors:
                rows_when_all_sent = len(rows)
            ready = rows_when_all_sent is not None and len(rows) >= rows_when_all_sent + WARMUP_ROWS
            if ready:
                break
            time.sleep(0.5)
        point["warmup_s"] = round(time.monotonic() - started, 1)
        point["warmup_complete"] = ready
        for p in range(len(fleet)):
            (fleet_dir / f"fleet-{p}.measure").touch()
        time.sleep(SAMPLE_S * 1.5)  # the fleet notices within a second
        procs = our_processes()
        t0 = time.monotonic()
        first = {name: scrape(host, port) for name, port in ports.items()}
        cpu0 = usage.sample(procs, sockets=True)
        machine0 = psutil.cpu_times()
        load0 = os.getloadavg()
        f0 = fleet_stats(fleet_dir)
        timeline = Timeline()
        replay_ports = {r: ports[r] for r in ports if r.startswith("replay")}
        timeline.add(t0, trace_sample(cpu0, procs, host, replay_ports))
        while time.monotonic() - t0 < seconds:
            time.sleep(SAMPLE_S)
            tick()
            procs = our_processes()
            cpu = usage.sample(procs, sockets=time.monotonic() - t0 > seconds / 2 and not usage.sockets.get("learner"))
            timeline.add(time.monotonic(), trace_sample(cpu, procs, host, replay_ports))
        t1 = time.monotonic()
        last = {name: scrape(host, port) for name, port in ports.items()}
        cpu1 = usage.sample(procs, sockets=True)
        machine1 = psutil.cpu_times()
        load1 = os.getloadavg()
        f1 = fleet_stats(fleet_dir)
        wall = t1 - t0
        window_rows = [row for t, row in rows if t0 <= t <= t1] or [row for _, row in rows[-1:]]
        stopping = time.monotonic()
        fleet_sup.stop()
        point["fleet_stop_s"] = round(time.monotonic() - stopping, 2)
        tick_after = fleet_stats(fleet_dir)
        ended = {name: scrape(host, port) for name, port in ports.items()}  # drops counted up to the fleet's exit
        stopping = time.monotonic()
        service_sup.stop()
        point["services_stop_s"] = round(time.monotonic() - stopping, 2)
        exit_codes = {s.name: service_sup.returncode(s.name) for s in services}
        exit_codes.update({s.name: fleet_sup.returncode(s.name) for s in fleet})
        restarts = sum(service_sup.restarts().values()) + sum(fleet_sup.restarts().values())

    def delta(name: str, metric: str, **labels: str) -> float:
        return total(last[name], metric, **labels) - total(first[name], metric, **labels)

    def fleet_delta(key: str) -> float:
        return summed(f1, key) - summed(f0, key)

    replays = [s.name for s in services if s.role == "replay"]
    pss = [s.name for s in services if s.role == "ps"]
    phases = {p: delta("learner", "surreal_learner_seconds_total", phase=p) for p in ("update", "wait", "io")}
    wait_share = max(0.0, 1.0 - (phases["update"] + phases["io"]) / wall)
    updates = delta("learner", "surreal_learner_updates")
    cores = {name: round((cpu1[name] - cpu0[name]) / wall, 3) for name in cpu1 if name in cpu0}
    hist = np.sum([s["fetch_hist"] for s in f1] or [np.zeros(HIST_BINS)], axis=0)
    fanout = np.sum([s["fanout_hist"] for s in f1] or [np.zeros(HIST_BINS)], axis=0)
    drops = {name: r for name in ports if (r := by_label(ended[name], "surreal_messages_dropped_total", "reason"))}
    fleet_drops: dict[str, float] = defaultdict(float)
    for s in tick_after:
        for reason, n in s["dropped"].items():
            fleet_drops[reason] += n
    if fleet_drops:
        drops["fleet"] = dict(fleet_drops)
    refused = {name: total(ended[name], "surreal_handshakes_refused_total") for name in ports}
    lost_on_stop = summed(tick_after, "lost_on_stop")
    traces = {f"fleet-pid-{s['pid']}": s["trace"] for s in tick_after if "trace" in s}
    (run_dir / "trace.json").write_text(json.dumps({"fleet": traces, "timeline": timeline.samples}))
    lags = [row["version_lag_mean"] for row in window_rows if "version_lag_mean" in row]
    live = [row["live_actors"] for row in window_rows if row.get("live_actors") is not None]
    idle = lambda t: t.idle + getattr(t, "iowait", 0.0)  # noqa: E731
    machine_busy = (sum(machine1) - sum(machine0) - idle(machine1) + idle(machine0)) / wall
    point.update(
        {
            "seconds": round(wall, 1),
            "env_steps_per_s": round(delta("learner", "surreal_learner_env_steps") / wall, 1),
            "env_steps_sent_per_s": round(fleet_delta("env_steps_sent") / wall, 1),
            "env_steps_total": total(ended["learner"], "surreal_learner_env_steps"),
            "learner_updates_per_s": round(updates / wall, 3),
            "learner_wait_share": round(wait_share, 3),
            "learner_phase_s": {k: round(v, 2) for k, v in phases.items()},
            "version_lag_mean": round(float(np.mean(lags)), 3) if lags else None,
            "stale_dropped": delta("learner", "surreal_learner_stale_dropped"),
            "live_actors_min": min(live) if live else None,
            "live_actors_max": max(live) if live else None,
            "learner_update_s": round(phases["update"] / updates, 3) if updates else None,
            "learner_rows": len(window_rows),
            "ps_fetch_p50_ms": _round(hist_percentile(hist + fanout, 50)),
            "ps_fetch_p99_ms": _round(hist_percentile(hist + fanout, 99)),
            "ps_fetch_at_once_p50_ms": _round(hist_percentile(hist, 50)),
            "ps_fetch_at_once_p99_ms": _round(hist_percentile(hist, 99)),
            "ps_fanout_p50_ms": _round(hist_percentile(fanout, 50)),
            "ps_fanout_p99_ms": _round(hist_percentile(fanout, 99)),
            "ps_fetches_per_s": round(fleet_delta("fetches") / wall, 1),
            "ps_held_fetches_per_s": round(fleet_delta("held_fetches") / wall, 1),
            "ps_requests_per_s": {
                answer: round(sum(delta(ps, "surreal_ps_requests_total", answer=answer) for ps in pss) / wall, 1)
                for answer in ("params", "not_modified", "error")
            },
            "fetch_timeouts": fleet_delta("fetch_timeouts"),
            "fetch_timeouts_whole_run": summed(tick_after, "fetch_timeouts"),
            "fetch_send_retries_whole_run": summed(tick_after, "fetch_send_retries"),
            "replay_ingest_per_s": round(
                sum(delta(r, "surreal_replay_transitions_in_total") for r in replays) / wall, 1
            ),
            "replay_egress_per_s": round(
                sum(delta(r, "surreal_replay_transitions_out_total") for r in replays) / wall, 1
            ),
            "replay_evicted": sum(delta(r, "surreal_replay_transitions_dropped_total") for r in replays),
            "send_blocked": fleet_delta("send_blocked"),
            "cpu_cores": cores,
            "machine_busy_cores": round(machine_busy, 2),
            "others_busy_cores": round(machine_busy - sum(cores.values()), 2),
            "load_avg_1m": [round(load0[0], 1), round(load1[0], 1)],
            "rss_mb": {name: round(v / 2**20, 1) for name, v in usage.rss.items()},
            "open_fds": dict(usage.fds),
            "open_sockets": dict(usage.sockets),
            "drops": drops,
            "lost_on_stop": lost_on_stop,
            "honest_dropped": sum(sum(r.values()) for r in drops.values()) + lost_on_stop,
            "handshakes_refused": {name: n for name, n in refused.items() if n},
            "restarts": restarts,
            "exit_codes": exit_codes,
            # Asked to stop, the services save their state and exit EXIT_STOPPED; the fleet's processes exit 0.
            "clean": all(code in (0, EXIT_STOPPED) for code in exit_codes.values()),
            "slow_fetches": explain(traces, timeline, (t0, t1)),
        }
    )
    point["bottleneck"] = bottleneck(point)
    return point


def trace_sample(
    cpu: dict[str, float], procs: dict[str, psutil.Process], host: str, replay_ports: dict[str, str]
) -> dict[str, float]:
    """One `Timeline` sample: every process's CPU and run-queue wait, the box's pressure stalls and each replay
    shard's snapshot count and last snapshot's duration (bench/fleet_trace.py lines slow fetches up with them)."""
    values = {f"cpu:{name}": seconds for name, seconds in cpu.items()}
    for name, proc in procs.items():
        waited = run_queue_wait_s(proc.pid)
        if waited is not None:
            values[f"wait:{name}"] = waited
    values.update({f"pressure:{kind}": seconds for kind, seconds in pressure_totals().items()})
    for shard, port in replay_ports.items():
        metrics = scrape(host, port)
        if metrics:
            values[f"snapshots:{shard}"] = total(metrics, "surreal_replay_snapshots_total")
            values[f"snapshot_s:{shard}"] = total(metrics, "surreal_replay_snapshot_seconds")
    return values


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def bottleneck(point: dict[str, Any]) -> str:
    """The module docstring's rule."""
    if point["learner_wait_share"] < WAIT_SHARE_BUSY:
        return "learner"
    cores = point["cpu_cores"]
    services = {n: c for n, c in cores.items() if not n.startswith("fleet")}
    busiest = max(services, key=services.__getitem__, default=None)
    if busiest is not None and services[busiest] >= CORE_BUSY:
        return busiest
    if any(c >= CORE_BUSY for n, c in cores.items() if n.startswith("fleet")):
        return "fleet"
    if point["machine_busy_cores"] >= CORE_BUSY * (os.cpu_count() or 1):
        return "machine"  # every core busy, other programs on a shared box included
    return "actors"


# -- results -----------------------------------------------------------------------------------------------


def series(results: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(algorithm, network, result) of every run merged in the results file."""
    found: list[tuple[str, str, dict[str, Any]]] = [(a, "none", results[a]) for a in ("ppo", "ddpg") if a in results]
    for network, by_algo in results.get("networks", {}).items():
        found += [(algo, network, by_algo[algo]) for algo in ("ppo", "ddpg") if algo in by_algo]
    return found


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
    colors = {"ppo": "tab:blue", "ddpg": "tab:orange"}
    styles = {"none": "o-", "datacenter": "s--", "degraded": "^:"}
    runs = series(results)
    for algo, network, result in runs:
        points, color = result["points"], colors[algo]
        n = [p["actors"] for p in points]
        label = f"{algo.upper()}, network {network}"
        ax.plot(n, [p["env_steps_per_s"] for p in points], styles[network], color=color, label=label)
        for p in points if network == "none" else []:  # the bottleneck named on the loopback runs' points
            ax.annotate(
                p["bottleneck"],
                (p["actors"], p["env_steps_per_s"]),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=8,
                color=color,
            )
        p99 = [p["ps_fetch_p99_ms"] or float("nan") for p in points]
        ax2.plot(n, p99, styles[network], color=color, label=label)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.12)  # room for the labels above the highest point
    ax.set_ylabel("env steps / s accepted by the learner")
    ax.set_title("Throughput against fleet size (bottleneck named at each point)")
    ax2.axhline(50, color="grey", ls="--", lw=1, label="target 50 ms")
    ax2.set_yscale("log")
    ax2.set_ylabel("ms")
    ax2.set_title("Parameter fetch latency p99, as the actors see it")
    counts = sorted({p["actors"] for _, _, result in runs for p in result["points"]})
    for axis in (ax, ax2):
        axis.set_xscale("log", base=2)
        axis.set_xticks(counts, [str(c) for c in counts])
        axis.set_xlabel("simulated actors N")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    fig.suptitle(f"bench.fleet on {runs[0][2]['machine']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=["ppo", "ddpg"], default="ppo")
    parser.add_argument("--actors", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--seconds", type=float, default=30.0, help="measurement window per N")
    parser.add_argument("--network", choices=["none", *PROFILES], default="none")
    parser.add_argument("--rate", type=float, help="env steps/s per actor; default: the recording's rate")
    parser.add_argument("--processes", type=int, help="simulated-actor processes; default min(N, 4)")
    parser.add_argument("--chunk-steps", type=int, default=64)
    parser.add_argument("--curve", choices=["on", "off"], default="on", help="CURVE on every connection (default on)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--out", type=Path, help="results JSON (merged by algorithm); a PNG goes beside it")
    parser.add_argument("--workdir", type=Path, help="where run folders go (default: a temporary folder)")
    args = parser.parse_args()
    # A SIGTERM unwinds like Ctrl-C: every process, namespace and folder made is removed on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    raise_open_files()
    cores = os.cpu_count() or 1
    rate = args.rate or float(load_rollout("HalfCheetah-v5")["steps_per_s"])
    out = args.out or RESULTS / f"fleet.{cores}core.json"
    points = []
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fleet-")))
        link = None if args.network == "none" else stack.enter_context(emulated_network(args.network))
        if args.network != "none" and link is None:
            print(json.dumps({"benchmark": "fleet", "algo": args.algo, "network": args.network, "skipped": True}))
            return
        for n in args.actors:
            point = run_point(args, n, rate, link, workdir)
            points.append(point)
            print(json.dumps(point), flush=True)
    result = {
        "benchmark": "fleet",
        "algo": args.algo,
        "machine": machine(),
        "network": args.network,
        "shaping": link.shaping if link else None,
        "rate_per_actor": round(rate, 1),
        "chunk_steps": args.chunk_steps,
        "curve": args.curve == "on",
        "overrides": args.set,
        "command": " ".join(["python -m bench.fleet", *sys.argv[1:]]),
        "points": points,
        **{
            key: [p[key] for p in points]
            for key in ("actors", "env_steps_per_s", "ps_fetch_p99_ms", "learner_wait_share", "bottleneck")
        },
    }
    merged: dict[str, Any] = {}
    if out.exists():
        with contextlib.suppress(ValueError):
            merged = json.loads(out.read_text())
    merged["benchmark"] = "fleet"
    if args.network == "none":  # over the box's own sockets, as `surreal run`: one key per algorithm
        merged[args.algo] = result
    else:  # emulated networks beside them, by profile
        merged.setdefault("networks", {}).setdefault(args.network, {})[args.algo] = result
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(merged, indent=1) + "\n")
    plot(merged, out.with_suffix(".png"))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
