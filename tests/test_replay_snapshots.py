"""Replay snapshots: the file format round-trips every buffer kind exactly (data, ids, cursor, books, sum-tree
priorities, FIFO chunks), a capture taken while ingest goes on is the state at `finish`, a damaged, truncated
or foreign file is set aside with one log line, writes are atomic, and the schedule writes only what changed."""

from __future__ import annotations

import hashlib
import json
import logging
import struct

import numpy as np
import pytest

from conftest import wait_until
from surreal.replay import make_replay, snapfile
from surreal.replay.buffers import FifoReplay, TransitionReplay
from surreal.replay.snapfile import MAGIC, ShardState, SnapshotError, read_snapshot, write_snapshot
from surreal.replay.snapshot import Snapshots, SnapshotStore, TransitionCapture, capture, change_token, restore

log = logging.getLogger("test.snapshots")
IDENTITY = {"algo": "ddpg", "env": "Pendulum-v1", "mode": "uniform", "capacity": 100, "shard": 0}


def chunk(value: float, T: int = 4, K: int = 2) -> dict:
    """Transitions tagged with `value`, with a nested key and a bool array (every dtype kind the wire carries)."""
    return {
        "obs": np.full((T, K, 3), value, np.float32),
        "extra": {"done": np.full((T, K), int(value) % 2 == 0)},
        "count": np.full((T, K), int(value), np.int64),
    }


def filled(mode: str, capacity: int = 100, chunks: int = 30) -> TransitionReplay | FifoReplay:
    replay = make_replay(mode, capacity)
    for i in range(chunks):  # 8 transitions each: 240 into a capacity of 100 wraps the ring
        replay.add_chunk(chunk(i), {"version": i, "actor": 1}, 8)
    return replay


def snapshot_of(replay) -> ShardState:
    taken = capture(replay)
    assert taken is not None
    taken.copy()
    return taken.finish()


def assert_same_transitions(a: TransitionReplay, b: TransitionReplay) -> None:
    assert a.stats() == b.stats() and a.storage.cursor == b.storage.cursor
    assert a.storage.data.keys() == b.storage.data.keys()
    for key, array in a.storage.data.items():
        np.testing.assert_array_equal(array, b.storage.data[key])
    np.testing.assert_array_equal(a.storage.ids, b.storage.ids)


# -- round trips ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["uniform", "prioritized"])
@pytest.mark.parametrize("chunks", [5, 30])  # part-filled, and wrapped
def test_transition_replays_round_trip_exactly_and_keep_going(tmp_path, mode, chunks):
    replay = filled(mode, chunks=chunks)
    assert isinstance(replay, TransitionReplay)
    replay.sample(64)
    if mode == "prioritized":
        slots = np.arange(0, replay.storage.size, 3)
        replay.update_priorities(slots, replay.storage.ids[slots], np.linspace(0.1, 50.0, len(slots)))
    path = tmp_path / "replay-0000000001.snap"
    nbytes = write_snapshot(path, IDENTITY, snapshot_of(replay))
    assert nbytes == path.stat().st_size
    fresh = make_replay(mode, 100)
    assert restore(fresh, read_snapshot(path, IDENTITY)) == replay.storage.size
    assert isinstance(fresh, TransitionReplay)
    assert_same_transitions(replay, fresh)
    assert fresh.served == replay.served == 64
    if mode == "prioritized":
        tree, again = replay.sampler.tree, fresh.sampler.tree
        np.testing.assert_array_equal(tree._sums, again._sums)
        np.testing.assert_array_equal(tree._mins, again._mins)
        assert fresh.sampler.max_priority == replay.sampler.max_priority
    for r in (replay, fresh):  # both go on the same way: slots, insertion ids, new entries' priority
        r.add_chunk(chunk(99), {}, 8)
    assert_same_transitions(replay, fresh)
    if mode == "prioritized":
        np.testing.assert_array_equal(replay.sampler.tree._sums, fresh.sampler.tree._sums)
    arrays, _ = fresh.sample(256)
    np.testing.assert_array_equal(arrays["count"], fresh.storage.data["count"][arrays["slots"]])


