"""The capacity model (bench/capacity_model.py: the simulator with measured costs per event) on constructed costs,
the fleet-point reading of `--check` and its verdict on bench.fleet's points, the chart's ppo-1024.yaml against the
sizing rule, and the shard micro-benchmark against the product's shard and wire. No sockets, and no verdict on a
timing of this box: every figure here is virtual time."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from bench.capacity import FLEET_FILE, FLEET_TARGET, check, fleet_cluster, values_cluster
from bench.capacity_costs import load_costs
from bench.capacity_model import Cluster, Costs, LearnerCost, predict, size_services

REPO = Path(__file__).resolve().parents[1]

COSTS = Costs(
    actor_steps_per_core={"HalfCheetah-v5": 1000.0},
    learner={"cpu": LearnerCost(step_s=1e-3, sample_s=1e-5, ddpg_step_s=5e-3)},
    shard_ingest_per_core=1e6,
    shard_egress_per_core=1e7,
    ps_checks_per_core=5e4,
    ps_fetches_per_core=2.5e4,
)
FAST_LEARNER = replace(COSTS, learner={"cpu": LearnerCost(1e-9, 1e-12, 1e-9)})


def test_a_slow_ppo_learner_binds_and_sets_updates_per_batch() -> None:
    c = Cluster(actors=64, chunk_steps=64)  # batch 4,096, minibatch 128, 10 epochs x 32 minibatches
    update_s = 10 * 32 * (1e-3 + 1e-5 * 128)
    p = predict(c, COSTS)
    assert p.bottleneck == "learner"
    assert p.env_steps_per_s == pytest.approx(4096 / update_s, rel=0.05)
    assert p.updates_per_s == pytest.approx(p.env_steps_per_s / 4096, rel=0.01)
    assert p.capacities["actors"] == pytest.approx(64 * 1000.0, rel=0.05)
    slower = predict(c, replace(COSTS, learner={"cpu": LearnerCost(4e-3, 4e-5, None)}))
    assert slower.bottleneck == "learner"
    assert slower.env_steps_per_s == pytest.approx(p.env_steps_per_s / 4, rel=0.05)


def test_few_actors_bind_and_a_round_trip_per_fetch_slows_them() -> None:
    c = Cluster(actors=2, chunk_steps=64, batch_size=128, minibatches=1, update_epochs=1)
    p = predict(c, FAST_LEARNER)
    assert p.bottleneck == "actors"
    assert p.env_steps_per_s == pytest.approx(2000.0, rel=0.05)
    far = predict(replace(c, rtt_ms=64.0), FAST_LEARNER)  # 64 ms per 64-step chunk at 1,000 steps/s, 64 ms asking
    assert far.bottleneck == "actors"
    assert far.env_steps_per_s == pytest.approx(1000.0, rel=0.1)


@pytest.mark.system
def test_more_actors_never_predict_fewer_steps_until_the_learner_binds() -> None:
    """While every actor's share is a whole chunk a version (actors <= batch / chunk), adding actors only adds
    env steps until the learner binds. (Past that, with fractional shares, the cores make the next batch wait for
    the new version: at 64 actors here the simulator predicts about 13,600, and bench.fleet saw PPO fall 11 %
    from 16 to 1,024 actors; so the rule is not asserted there.)"""
    costs = replace(COSTS, learner={"cpu": LearnerCost(2e-4, 1e-6, None)})  # 24,200 env steps/s at batch 2,048
    steps = []
    for actors in (2, 4, 8, 16, 32):
        p = predict(Cluster(actors=actors, batch_size=2048), costs)
        steps.append(p.env_steps_per_s)
        assert p.bottleneck == ("actors" if actors <= 16 else "learner"), (actors, p)
    assert all(b >= a for a, b in zip(steps, steps[1:], strict=False)), steps
    assert steps[-1] == pytest.approx(2048 / (10 * 32 * (2e-4 + 1e-6 * 64)), rel=0.05)


def test_ddpg_replay_ratio_ties_env_steps_to_gradient_steps() -> None:
    c = Cluster(actors=16, algo="ddpg", replay_ratio=0.1)
    p = predict(c, COSTS)
    assert p.bottleneck == "learner"
    assert p.env_steps_per_s == pytest.approx(1 / (5e-3 * 0.1), rel=0.05)
    assert p.updates_per_s == pytest.approx(200.0, rel=0.05)
    assert predict(replace(c, replay_ratio=0.05), COSTS).env_steps_per_s == pytest.approx(4000.0, rel=0.05)


@pytest.mark.system
def test_the_first_service_to_saturate_is_named() -> None:
    c = Cluster(actors=64, chunk_steps=64, batch_size=4096)  # 64,000 env steps/s of actors
    slow_shard = replace(FAST_LEARNER, shard_ingest_per_core=20_000.0)
    p = predict(c, slow_shard)
    assert p.bottleneck == "replay"
    assert p.capacities["replay"] == pytest.approx(20_000.0, rel=0.02)  # its work per transition, whatever the flow
    assert p.env_steps_per_s <= 20_000.0  # less: the actors wait for versions the slow shard holds up
    assert predict(replace(c, shards=8), slow_shard).bottleneck == "actors"  # 160,000 of ingest
    slow_ps = replace(FAST_LEARNER, ps_checks_per_core=200.0, ps_fetches_per_core=200.0)
    assert predict(c, slow_ps).bottleneck == "ps"  # 1,000 chunks/s, each a fetch
    thin = predict(replace(c, network_gbit=0.05), FAST_LEARNER)  # 6 MB/s: a 45 kB blob for every chunk is too much
    assert thin.bottleneck == "ps network"


@pytest.mark.system
def test_sizing_keeps_the_services_above_what_the_actors_could_send_in_powers_of_two() -> None:
    """64 actors could send about 61,000 env steps/s (the probe's actors step 96 % of the time); with headroom
    91,000. A shard takes 20,000 a core: 4.6 shards, 8 as a power of two (2.3 of two cores: 4). The ps answers
    about 1.45 times a chunk in the simulation (a held fetch, and a "not modified" where a hold ends first):
    1,420 chunks/s x 1.45 / 4,000 answers a second is half a replica."""
    costs = replace(
        FAST_LEARNER, shard_ingest_per_core=20_000.0, ps_checks_per_core=4_000.0, ps_fetches_per_core=4_000.0
    )
    c = Cluster(actors=64, chunk_steps=64, batch_size=4096)
    sized = size_services(c, costs)
    assert (sized.shards, sized.ps_replicas) == (8, 1)
    assert size_services(replace(c, cores_per_shard=2.0), costs).shards == 4
    slow_ps = replace(costs, ps_checks_per_core=400.0, ps_fetches_per_core=400.0)  # 5.2 replicas: 8
    assert size_services(c, slow_ps).ps_replicas == 8


def test_unknown_env_or_device_is_refused_by_name() -> None:
    with pytest.raises(KeyError, match="Lift"):
        predict(Cluster(actors=1, env="robosuite:Lift"), COSTS)
    with pytest.raises(KeyError, match="h100"):
        predict(Cluster(actors=1, learner_device="h100"), COSTS)


def fleet_run(algo: str, points: list[dict]) -> dict:
    return {
        "algo": algo,
        "rate_per_actor": 100.0,
        "chunk_steps": 64,
        "overrides": [],
        "network": "none",
        "points": points,
    }


def test_a_fleet_point_is_read_by_its_cluster_not_its_outcome() -> None:
    point = {"actors": 256, "env_steps_per_s": 1.0, "cpu_cores": {"replay-0": 0.1, "replay-1": 0.1, "ps-0": 0.1}}
    c = fleet_cluster(fleet_run("ppo", [point]), point)
    assert (c.actors, c.actor_rate, c.shards, c.ps_replicas) == (256, 100.0, 2, 1)
    assert (c.batch, c.minibatches) == (2048, 32)  # bench.fleet's PPO batch at every N, minibatch 64
    ddpg = fleet_cluster(fleet_run("ddpg", [point]), point)
    assert ddpg.algo == "ddpg" and ddpg.replay_ratio == pytest.approx(0.1)


def gpu_box_files(results: Path, learner: LearnerCost | None) -> None:
    """A GPU machine's throughput file (real actors at 1,000 env steps/s raw each, batch 2,048 per actor) and,
    with `learner`, the learner's cost that machine measured in the same part."""
    points = [
        {"actors": n, "system_env_steps_per_s": 900.0 * n, "raw_env_steps_per_s": 1000.0 * n, "batch_size": 2048 * n}
        for n in (1, 2)
    ]
    data = {"benchmark": "throughput", "env": "HalfCheetah-v5", "envs_per_actor": 4, "chunk_steps": 256}
    (results / "throughput.h200-16core.json").write_text(json.dumps({**data, "points": points}))
    if learner is not None:
        measured = {"benchmark": "capacity-learner", "name": "h200", "learner": vars(learner), "source": "test"}
        (results / "capacity-learner.h200-16core.json").write_text(json.dumps(measured))


def test_check_reads_every_algorithm_key_and_reports_misses(tmp_path: Path) -> None:
    points = [{"actors": 16, "env_steps_per_s": 0.0}, {"actors": 16, "env_steps_per_s": 1500.0}]
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"benchmark": "fleet", "ppo": fleet_run("ppo", points), "x": fleet_run("ddpg", [])}))
    gpu_box_files(tmp_path, learner=None)
    result = check(COSTS, fleet, tmp_path)
    rows = result["fleet_ppo"]["points"]
    assert [r["within_target"] for r in rows] == [False, True]  # 0 measured is a miss, never a pass
    assert rows[1]["predicted_bottleneck"] == "actors"
    assert rows[1]["predicted_env_steps_per_s"] == pytest.approx(16 * 100.0, rel=0.02)  # the actors at 100 steps/s
    assert rows[1]["error"] == pytest.approx(rows[1]["predicted_env_steps_per_s"] / 1500 - 1, abs=1e-3)
    assert result["fleet_x"]["points"] == []
    # No learner measured on that machine: its 1-actor point calibrates the learner and is no check.
    calibrated = result["h200_16core"]["points"]
    assert [r["within_target"] for r in calibrated] == [None, True]
    assert calibrated[0]["predicted_env_steps_per_s"] == pytest.approx(900.0, rel=0.02)  # its own outcome, by design


