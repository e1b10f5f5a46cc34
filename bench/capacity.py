"""Sizing a cluster: predicted env steps/s, learner updates/s and the bottleneck from per-component costs.

    python -m bench.capacity --measure [--seconds 3]        # -> bench/results/capacity-costs.2core.json
    python -m bench.capacity --actors 1024 [--algo ppo] [--env HalfCheetah-v5] [--shards 8] [--ps-replicas 7]
                             [--learner-device cpu|h100] [--network-gbit 10 --rtt-ms 0.2] [...]
    python -m bench.capacity --cluster my-cluster.yaml      # the same keys as the flags (Cluster's fields)
    python -m bench.capacity --values infra/helm/values/ppo-1024.yaml [--size]   # a chart values file
    python -m bench.capacity --measure-learner cuda         # on a GPU machine (bench/gpu.sh part3)
    python -m bench.capacity --measure-pixels               # the Nature CNN learner, a shard's pixel ingest
    python -m bench.capacity --env ALE/Pong-v5 --preset ppo-atari --actors 16    # an Atari cluster
    python -m bench.capacity --check                        # against bench.fleet and the GPU machines' files

The model (bench/capacity_model.py) is the simulator (src/surreal/sim/) running the cluster on the roles' own
cores, every event costing what it was measured to cost: an actor's chunk, a transition into and out of a shard, a
ps answer, a learner update, a message's bytes on a link. Costs come from
`--measure` (bench/capacity_costs.py says how each is taken), for a GPU learner from `--measure-learner cuda` on
that machine (`capacity-learner.h200-16core.json`, ...) and, for the H100 learner of the old code, from
bench/results/throughput.h100-16core.json; `sources` in every output names the file of each figure.

`--size` prints the shards and ps replicas the rule gives a values file (replay and ps keep 1.5x the most the
actors could send, on the cores the values file requests), and says whether the file holds them. A prediction of
1,024 actors takes 5-15 s of wall time on a 2-core box, sizing one about 30 s more, 15,000 actors about 3 minutes.

`--check` predicts every point of bench/results/fleet.2core.json (bench.fleet's simulated actors at the rate it
set, against the real services on this box) and of every GPU machine's bench/results/throughput.<gpu>-16core.json
(`gpu_box_check`: its 1-actor point calibrates), prints the error of each against its target (20 % and 25 %) and
writes everything to bench/results/capacity.2core.json; with a pixel learner measured (`--measure-pixels`), also
every bench.atari_ppo run on this box (`atari-ppo*.2core.json`: Pong with learning on, target 25 %). An env of image
observations (ALE) is simulated with its chunks as frames and indices, its learner the Nature CNN's cost, its actor
bench.atari_ppo's `actor_alone` rate (capacity_costs.py). A point is predicted from its cluster description only
(actors, rate, batch rule, topology); nothing is read from its measured outcome.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from bench._runs import RESULTS, emit, machine
from bench.capacity_costs import (
    ATARI_PPO_FILE,
    ATARI_SKIP,
    MEASURED_FILE,
    PIXEL_FILE,
    calibrated_learner,
    load_costs,
    measure,
    measure_learner,
    measure_pixels,
)
from bench.capacity_model import Cluster, Costs, predict, size_services

FLEET_FILE = RESULTS / "fleet.2core.json"
CHECK_FILE = RESULTS / "capacity.2core.json"
FLEET_TARGET, GPU_BOX_TARGET, PIXEL_TARGET = 0.20, 0.25, 0.25
PRESETS = Path(__file__).resolve().parents[1] / "src" / "surreal" / "conf" / "preset"
GPU_BOX_CHUNK, GPU_BOX_MINIBATCHES = 256, 32  # bench.throughput's defaults (chunk_steps, batch / 32)


# -- cluster descriptions -----------------------------------------------------------------------------------


def overrides_to_fields(overrides: list[str]) -> dict[str, Any]:
    """The model's fields from `surreal run` overrides (the batch rule, replay ratio, fetch cadence)."""
    keys = {
        "algo": ("algo", str),
        "algo.batch_size": ("batch_size", int),
        "algo.update_epochs": ("update_epochs", int),
        "algo.replay_ratio": ("replay_ratio", float),
        "actor.chunk_steps": ("chunk_steps", int),
        "actor.param_fetch_interval": ("param_fetch_interval", int),
        "topology.envs_per_actor": ("envs_per_actor", int),
        "env": ("env", str),
    }
    out: dict[str, Any] = {}
    minibatch = None
    for item in overrides:
        key, _, value = item.partition("=")
        if key in keys:
            name, kind = keys[key]
            out[name] = kind(value)
        elif key == "algo.minibatch_size":
            minibatch = int(value)
    if minibatch and "batch_size" in out:
        out["minibatches"] = max(1, out["batch_size"] // minibatch)
    return out


def preset_fields(name: str) -> dict[str, Any]:
    """The model's fields a `surreal run preset=NAME` sets (conf/preset/NAME.yaml): its envs per actor, chunk and
    batch rule (ppo-atari: 8 envs x 128 steps, batches of 1,024 in 4 minibatches, 4 epochs)."""
    path = PRESETS / f"{name}.yaml"
    if not path.exists():
        raise SystemExit(f"no preset {name!r} (have: {', '.join(sorted(p.stem for p in PRESETS.glob('*.yaml')))})")
    data = yaml.safe_load(path.read_text()) or {}
    algo, topology, actor = data.get("algo", {}), data.get("topology", {}), data.get("actor", {})
    overrides = [f"algo.{k}={algo[k]}" for k in ("batch_size", "minibatch_size", "update_epochs") if k in algo]
    overrides += [f"topology.envs_per_actor={topology['envs_per_actor']}"] if "envs_per_actor" in topology else []
    overrides += [f"actor.chunk_steps={actor['chunk_steps']}"] if "chunk_steps" in actor else []
    return overrides_to_fields(overrides)


def fleet_cluster(run: dict[str, Any], point: dict[str, Any]) -> Cluster:
    """A bench.fleet point's cluster: its actors at the rate the run set, the services the run started."""
    from bench.fleet import config_overrides
    from bench.netem import PROFILES

    fields = overrides_to_fields(
        [*config_overrides(run["algo"], point["actors"], run["chunk_steps"]), *run["overrides"]]
    )
    roles = point.get("cpu_cores", {})
    return Cluster(
        actors=point["actors"],
        actor_rate=run["rate_per_actor"],
        shards=max(1, sum(name.startswith("replay-") for name in roles)),
        ps_replicas=max(1, sum(name.startswith("ps-") for name in roles)),
        learner_device="cpu",
        rtt_ms=2 * PROFILES[run["network"]].delay_ms if run.get("network", "none") in PROFILES else 0.0,
        **fields,
    )


def throughput_cluster(data: dict[str, Any], point: dict[str, Any], actor_rate: float, device: str) -> Cluster:
    """A bench.throughput point: real actors at `actor_rate` each, 1 shard, 1 ps, the file's batch rule."""
    return Cluster(
        actors=point["actors"],
        env=data["env"],
        envs_per_actor=data["envs_per_actor"],
        actor_rate=actor_rate,
        learner_device=device,
        chunk_steps=data.get("chunk_steps", GPU_BOX_CHUNK),
        batch_size=point["batch_size"],
        minibatches=GPU_BOX_MINIBATCHES,
    )


def gpu_box_files(results: Path = RESULTS) -> list[Path]:
    """The GPU machines' throughput files (`throughput.h100-16core.json`, ...): a GPU's name before the cores."""
    return sorted(f for f in results.glob("throughput.*-*core.json"))


def gpu_box_check(file: Path, costs: Costs, results: Path = RESULTS) -> dict[str, Any]:
    """Every point of a GPU machine's throughput file, predicted; the file's 1-actor point calibrates one cost
    and is no check.

    Where that machine measured its learner in the same part (`capacity-learner.<machine>.json`, already in
    `costs`) and that learner does not bind at the 1-actor point, the point is actor-bound and gives an actor's
    rate *in the system*. Not the raw rate: a lent GPU machine's 16 cores are not independent (on the H200, one
    actor stepped 5,221-5,867 env steps/s alone and 4,078 beside four busy processes, the learner, replay, ps and
    launcher of a run among them), and the raw phase runs its actors alone. The other points then check what the
    model claims as actors are added: that nothing else binds. Where the measured learner binds at 1 actor, the
    raw rate stays the actor's and every point is a check. A machine that measured no learner (the H100 file) has
    its learner calibrated from the 1-actor point instead."""
    tag = file.name.split(".")[1]
    device = tag.split("-")[0]
    data = json.loads(file.read_text())
    lowest = min(data["points"], key=lambda p: p["actors"])
    raw = rate = lowest["raw_env_steps_per_s"] / lowest["actors"]
    calibration: dict[str, Any] | None = lowest
    if (results / f"capacity-learner.{tag}.json").exists() and device in costs.learner:
        at_lowest = predict(throughput_cluster(data, lowest, rate, device), costs)
        if at_lowest.bottleneck == "actors":
            rate = lowest["system_env_steps_per_s"] / lowest["actors"]
            how = (
                f"the learner measured on that machine (capacity-learner.{tag}.json) takes "
                f"{at_lowest.capacities['learner']:,.0f} env steps/s at the {lowest['actors']}-actor point, which "
                f"the actors bound: its system rate is the actor's ({rate:,.0f} env steps/s, "
                f"{rate / raw:.2f} x its raw rate); the other points "
                "are checks"
            )
        else:
            calibration = None
            how = (
                f"the learner measured on that machine (capacity-learner.{tag}.json) binds at the "
                f"{lowest['actors']}-actor point; the raw rate is the actor's; every point is a check"
            )
    else:
        learner, source = calibrated_learner(file)
        costs = dataclasses.replace(costs, learner={**costs.learner, device: learner})
        how = (
            f"the {lowest['actors']}-actor point gives the learner's cost and its raw rate the actor's; the other "
            f"points are checks ({source})"
        )
    return {
        "file": file.name,
        "target": GPU_BOX_TARGET,
        "calibration": how,
        "points": [
            row(
                throughput_cluster(data, p, rate, device),
                costs,
                {"env_steps_per_s": p["system_env_steps_per_s"], "updates_per_s": None, "bottleneck": None},
                None if p is calibration else GPU_BOX_TARGET,
            )
            for p in data["points"]
        ],
    }


def atari_cluster(data: dict[str, Any]) -> Cluster:
    """bench.atari_ppo's system run as a cluster, from its description only: its actors, learner device and the
    overrides it ran (the preset's rule and any more); one shard and one ps, as `surreal run` starts them."""
    overrides = data["system"]["overrides"]
    presets = [o.partition("=")[2] for o in overrides if o.startswith("preset=")]
    fields = {**(preset_fields(presets[-1]) if presets else {}), **overrides_to_fields(overrides)}
    fields.setdefault("env", data["game"])
    return Cluster(actors=data["actors"], learner_device=data["device"], **fields)


def pixel_check(costs: Costs, file: Path = ATARI_PPO_FILE) -> dict[str, Any]:
    """bench.atari_ppo's Pong point with learning on, predicted from its description (`atari_cluster`): the
    Atari actor's rate, the Nature CNN learner and the shard's ingest at pixel sizes, measured apart from it."""
    data = json.loads(file.read_text())
    steps_per_s = data["system"]["frames_per_s"] / ATARI_SKIP
    measured = {
        "env_steps_per_s": steps_per_s,
        "bottleneck": "learner" if data["system"]["learner_wait_share"] < 0.1 else None,
    }
    return {
        "file": file.name,
        "command": data.get("command", "python -m bench.atari_ppo (the file does not record its flags)"),
        "target": PIXEL_TARGET,
        "measured": f"{data['system']['frames_per_s']} emulator frames/s = {steps_per_s:.1f} env steps/s "
        f"(learner_wait_share {data['system']['learner_wait_share']}: the learner binds); {data['machine']}",
        "points": [row(atari_cluster(data), costs, measured, PIXEL_TARGET)],
    }


def cpu_cores(quantity: Any) -> float:
    """A Kubernetes CPU quantity ("500m", "2", 1) in cores."""
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def values_cluster(path: Path) -> Cluster:
    """A chart values file's cluster: actor and service counts and the cores each requests; the experiment's
    PPO batch and chunk; the chart's sizing network (the issue's datacenter profile); the learner on an H100
    (the chart's GPU learner)."""
    values = yaml.safe_load(path.read_text())
    experiment = values.get("experiment", {})
    algo = experiment.get("algo", "ppo")
    algo_fields = algo if isinstance(algo, dict) else {"name": algo}
    batch = algo_fields.get("batch_size")
    minibatch = algo_fields.get("minibatch_size")
    return Cluster(
        actors=values["actors"]["replicas"],
        algo=algo_fields["name"],
        env=experiment.get("env", {}).get("id", "HalfCheetah-v5"),
        envs_per_actor=values["actors"].get("envsPerActor", 1),
        cores_per_actor=cpu_cores(values["actors"]["resources"]["requests"]["cpu"]),
        shards=values["replay"]["shards"],
        cores_per_shard=cpu_cores(values["replay"]["resources"]["requests"]["cpu"]),
        ps_replicas=values["ps"]["replicas"],
        cores_per_ps=cpu_cores(values["ps"]["resources"]["requests"]["cpu"]),
        learner_device="h100",
        chunk_steps=experiment.get("actor", {}).get("chunk_steps", 64),
        batch_size=batch,
        minibatches=batch // minibatch if batch and minibatch else 32,
        update_epochs=algo_fields.get("update_epochs", 10),
        network_gbit=10.0,
        rtt_ms=0.2,
    )


# -- the check --------------------------------------------------------------------------------------------


def error(predicted: float, measured: float) -> float | None:
    return None if measured <= 0 else round(predicted / measured - 1.0, 3)


def row(cluster: Cluster, costs: Costs, measured: dict[str, Any], target: float | None) -> dict[str, Any]:
    p = predict(cluster, costs)
    e = error(p.env_steps_per_s, measured["env_steps_per_s"])
    return {
        "actors": cluster.actors,
        "measured_env_steps_per_s": measured["env_steps_per_s"],
        "predicted_env_steps_per_s": round(p.env_steps_per_s, 1),
        "error": e,
        "within_target": None if target is None else e is not None and abs(e) <= target,
        "measured_updates_per_s": measured.get("updates_per_s"),
        "predicted_updates_per_s": round(p.updates_per_s, 3),
        "predicted_bottleneck": p.bottleneck,
        "measured_bottleneck": measured.get("bottleneck"),
        "others_busy_cores": measured.get("others_busy_cores"),  # the box's other load then: shown, never used
        "capacities": p.to_json()["capacities"],
    }


def check(costs: Costs, fleet_file: Path = FLEET_FILE, results: Path = RESULTS) -> dict[str, Any]:
    """Every fleet point (any algorithm key holding `points`) and every GPU machine's point, predicted and compared."""
    out: dict[str, Any] = {"benchmark": "capacity", "machine": machine()}
    fleet = json.loads(fleet_file.read_text())
    for algo, run in fleet.items():
        if not isinstance(run, dict) or "points" not in run:
            continue
        out[f"fleet_{algo}"] = {
            "file": fleet_file.name,
            "command": run.get("command"),
            "target": FLEET_TARGET,
            "points": [
                row(
                    fleet_cluster(run, p),
                    costs,
                    {
                        "env_steps_per_s": p["env_steps_per_s"],
                        "updates_per_s": p.get("learner_updates_per_s"),
                        "bottleneck": p.get("bottleneck"),
                        "others_busy_cores": p.get("others_busy_cores"),
                    },
                    FLEET_TARGET,
                )
                for p in run["points"]
            ],
        }
    for file in gpu_box_files(results):
        out[file.name.split(".")[1].replace("-", "_")] = gpu_box_check(file, costs, results)
    if costs.pixel_learner.get("cpu"):
        for file in sorted(results.glob("atari-ppo*.2core.json")):  # bench.atari_ppo's CPU runs on this box
            out[f"pixels_{file.name.split('.')[0].replace('-', '_')}"] = pixel_check(costs, file)
    out["costs"] = costs.to_json()
    return out


def print_check(result: dict[str, Any]) -> None:
    for name, part in result.items():
        if not isinstance(part, dict) or "points" not in part:
            continue
        print(f"{name} ({part['file']}, target {part['target']:.0%}):")
        header = f"{'actors':>7} {'measured':>10} {'predicted':>10} {'error':>7}  verdict   others' load"
        print(f"  {header}  bottleneck (model / bench)")
        for r in part["points"]:
            e = "n/a" if r["error"] is None else f"{r['error']:+.1%}"
            verdict = {True: "ok", False: "MISS", None: "calib."}[r["within_target"]]
            load = "-" if r["others_busy_cores"] is None else f"{r['others_busy_cores']:.2f} cores"
            print(
                f"  {r['actors']:>7} {r['measured_env_steps_per_s']:>10,.0f} {r['predicted_env_steps_per_s']:>10,.0f}"
                f" {e:>7}  {verdict:<8}  {load:>12}  {r['predicted_bottleneck']} / {r['measured_bottleneck'] or '-'}",
                flush=True,
            )


# -- the command line -----------------------------------------------------------------------------------------


def cluster_from_args(args: argparse.Namespace) -> Cluster:
    if args.values:
        return values_cluster(args.values)
    fields = preset_fields(args.preset) if args.preset else {}
    fields.update(yaml.safe_load(args.cluster.read_text()) if args.cluster else {})
    names = {f.name for f in dataclasses.fields(Cluster)}
    fields.update({k: v for k, v in vars(args).items() if k in names and v is not None})
    if "actors" not in fields:
        raise SystemExit("say how many actors: --actors N (or actors: in --cluster)")
    return Cluster(**fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measure", action="store_true", help="run the micro-benchmarks, write the costs file")
    parser.add_argument("--seconds", type=float, default=3.0, help="each micro-benchmark's length")
    parser.add_argument(
        "--measure-learner", metavar="DEVICE", help="time the learner on this device (cuda: a GPU machine's)"
    )
    parser.add_argument(
        "--measure-pixels", action="store_true", help="time the Nature CNN learner and a shard's pixel ingest"
    )
    parser.add_argument("--preset", help="a `surreal run` preset's batch rule and envs (ppo-atari)")
    parser.add_argument("--out", type=Path, help="--measure-learner's file (default capacity-learner.<machine>.json)")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--cluster", type=Path, help="a YAML of Cluster's fields")
    parser.add_argument("--values", type=Path, help="a chart values file")
    parser.add_argument("--size", action="store_true", help="the shards and ps replicas the rule gives")
    for f in dataclasses.fields(Cluster):  # one flag per field; annotations are strings here ("int | None", ...)
        kind = {"int": int, "float": float, "str": str}.get(str(f.type).split(" ")[0], float)
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=None)
    args = parser.parse_args()
    if args.measure:
        emit({"benchmark": "capacity-costs", "machine": machine(), **measure(args.seconds)}, MEASURED_FILE)
        return
    if args.measure_pixels:
        emit({"machine": machine(), **measure_pixels(args.seconds)}, PIXEL_FILE)
        return
    if args.measure_learner:
        result = measure_learner(args.measure_learner, args.seconds)
        emit(result, args.out or RESULTS / f"capacity-learner.{result['machine']}.json")
        return
    costs = load_costs()
    if args.check:
        result = check(costs)
        print_check(result)
        emit(result, CHECK_FILE)
        return
    cluster = cluster_from_args(args)
    try:
        prediction = predict(cluster, costs)
    except (KeyError, ValueError) as exc:  # an env, device or algorithm without a measured cost: one line
        print(f"bench.capacity: {str(exc).strip(chr(34))}", file=sys.stderr)
        sys.exit(2)
    out: dict[str, Any] = {"cluster": dataclasses.asdict(cluster), **prediction.to_json()}
    if args.size:
        sized = size_services(cluster, costs)
        out["sized"] = {"shards": sized.shards, "ps_replicas": sized.ps_replicas}
        out["holds_the_rule"] = (sized.shards, sized.ps_replicas) == (cluster.shards, cluster.ps_replicas)
    out["sources"] = costs.sources
    print(json.dumps(out))
    if args.size and not out["holds_the_rule"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