def test_a_fifo_round_trips_its_chunks_in_order_with_their_metadata_and_books(tmp_path):
    replay = filled("fifo", capacity=100, chunks=15)  # 120 into 100: the oldest evicted
    assert isinstance(replay, FifoReplay)
    replay.sample(16)  # two chunks served
    path = tmp_path / "replay-0000000001.snap"
    write_snapshot(path, IDENTITY, snapshot_of(replay))
    fresh = make_replay("fifo", 100)
    assert restore(fresh, read_snapshot(path, IDENTITY)) == replay.fifo.size
    assert fresh.stats() == replay.stats()
    ours, theirs = fresh.sample(1000), replay.sample(1000)
    assert ours[1] == theirs[1] and ours[1]["chunks"][0] == {"version": 5, "actor": 1}
    for key in ours[0]:
        np.testing.assert_array_equal(ours[0][key]["extra"]["done"], theirs[0][key]["extra"]["done"])
        np.testing.assert_array_equal(ours[0][key]["count"], theirs[0][key]["count"])


@pytest.mark.parametrize("mode", ["uniform", "prioritized"])
@pytest.mark.parametrize("during", [0, 3, 12, 20, 40])  # none, some, past the wrap, all of the ring, more
def test_a_capture_is_the_state_at_finish_whatever_ingest_wrote_during_the_bulk_copy(mode, during):
    replay = filled(mode, capacity=100, chunks=8)  # 64 of 100: grows, then wraps during the copy
    assert isinstance(replay, TransitionReplay)
    taken = TransitionCapture(replay)
    taken.copy()  # the snapshot thread's part; the adds below happen after it, as ingest racing it would
    for i in range(during):
        replay.add_chunk(chunk(100 + i), {}, 8)
    state = taken.finish()
    fresh = make_replay(mode, 100)
    restore(fresh, state)
    assert isinstance(fresh, TransitionReplay)
    assert_same_transitions(replay, fresh)


def test_an_empty_replay_captures_nothing():
    assert capture(make_replay("uniform", 10)) is None and capture(make_replay("fifo", 10)) is None


# -- what is refused --------------------------------------------------------------------------------------


def saved(tmp_path, identity=IDENTITY, chunks=30) -> tuple[SnapshotStore, TransitionReplay]:
    store = SnapshotStore(tmp_path, identity)
    replay = filled("uniform", chunks=chunks)
    assert isinstance(replay, TransitionReplay)
    store.save(snapshot_of(replay))
    return store, replay


def flip_byte(path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["body", "header", "digest", "truncated", "appended"])
def test_a_damaged_snapshot_is_set_aside_with_one_line_and_the_previous_one_restored(tmp_path, caplog, damage):
    store, older = saved(tmp_path, chunks=5)
    newer = filled("uniform", chunks=30)
    path, _ = store.save(snapshot_of(newer))
    size = path.stat().st_size
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: size // 2])
    elif damage == "appended":
        path.write_bytes(path.read_bytes() + b"\0")
    else:
        flip_byte(path, {"body": size - 100, "header": len(MAGIC) + 20, "digest": size - 1}[damage])
    fresh = make_replay("uniform", 100)
    with caplog.at_level(logging.WARNING):
        assert store.restore(lambda state: restore(fresh, state), log) == tmp_path / "replay-0000000001.snap"
    assert len(caplog.records) == 1 and caplog.records[0].getMessage().endswith(f"set aside as {path.name}.corrupt")
    assert (tmp_path / f"{path.name}.corrupt").exists() and not path.exists()
    assert isinstance(fresh, TransitionReplay)
    assert_same_transitions(older, fresh)


@pytest.mark.parametrize(
    "other",
    [
        {**IDENTITY, "algo": "td3"},
        {**IDENTITY, "env": "HalfCheetah-v5"},
        {**IDENTITY, "mode": "prioritized"},
        {**IDENTITY, "capacity": 200},
        {**IDENTITY, "shard": 1},
    ],
)
def test_a_foreign_snapshot_is_set_aside_and_the_shard_starts_empty(tmp_path, caplog, other):
    saved(tmp_path, identity=other)
    store = SnapshotStore(tmp_path, IDENTITY)
    fresh = make_replay("uniform", 100)
    with caplog.at_level(logging.WARNING):
        assert store.restore(lambda state: restore(fresh, state), log) is None
    assert len(caplog.records) == 1 and "set aside as replay-0000000001.snap.foreign" in caplog.records[0].getMessage()
    assert store.paths() == [] and fresh.stats()["size"] == 0