def test_a_gpu_machine_that_measured_its_learner_calibrates_the_actor_in_the_system(tmp_path: Path) -> None:
    gpu_box_files(tmp_path, learner=LearnerCost(1e-9, 0.0, None))  # a learner that never binds
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"benchmark": "fleet"}))
    costs = load_costs(results=tmp_path)
    assert costs.learner["h200"] == LearnerCost(1e-9, 0.0, None) and "learner h200" in costs.sources
    assert costs.learner["cpu"] == load_costs().learner["cpu"]  # the box's own --measure figure stays
    result = check(costs, fleet, tmp_path)["h200_16core"]
    rows = result["points"]
    # The actor-bound 1-actor point gives an actor's rate in the system (900, not the raw 1,000) and is no check.
    assert [r["within_target"] for r in rows] == [None, True]
    assert [r["predicted_bottleneck"] for r in rows] == ["actors", "actors"]
    assert [r["predicted_env_steps_per_s"] for r in rows] == [
        pytest.approx(900.0, rel=0.02),
        pytest.approx(1800.0, rel=0.02),
    ]
    assert "0.90 x its raw rate" in result["calibration"]


def test_a_measured_learner_that_binds_at_one_actor_leaves_every_point_a_check(tmp_path: Path) -> None:
    # 320 minibatch steps of 10 ms: 3.2 s for the 1-actor batch of 2,048, i.e. 640 env steps/s < the 1,000 raw.
    gpu_box_files(tmp_path, learner=LearnerCost(0.01, 0.0, None))
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"benchmark": "fleet"}))
    rows = check(load_costs(results=tmp_path), fleet, tmp_path)["h200_16core"]["points"]
    assert [r["within_target"] for r in rows] == [False, False]  # 640 per actor predicted, 900 measured: -29 %
    assert [r["predicted_bottleneck"] for r in rows] == ["learner", "learner"]
    assert rows[0]["error"] == pytest.approx(640 / 900 - 1, abs=0.02)


