"""The learner group (`learner.replicas=K`, roles/learner_group.py): its orders on the wire, its place from torchrun's
variables, the supervisor restarting a group together, and `surreal run learner.replicas=2` surviving a rank
SIGKILLed mid-run (the group resumes from rank 0's checkpoint, nothing hangs)."""

from __future__ import annotations

import re
import signal
import sys
import textwrap
from pathlib import Path

import numpy as np
import psutil
import pytest

from conftest import wait_until
from surreal.config import ConfigError, load_config
from surreal.launch import local
from surreal.launch.supervisor import ProcessSpec, Supervisor
from surreal.metricsfile import read_metrics
from surreal.proto.codec import ProtocolError, decode, encode, pack_frames, unpack_frames
from surreal.proto.wire import Chunk, GroupOrder, decode_group_order, encode_group_order
from surreal.roles.learner_group import GroupPlace
from surreal.settings import group_env
from test_local_run import DDPG_PENDULUM, LocalRun

OFFPOLICY_WORKER = Path(__file__).resolve().parent / "offpolicy_group_worker.py"


def order_round_trip(order: GroupOrder) -> GroupOrder:
    message = encode_group_order(order)
    return decode_group_order(decode(unpack_frames(pack_frames(encode(message.kind, message.meta, message.arrays)))))


def test_an_update_order_carries_the_batch_and_progress_exactly():
    rng = np.random.default_rng(0)
    chunks = [
        Chunk({"obs": rng.normal(size=(8, 2, 3)).astype(np.float32), "rewards": rng.normal(size=(8, 2))}, 5, actor=a)
        for a in range(2)
    ]
    got = order_round_trip(GroupOrder("update", progress=0.25, chunks=chunks))
    assert (got.op, got.progress, len(got.chunks)) == ("update", 0.25, 2)
    for sent, received in zip(chunks, got.chunks, strict=True):
        assert (received.version, received.actor) == (sent.version, sent.actor)
        for key, array in sent.arrays.items():
            np.testing.assert_array_equal(received.arrays[key], array)
    assert order_round_trip(GroupOrder("finish")).op == "finish"


@pytest.mark.parametrize(
    ("meta", "reason"),
    [({"op": "reboot", "progress": 0.0}, "bad_group_order"), ({"op": "update", "progress": 1.5}, "bad_group_order")],
)
def test_a_bad_order_is_refused(meta, reason):
    frames = encode("group_order", meta)
    with pytest.raises(ProtocolError) as info:
        decode_group_order(decode(unpack_frames(pack_frames(frames))))
    assert info.value.reason == reason


def test_packed_frames_whose_lengths_do_not_add_up_are_refused():
    packed = pack_frames(encode("group_order", {"op": "stop", "progress": 0.0}))
    for damaged in (packed[:-1], packed + b"x", b"\x00\x00"):
        with pytest.raises(ProtocolError):
            unpack_frames(damaged)


def test_a_place_comes_from_torchruns_variables_and_bad_ones_are_one_clear_error():
    assert GroupPlace.from_env(group_env(1, 2, "10.0.0.1", 29500), 2) == GroupPlace(1, 2, 1, "10.0.0.1", 29500)
    with pytest.raises(ValueError, match="needs RANK"):
        GroupPlace.from_env({"WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, 2)
    with pytest.raises(ValueError, match="WORLD_SIZE=3 but learner.replicas=2"):
        GroupPlace.from_env(group_env(0, 3, "h", 1), 2)
    with pytest.raises(ValueError, match="RANK=2 of WORLD_SIZE=2"):
        GroupPlace.from_env(group_env(2, 2, "h", 1), 2)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["algo=ddpg", "algo.batch_size=255", "learner.replicas=2"], r"algo.batch_size \(255\) must be a multiple"),
        (["algo=sac", "algo.batch_size=100", "learner.replicas=3"], r"algo.batch_size \(100\) must be a multiple"),
        (["algo.minibatch_size=63", "learner.replicas=2"], "multiple of learner.replicas"),
        (["algo=es", "learner.replicas=2"], "no gradient update"),
        (["device=cuda:1", "learner.replicas=2"], "LOCAL_RANK"),
        (["learner.replicas=0"], "learner.replicas"),
    ],
)
def test_config_refuses_what_a_group_cannot_run(overrides, says):
    with pytest.raises(ConfigError, match=says):
        load_config(overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        ["algo=ddpg", "algo.twin_critics=true", "algo.target_policy_noise=0.2"],  # TD3
        ["algo=sac"],
    ],
)
def test_off_policy_groups_validate(overrides):
    cfg = load_config([*overrides, "learner.replicas=2"])
    assert cfg.learner.replicas == 2 and not cfg.algo.on_policy


