"""Resume equals never stopping: a serial run stopped at update k (checkpointed as a stopped learner is) and
resumed from its run folder in a fresh run ends, at update N, with the very state of the same run never
stopped, bit for bit: parameters, optimizer state, normalizer statistics, counters, what the learner's feed
held, every generator (the learner's, the actors' sampling and noise, each env's own, the replay's sampling,
the process-wide ones), the envs mid-episode, the replay's contents, the ps's blob, and metrics.jsonl.

Each run ends with the checkpoint a stop at N writes, and the two checkpoints are compared leaf by leaf. The
only thing allowed to differ is the learner's incarnation, a random name per learner process (each run keeps
one throughout: the resumed run the name of the run it resumes).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from surreal.config import load_config
from surreal.metricsfile import read_metrics
from surreal.run.serial import SerialResumeError, run_serial
from surreal.runtime.checkpoint import CheckpointStore, unpack

CASES = {
    # PPO in lockstep (deterministic mode) on MuJoCo: terminations, a whole integration state per env. Every algorithm
    # under its own flow control (staleness, replay ratio, lock-step generations), recurrent PPO, TD3 and CrossQ are
    # in tests/test_contract.py, which uses this module's comparison.
    "ppo": (
        ["algo=ppo", "env=InvertedPendulum-v5", "deterministic=true", "actors=1"]
        + ["topology.envs_per_actor=2"]
        + ["actor.chunk_steps=32", "algo.batch_size=128", "algo.minibatch_size=32", "algo.update_epochs=2"]
        + ["algo.hidden_sizes=[16,16]"],
        3,
        8,
    ),
    # ES: perturbation draws and each env's reset generator (every chunk starts its episodes afresh); the damaged
    # checkpoints below stop it.
    "es": (
        ["algo=es", "env=InvertedPendulum-v5", "deterministic=true", "actors=1"]
        + ["topology.envs_per_actor=2"]
        + ["algo.batch_size=8", "algo.pairs_per_chunk=4", "algo.hidden_sizes=[8]", "algo.noise_table_size=100000"],
        2,
        6,
    ),
}
COMMON = ["device=cpu", "seed=5", "steps=10000000", "learner.checkpoint_interval=1000", "learner.keep_checkpoints=5"]


def final_checkpoint(run_dir: Path) -> dict[str, Any]:
    path = CheckpointStore(run_dir / "checkpoints", 5).paths()[-1]
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {**state, "feed": unpack(state["feed"]), "extra": unpack(state["extra"])}


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where `a` and `b` differ (tensors and arrays bit for bit, NaN equal to NaN); incarnations are skipped."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"]
        return [d for k in a if not str(k).endswith("incarnation") for d in differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}/{i}")]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        a, b = a.detach().contiguous().numpy(), b.detach().contiguous().numpy()
    if hasattr(a, "dtype") and hasattr(b, "dtype"):  # arrays (and tensors, as arrays): their bytes
        same = a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        return [] if same else [f"{path}: arrays differ"]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if type(a) is type(b) and a == b else [f"{path}: {a!r} != {b!r}"]


def incarnations(state: Any) -> set[str]:
    """Every incarnation named anywhere in a checkpoint."""
    if isinstance(state, dict):
        found = {v for k, v in state.items() if str(k).endswith("incarnation") and isinstance(v, str)}
        return found.union(*(incarnations(v) for v in state.values()))
    if isinstance(state, list):
        return set().union(*(incarnations(v) for v in state))
    return set()


def without_wall_times(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if not k.startswith("time")} for row in rows]


def assert_resumed_as_straight(straight: Path, resumed: Path, updates: int) -> None:
    """The run stopped and resumed ended where the straight run did: the same final checkpoint to the bit, one
    incarnation each (the resume carried the run on, it did not start one), the same metrics but wall times."""
    a, b = final_checkpoint(straight), final_checkpoint(resumed)
    assert a["counters"]["updates"] == b["counters"]["updates"] >= updates
    assert len(incarnations(a)) == 1 and len(incarnations(b)) == 1
    assert differences(a, b) == []
    rows_a, rows_b = read_metrics(straight / "metrics.jsonl"), read_metrics(resumed / "metrics.jsonl")
    assert rows_a and without_wall_times(rows_a) == without_wall_times(rows_b)


def test_a_lock_step_run_stopped_and_resumed_ends_as_the_run_never_stopped(tmp_path):
    torch.set_num_threads(1)
    overrides, k, n = CASES["ppo"]
    cfg = load_config([*COMMON, *overrides])
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"

    assert run_serial(cfg, straight, stop_after_updates=n) is None
    assert run_serial(cfg, resumed, stop_after_updates=k) is None
    stopped = final_checkpoint(resumed)
    assert stopped["counters"]["updates"] >= k
    # The stop falls where the state is hard to carry over, or the test would show little.
    elapsed = [e for actor in stopped["extra"]["actors"] for env in actor["envs"] for e in env["elapsed_steps"] if e]
    assert elapsed, "mid-episode at the stop"
    assert run_serial(cfg, resumed, resume=True, stop_after_updates=n) is None

    assert_resumed_as_straight(straight, resumed, n)


def test_a_serial_resume_refuses_a_checkpoint_without_the_serial_world(tmp_path):
    """A learner checkpoint past update 0 without the actors', replay's and ps's state (a process learner's)
    cannot resume exactly: serial mode says so rather than continuing differently."""
    overrides, k, _ = CASES["es"]
    cfg = load_config([*COMMON, *overrides])
    assert run_serial(cfg, tmp_path, stop_after_updates=k) is None
    store = CheckpointStore(tmp_path / "checkpoints", 5)
    path = store.paths()[-1]
    state = torch.load(path, map_location="cpu", weights_only=True)
    del state["extra"]
    torch.save(state, path)
    with pytest.raises(SerialResumeError, match="holds no serial state"):
        run_serial(cfg, tmp_path, resume=True, stop_after_updates=k + 1)


def test_a_checkpoint_whose_feed_does_not_unpack_is_set_aside_for_the_one_before(tmp_path):
    """What the feed held is part of what restores: damaged, the whole checkpoint is set aside (not a learner
    resumed with half its state), and the one before it is used."""
    overrides, k, _ = CASES["es"]
    cfg = load_config([*COMMON, *overrides])
    assert run_serial(cfg, tmp_path, stop_after_updates=k) is None
    path = CheckpointStore(tmp_path / "checkpoints", 5).paths()[-1]
    state = torch.load(path, map_location="cpu", weights_only=True)
    state["feed"] = {"queued_chunks": [{"__ndarray__": "|O", "shape": [1], "data": torch.zeros(8, dtype=torch.uint8)}]}
    torch.save(state, path)
    assert run_serial(cfg, tmp_path, resume=True, stop_after_updates=k) is None
    assert path.with_name(path.name + ".corrupt").exists()
    assert final_checkpoint(tmp_path)["counters"]["updates"] == k, "resumed from an earlier one and went on"
