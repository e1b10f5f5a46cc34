"""The fleet path (bench.fleet): 64 simulated actors against the real replay, ps and learner (PPO, small batch).

The benchmark waits for progress itself (every actor has sent a chunk and the learner has written a row, under
a limit that only catches hangs), measures a short window and stops everything as `surreal run` does. Nothing
here asserts a rate: every actor was counted live, no honest message was dropped, nothing restarted, the learner
counted env steps, and every process exited cleanly and is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
from bench import fleet_actors, netem

REPO = Path(__file__).resolve().parents[1]
ACTORS = 64


def run_fleet(tmp_path: Path, actors: int, *extra: str) -> tuple[dict, str]:
    """bench.fleet for one N (PPO, a small batch of updates); its closing JSON's one point and where its logs are."""
    out = tmp_path / "fleet.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    argv = ["--algo", "ppo", "--actors", str(actors), "--seconds", "20", "--processes", "2", "--out", str(out)]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.fleet",
            *argv,
            "--workdir",
            str(tmp_path / "runs"),
            "--set",
            "algo.update_epochs=2",
            *extra,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # only catches a hang
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    (point,) = summary["points"]
    logs = f"\n{json.dumps(point, indent=1)}\nlogs in {tmp_path / 'runs'}"
    assert point["warmup_complete"], "not every actor sent a chunk before the learner wrote a row" + logs
    assert point["live_actors_max"] == actors, logs  # every actor counted live at some row
    assert point["honest_dropped"] == 0 and point["drops"] == {}, logs
    assert point["restarts"] == 0, logs
    assert point["env_steps_total"] > 0 and point["learner_updates_per_s"] > 0, logs
    assert point["clean"] and point["left_behind"] == [], logs
    for key in ("actors", "live_actors_min", "ps_fetch_p99_ms", "env_steps_per_s", "learner_wait_share", "bottleneck"):
        assert key in point, key
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    assert out.with_suffix(".png").stat().st_size > 0
    return summary, logs


@pytest.mark.system
def test_fleet_of_64_simulated_actors_against_ppo(tmp_path: Path):
    summary, _ = run_fleet(tmp_path, ACTORS)
    assert json.loads((tmp_path / "fleet.json").read_text())["ppo"]["points"][0]["actors"] == ACTORS


@pytest.mark.slow  # a fleet run over emulated links: the 64-actor run above checks the same path on loopback
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces are made as root (the box and CI are)")
def test_fleet_of_16_simulated_actors_over_the_datacenter_network(tmp_path: Path):
    """The fleet in a namespace of its own, over TCP through a shaped veth pair to the services; afterwards the
    namespace, the pair and every rule are gone."""
    made_before = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    summary, logs = run_fleet(tmp_path, 16, "--network", "datacenter")
    assert summary["network"] == "datacenter" and summary["shaping"], logs
    saved = json.loads((tmp_path / "fleet.json").read_text())
    assert saved["networks"]["datacenter"]["ppo"]["points"][0]["actors"] == 16
    assert "ppo" not in saved, "a run over an emulated network is kept apart from the loopback's"
    left = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()) - made_before
    assert not {name for name in left if name.startswith("surreal-fleet-")}, left


def test_the_emulated_networks_commands():
    plan = netem.Plan.for_pid(70001)
    assert (plan.namespace, plan.host_dev, plan.peer_dev) == ("surreal-fleet-70001", "sfh70001", "sfn70001")
    assert plan.host.rsplit(".", 1)[0] == plan.peer.rsplit(".", 1)[0] and plan.host != plan.peer
    assert int(plan.host.rsplit(".", 1)[1]) % 4 == 1, "the first host of a /30"
    degraded = netem.PROFILES["degraded"]
    host_qdisc, peer_qdisc = plan.netem(degraded)
    assert host_qdisc == ["tc", "qdisc", "replace", "dev", "sfh70001", "root", "netem", "delay", "1.0ms", "rate",
                          "1000mbit", "loss", "0.1%"]  # fmt: skip
    assert peer_qdisc[:4] == ["ip", "netns", "exec", "surreal-fleet-70001"] and peer_qdisc[4:8] == host_qdisc[:4]
    assert peer_qdisc[8] == "sfn70001" and peer_qdisc[9:] == host_qdisc[5:]
    assert "loss" not in plan.netem(netem.PROFILES["datacenter"])[0]
    assert "10000mbit" in plan.netem(netem.PROFILES["datacenter"])[0]
    tbf = plan.tbf(degraded)[0]
    assert tbf[tbf.index("rate") + 1] == "1000mbit" and int(tbf[tbf.index("burst") + 1]) == 1_250_000
    add, remove = plan.loss_rules(degraded, add=True), plan.loss_rules(degraded, add=False)
    assert add[0][1] == "-A" and remove[0][1] == "-D" and add[0][2:] == remove[0][2:]
    assert "0.001000" in add[0] and add[1][:4] == ["ip", "netns", "exec", "surreal-fleet-70001"]
    assert plan.loss_rules(netem.PROFILES["datacenter"], add=True) == []
    made = plan.make()
    assert (
        made[0] == ["ip", "netns", "add", "surreal-fleet-70001"]
        and ["ip", "netns", "del", plan.namespace] in plan.unmake()
    )


def test_simulated_chunks_are_what_real_actors_send():
    """A simulated chunk passes the replay's own validation, and a DDPG one holds exactly the n-step transitions
    (n = 1) the real collector makes of the same steps."""
    from bench.rollouts import FIELDS, load

    from surreal.algos.offpolicy import n_step_transitions
    from surreal.config import load_config
    from surreal.proto.wire import Chunk, decode_chunk, encode_chunk

    data = load("HalfCheetah-v5")
    for algo in ("ppo", "ddpg"):
        cfg = load_config([f"algo={algo}", "actor.chunk_steps=64", "topology.envs_per_actor=2"])
        recording = fleet_actors.Recording(cfg, data)
        episodes = 0
        for start in range(0, recording.length, 64):
            arrays, returns, lengths = recording.chunk(start)
            sent = encode_chunk(Chunk(arrays, 3, 7, list(returns), list(lengths)), "inc")
            chunk = decode_chunk(sent, cfg.algo.max_env_steps_per_unit(1000))
            assert chunk.size == 128 and chunk.actor == 7 and chunk.version == 3
            assert all(length == 1000 for length in chunk.episode_lengths)
            episodes += len(returns)
        assert episodes > 0
        if algo == "ddpg":
            raw = {k: v[:64, None] for k, v in data.items() if k in FIELDS}
            expected = n_step_transitions(raw, 1, cfg.algo.gamma)
            got = recording.chunk(0)[0]
            assert set(got) == set(expected)
            for key, value in expected.items():
                np.testing.assert_array_equal(got[key][:, :1], value)