@pytest.mark.parametrize("algo", ["td3", "sac"])
@pytest.mark.system
def test_an_off_policy_group_whose_ranks_sample_their_own_minibatches_makes_the_single_learners_update(tmp_path, algo):
    """Two gloo ranks through the role's code (rank 0: `LearnerCore` and its replay-ratio feed ordering every update;
    rank 1: following as the regime's `SampleFollower`), each stepping on minibatches only it sampled: identical
    parameters on both, those of one learner stepping on the two ranks' minibatches side by side, and each rank's
    priorities sent home for its own transitions (tests/offpolicy_group_worker.py)."""
    import torch

    from offpolicy_group_worker import ALGOS, OVERRIDES, SAMPLES
    from replica_worker import transitions
    from surreal.algos import get_algorithm
    from surreal.config import algo_config
    from surreal.envs import env_spaces
    from test_data_parallel import run_ranks_of

    ranks = run_ranks_of(OFFPOLICY_WORKER, 2, tmp_path, lambda rank: [algo, str(tmp_path / f"run{rank}")], algo)
    cfg = load_config([*ALGOS[algo], *OVERRIDES])
    torch.set_num_threads(1)
    alone = get_algorithm(cfg.algo.name).make_learner(*env_spaces(cfg), algo_config(cfg), torch.device("cpu"))
    steps = cfg.learner.minibatches_per_sample
    whole = [alone.update(transitions(u, True), steps)[1] for u in range(SAMPLES)]
    state = alone.state_dict()
    expected = {f"param/{k}": v.numpy() for k, v in state["critics"].items()}
    expected.update({f"param/actor.{k}": v.numpy() for k, v in state["actor"].items()})
    assert [int(r["updates"]) for r in ranks] == [SAMPLES * steps] * 2
    for key, value in expected.items():
        np.testing.assert_array_equal(ranks[0][key], ranks[1][key], err_msg=key)
        np.testing.assert_allclose(ranks[0][key], value, rtol=1e-4, atol=2e-5, err_msg=key)
    for rank, result in enumerate(ranks):  # rank r's rows are the r-th half of every minibatch of 64
        rows = np.arange(steps * 64).reshape(steps, 2, 32)[:, rank].reshape(-1)
        np.testing.assert_array_equal(result["priority_slots"], np.concatenate([rows] * SAMPLES))
        np.testing.assert_allclose(result["priorities"], np.concatenate([w[rows] for w in whole]), rtol=1e-4, atol=1e-5)


def test_rank_samples_step_across_samples_and_send_each_its_priorities():
    from surreal.proto.wire import IDS, SLOTS, ShardReport, TransitionReply
    from surreal.runtime.regimes.replay_ratio import HeldSamples

    sent = []
    samples = HeldSamples(4, 2, lambda shard, slots, ids, p: sent.append((shard, slots.tolist(), p.tolist())))

    def reply(shard: int, first: int) -> TransitionReply:
        slots = np.arange(first, first + 12)
        return TransitionReply(ShardReport(shard, 0), {SLOTS: slots, IDS: slots.astype(np.uint64), "x": slots * 1.0})

    assert samples.take(reply(0, 0)) and samples.minibatches == 3
    batch, parts = samples.next(2)
    samples.learned(parts, np.arange(8.0))
    assert samples.take(reply(1, 100)) and samples.minibatches == 4
    batch, parts = samples.next(2)  # the first sample's last minibatch, then the second's first
    assert batch["x"].tolist() == [8, 9, 10, 11, 100, 101, 102, 103]
    samples.learned(parts, np.array([8.0, 9, 10, 11, np.nan, 1, 2, 3]))
    assert sent == [(0, list(range(12)), [float(p) for p in range(12)])], "the used-up sample went home, once"
    samples.take(reply(0, 200))
    samples.take(reply(0, 300))  # a third sample held: the oldest (the second, half used) retires
    assert sent[1] == (1, [101, 102, 103], [1.0, 2.0, 3.0]), "its used minibatch's finite priorities"
    assert samples.minibatches == 6 and samples.transitions == 48
    with pytest.raises(ValueError, match="7 minibatches asked for"):
        samples.next(7)


def test_surreal_run_plans_k_ranks_with_torchruns_variables_and_one_rendezvous(tmp_path):
    cfg = load_config(["learner.replicas=3", "algo.minibatch_size=96"])
    ranks = [s for s in local.plan_processes(cfg, tmp_path, {}) if s.role == "learner"]
    assert [s.name for s in ranks] == ["learner", "learner-1", "learner-2"]
    assert {s.group for s in ranks} == {"learner"}
    assert [s.env["RANK"] for s in ranks] == ["0", "1", "2"] == [s.env["LOCAL_RANK"] for s in ranks]
    assert {(s.env["WORLD_SIZE"], s.env["MASTER_ADDR"], s.env["MASTER_PORT"]) for s in ranks} == {
        ("3", "127.0.0.1", ranks[0].env["MASTER_PORT"])
    }
    alone = [s for s in local.plan_processes(load_config([]), tmp_path, {}) if s.role == "learner"]
    assert [s.name for s in alone] == ["learner"] and alone[0].group is None and "RANK" not in alone[0].env