@pytest.mark.slow  # six simulated runs, two of 1,024 actors: 20-60 s on a 2-core box
def test_the_fleet_points_at_16_256_and_1024_actors_are_predicted_within_the_target() -> None:
    """The stretch target of issue 40, from each point's cluster description alone (bench/results/fleet.2core.json)."""
    fleet = json.loads(FLEET_FILE.read_text())
    costs = load_costs()
    for algo in ("ppo", "ddpg"):
        run = fleet[algo]
        for point in (p for p in run["points"] if p["actors"] in (16, 256, 1024)):
            p = predict(fleet_cluster(run, point), costs)
            error = p.env_steps_per_s / point["env_steps_per_s"] - 1
            assert abs(error) <= FLEET_TARGET, (algo, point["actors"], p.env_steps_per_s, point["env_steps_per_s"])
            assert p.bottleneck == point["bottleneck"], (algo, point["actors"])


@pytest.mark.slow  # two simulated runs of the chart's 1,024 actors: about a minute on a 2-core box
def test_the_checked_in_ppo_1024_values_hold_the_sizing_rule() -> None:
    values = REPO / "infra" / "helm" / "values" / "ppo-1024.yaml"
    cluster = values_cluster(values)
    assert cluster.actors == 1024
    sized = size_services(cluster, load_costs())
    assert (cluster.shards, cluster.ps_replicas) == (sized.shards, sized.ps_replicas)