def test_another_format_or_version_is_foreign_and_dtypes_are_only_numbers(tmp_path):
    path = tmp_path / "replay-0000000001.snap"
    path.write_bytes(b"\x80\x04not ours at all" + bytes(100))  # e.g. a pickle
    with pytest.raises(SnapshotError, match="foreign"):
        read_snapshot(path, IDENTITY)
    header = json.dumps({"format": "surreal-replay-snapshot", "version": 2, "identity": IDENTITY, "arrays": []})
    body = MAGIC + struct.pack("<Q", len(header)) + header.encode()
    path.write_bytes(body + hashlib.sha256(body).digest())
    with pytest.raises(SnapshotError, match="foreign: format"):
        read_snapshot(path, IDENTITY)
    with pytest.raises(ValueError, match="cannot be snapshotted"):
        write_snapshot(path, IDENTITY, ShardState({}, {"x": np.array([object()])}))


def test_books_that_do_not_fit_the_arrays_are_corrupt_and_the_replay_is_left_untouched(tmp_path, caplog):
    store, replay = saved(tmp_path)
    state = snapshot_of(replay)
    state.books["cursor"] = 7  # a full ring's cursor is where its newest ends: this one is not
    state.arrays["ids"] = state.arrays["ids"][:-1]
    store.save(state)
    fresh = make_replay("uniform", 100)
    assert isinstance(fresh, TransitionReplay)
    with pytest.raises(ValueError):
        restore(fresh, state)
    assert fresh.stats()["size"] == 0 and not fresh.storage.data, "nothing half-restored"
    with caplog.at_level(logging.WARNING):
        assert store.restore(lambda s: restore(fresh, s), log) == tmp_path / "replay-0000000001.snap"
    assert (tmp_path / "replay-0000000002.snap.corrupt").exists()


# -- the folder and the schedule --------------------------------------------------------------------------


def test_the_store_keeps_the_newest_two_and_a_write_cut_short_leaves_them(tmp_path, monkeypatch):
    store, replay = saved(tmp_path)
    for _ in range(3):
        store.save(snapshot_of(replay))
    assert [p.name for p in store.paths()] == ["replay-0000000003.snap", "replay-0000000004.snap"]
    real = snapfile._raw
    calls = iter(range(100))

    def dies_midway(array):
        if next(calls) == 2:
            raise OSError("killed mid-write")
        return real(array)

    monkeypatch.setattr(snapfile, "_raw", dies_midway)  # the third array never reaches the disk
    with pytest.raises(OSError):
        store.save(snapshot_of(replay))
    monkeypatch.setattr(snapfile, "_raw", real)
    assert [p.name for p in store.paths()] == ["replay-0000000003.snap", "replay-0000000004.snap"]
    assert (tmp_path / ".replay-0000000005.snap.tmp").exists()
    reopened = SnapshotStore(tmp_path, IDENTITY)  # a restarted shard clears what a crash left half-written
    assert not (tmp_path / ".replay-0000000005.snap.tmp").exists()
    fresh = make_replay("uniform", 100)
    assert reopened.restore(lambda state: restore(fresh, state), log) == tmp_path / "replay-0000000004.snap"


def test_the_schedule_writes_in_the_background_only_when_something_changed(tmp_path):
    replay = filled("uniform", chunks=5)
    store = SnapshotStore(tmp_path, IDENTITY)
    snapshots = Snapshots(store, replay, interval_s=0.01, log=log)
    try:
        assert snapshots.final() is None and store.paths() == [], "unchanged since it started: nothing to write"
        replay.add_chunk(chunk(7), {}, 8)
        written = wait_until(lambda: snapshots.tick(float("inf")), 30)
        assert written.transitions == 48 and written.nbytes == written.path.stat().st_size
        for _ in range(20):  # nothing changed since: ticks write nothing more
            assert snapshots.tick(float("inf")) is None
        assert len(store.paths()) == 1 and snapshots.final() is None
        replay.sample(8)  # sampling changes the books
        final = snapshots.final()
        assert final is not None and final.path.name == "replay-0000000002.snap"
        assert read_snapshot(final.path, IDENTITY).books["served"] == 8
        assert change_token(replay) == snapshots.token
    finally:
        snapshots.close()


def test_a_failing_disk_is_logged_and_the_shard_goes_on(tmp_path, caplog):
    replay = filled("uniform", chunks=5)
    store = SnapshotStore(tmp_path / "shard", IDENTITY)
    snapshots = Snapshots(store, replay, interval_s=0.01, log=log)
    replay.add_chunk(chunk(7), {}, 8)
    (tmp_path / "shard").rename(tmp_path / "gone")  # the folder vanishes under the shard
    with caplog.at_level(logging.WARNING):
        assert snapshots.final() is None
    assert "replay snapshot failed" in caplog.records[-1].getMessage()
    (tmp_path / "gone").rename(tmp_path / "shard")
    assert snapshots.final() is not None, "the next snapshot tries again"
    snapshots.close()