def test_a_failed_rank_restarts_its_whole_group_and_only_its_failure_counts(tmp_path):
    body = textwrap.dedent(
        """
        import os, sys, time
        with open(sys.argv[1], "a") as f:
            f.write(os.environ["SURREAL_INDEX"] + "\\n")
        time.sleep(600)
        """
    )
    (tmp_path / "rank.py").write_text(body)
    starts = tmp_path / "starts"

    def rank(index: int) -> ProcessSpec:
        argv = [sys.executable, str(tmp_path / "rank.py"), str(starts)]
        env = {"SURREAL_INDEX": str(index), "PATH": "/usr/bin:/bin"}
        return ProcessSpec("learner" if index == 0 else f"learner-{index}", "learner", index, argv, env, group="g")

    lines = lambda: starts.read_text().split() if starts.exists() else []  # noqa: E731
    with Supervisor(tmp_path / "logs", report=lambda _: None) as supervisor:
        for index in range(2):
            supervisor.start(rank(index))
        wait_until(lambda: sorted(lines()) == ["0", "1"], 60)
        names = ("learner", "learner-1")
        pids = {name: psutil.Process(pid) for name, pid in zip(names, supervisor.alive_pids(), strict=True)}
        pids["learner-1"].send_signal(signal.SIGKILL)

        def both_started_again() -> bool:
            supervisor.poll()
            return sorted(lines()) == ["0", "0", "1", "1"] and len(supervisor.running("learner")) == 2

        wait_until(both_started_again, 60)
        assert not pids["learner"].is_running() or pids["learner"].status() == psutil.STATUS_ZOMBIE
        assert supervisor.restarts() == {"learner": 0, "learner-1": 1}


# Each kind of group's run: its overrides, its env steps, and the updates (metrics rows') to reach before the kill.
GROUP_RUNS = {
    # On-policy: rank 0 orders every PPO update's batch to rank 1.
    "ppo": (("env=InvertedPendulum-v5", "actors=2", "steps=36864", "learner.checkpoint_interval=2"), 36864, 4),
    # Off-policy: DDPG on Pendulum (tests/test_local_run.py's settings), each rank sampling its own prioritized
    # minibatches; a checkpoint every 500 gradient steps (rows of 250).
    "ddpg": ((*DDPG_PENDULUM, "actors=2", "steps=12000", "replay.mode=prioritized", "learner.checkpoint_interval=2"),
             12000, 3000),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(GROUP_RUNS))
def test_a_rank_sigkilled_mid_run_restarts_the_group_from_rank_0s_checkpoint_without_a_hang(tmp_path, kind):
    """Rank 1 SIGKILLed mid-run: the group starts again from rank 0's checkpoint and the run completes (no hang, no
    metrics row twice). Off-policy, the run also learns (DDPG's eval return on Pendulum well above a random policy's
    -1,200 to -1,600), rank 1 sampled its own minibatches from the replay before and after the kill, and the
    episodes reached rank 0, which counts them (its requests alone ask for them)."""
    overrides, steps, kill_at = GROUP_RUNS[kind]
    run = LocalRun(tmp_path, f"group-{kind}", *overrides, "learner.replicas=2", "learner.group_timeout_s=30")
    try:
        wait_until(lambda: run.updates() >= kill_at, 240)
        run.role("learner-1").send_signal(signal.SIGKILL)
        summary = run.wait(400)
        assert summary["status"] == "completed", summary
        assert summary["restarts"]["learner-1"] >= 1
        log = (run.run_dir / "logs" / "learner.log").read_text()
        assert "resumed at update" in log, "rank 0 started again from its checkpoint"
        rows = read_metrics(run.run_dir / "metrics.jsonl")
        updates = [r["updates"] for r in rows if r["updates"]]  # the warm-up's rows, before the first update, say 0
        if kind == "ppo":
            assert updates == list(range(1, len(updates) + 1)), "one row per update, none twice"
        else:
            assert updates == sorted(set(updates)), "no row twice"
            assert summary["eval_return_mean"] > -400, summary
            assert summary["train_return_mean"] is not None, "rank 0 counted the episodes"
            rank_1 = (run.run_dir / "logs" / "learner-1.log").read_text()  # every incarnation's, one after another
            assert "rank 1 samples its own minibatches from 1 replay shard(s) over CURVE" in rank_1
            before_kill = rank_1[: rank_1.rindex("joined the learner group")]
            assert re.search(r"rank 1: \d+ updates, [1-9]\d* transitions sampled", before_kill), "rank 1's own samples"
            finished = re.findall(r"rank 1: finish after \d+ updates, (\d+) transitions sampled", rank_1)
            assert finished and int(finished[-1]) > 0, "and after the group started again"
        assert summary["env_steps"] >= steps
        run.assert_nothing_left()
    finally:
        run.close()


def test_serial_mode_refuses_a_group_and_a_sweeps_values_put_it_on_the_chart(tmp_path):
    from surreal import api
    from surreal.commands.helm_values import member_values

    with pytest.raises(ConfigError, match="each rank is a process"):
        api.start(overrides=["learner.replicas=2"], mode="serial", runs_root=tmp_path)
    values = member_values({"experiment": {"learner": {"eval_episodes": 2}}}, ["learner.replicas=2"], "m-0")
    assert values["learner"] == {"replicas": 2}
    assert values["experiment"]["learner"] == {"eval_episodes": 2}, "the chart sets experiment.learner.replicas"