def test_the_shard_micro_benchmark_drives_todays_replay_shard_and_wire() -> None:
    """`--measure` calls the product's own shard and codec; this keeps it in step with them (rates are not
    judged: they are the box's)."""
    from bench.capacity_costs import shard_rates

    ingest, egress = shard_rates(0.05)
    assert ingest > 0 and egress > 0


PIXEL_COSTS = replace(
    COSTS,
    actor_steps_per_core={**COSTS.actor_steps_per_core, "ALE/Pong-v5": 1000.0},
    pixel_learner={"cpu": LearnerCost(step_s=0.0, sample_s=5e-4, ddpg_step_s=None)},  # 2.05 s a 1,024 batch
    pixel_shard_ingest_per_core=1e7,
)


def test_an_atari_cluster_is_priced_with_the_cnn_learner_and_pixel_bytes() -> None:
    """ppo-atari's rule (8 envs x 128 steps, 1,024 a batch, 4 minibatches x 4 epochs) on Pong: the Nature CNN's
    cost, not the MLP's, sets the learner; the links carry frames (about 7.3 kB an env step at 128-step chunks)."""
    pytest.importorskip("ale_py", reason="the atari extra")
    from bench.capacity import preset_fields

    fields = preset_fields("ppo-atari")
    assert fields == {"batch_size": 1024, "update_epochs": 4, "envs_per_actor": 8, "chunk_steps": 128, "minibatches": 4}
    c = Cluster(actors=1, env="ALE/Pong-v5", **fields)
    p = predict(c, PIXEL_COSTS)
    assert p.bottleneck == "learner"
    assert p.env_steps_per_s == pytest.approx(1024 / (4 * 5e-4 * 1024), rel=0.03)
    linked = predict(replace(c, network_gbit=1.0), PIXEL_COSTS)
    chunk_bytes = linked.per_step["replay network in"]
    assert 84 * 84 < chunk_bytes < 1.1 * 84 * 84  # each frame once, not a float32 stack's 112,896 bytes
    blob_bytes = linked.per_step["ps network out"] * 1024  # the Nature CNN's blob, once a version to the one actor
    assert 6e6 < blob_bytes < 7.5e6
    # The learner's blob to the ps and on to the actor (6.7 MB twice at 125 MB/s) lengthens each version's cycle.
    assert linked.env_steps_per_s < p.env_steps_per_s
    with pytest.raises(KeyError, match="pixel learner"):
        predict(c, replace(PIXEL_COSTS, pixel_learner={}))  # the MLP's cost is no CNN's


def test_the_atari_point_is_read_from_its_description(tmp_path: Path) -> None:
    pytest.importorskip("ale_py", reason="the atari extra")
    from bench.capacity import atari_cluster

    data = json.loads((REPO / "bench/results/atari-ppo.2core.json").read_text())
    c = atari_cluster(data)
    assert (c.actors, c.env, c.envs_per_actor, c.chunk_steps) == (1, "ALE/Pong-v5", 8, 128)
    assert (c.batch, c.minibatches, c.update_epochs, c.learner_device) == (1024, 4, 4, "cpu")
    (tmp_path / "atari-ppo.2core.json").write_text(json.dumps(data))
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"benchmark": "fleet"}))
    rows = check(PIXEL_COSTS, fleet, tmp_path)["pixels_atari_ppo"]["points"]
    assert rows[0]["measured_env_steps_per_s"] == pytest.approx(data["system"]["frames_per_s"] / 4)
    assert rows[0]["predicted_bottleneck"] == "learner"
    assert rows[0]["predicted_env_steps_per_s"] == pytest.approx(1024 / 2.048, rel=0.05)
