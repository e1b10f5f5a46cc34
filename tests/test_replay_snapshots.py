"""Replay snapshots: the file format round-trips every buffer kind exactly (data, ids, cursor, books, sum-tree
priorities, FIFO chunks), a capture written while ingest goes on is the state at capture (or, past its guard
band, no file at all), a damaged, truncated or foreign file is set aside with one log line, writes are atomic,
and the schedule writes only what changed."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import sys
import threading

import numpy as np
import pytest

from conftest import wait_until
from surreal.proto.wire import Chunk, FifoReply, chunk_meta, encode_chunk
from surreal.replay.buffers import Overrun
from surreal.replay.shard import ReplayShard
from surreal.replay.snapfile import MAGIC, Capture, SnapshotError, read_snapshot, write_snapshot
from surreal.replay.snapshot import WRITER_NICE, Snapshots, SnapshotStore

log = logging.getLogger("test.snapshots")
IDENTITY = {"algo": "ddpg", "env": "Pendulum-v1", "mode": "uniform", "capacity": 100, "shard": 0}


def chunk(value: float, T: int = 4, K: int = 2) -> dict:
    """Transitions tagged with `value`, with a nested key and a bool array (every dtype kind the wire carries)."""
    return {
        "obs": np.full((T, K, 3), value, np.float32),
        "extra": {"done": np.full((T, K), int(value) % 2 == 0)},
        "count": np.full((T, K), int(value), np.int64),
    }


def message(arrays: dict, version: int = 0, actor: int = 0):
    """The experience message an actor sends for `arrays`."""
    return encode_chunk(Chunk(arrays, version, actor), "")


def filled(mode: str, capacity: int = 100, chunks: int = 30, **kwargs) -> ReplayShard:
    replay = ReplayShard(mode, capacity, **kwargs)
    for i in range(chunks):  # 8 transitions each: 240 into a capacity of 100 wraps the ring
        replay.add(message(chunk(i), version=i, actor=1))
    return replay


def snapshot_of(replay: ReplayShard, guard: int = 16) -> Capture:
    taken = replay.capture(guard)
    assert taken is not None
    return taken


def write(path, replay) -> int:
    taken = snapshot_of(replay)
    return write_snapshot(path, IDENTITY, taken.books, taken.arrays, taken.verify)


def assert_same_transitions(a: ReplayShard, b: ReplayShard) -> None:
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
    replay.sample(64)
    if mode == "prioritized":
        slots = np.arange(0, replay.storage.size, 3)
        replay.update_priorities(slots, replay.storage.ids[slots], np.linspace(0.1, 50.0, len(slots)))
    path = tmp_path / "replay-0000000001.snap"
    nbytes = write(path, replay)
    assert nbytes == path.stat().st_size
    fresh = ReplayShard(mode, 100)
    assert fresh.restore(read_snapshot(path, IDENTITY)) == replay.storage.size
    assert_same_transitions(replay, fresh)
    assert fresh.storage.served == replay.storage.served == 64
    if mode == "prioritized":
        tree, again = replay.sampler.tree, fresh.sampler.tree
        np.testing.assert_array_equal(tree._sums, again._sums)
        np.testing.assert_array_equal(tree._mins, again._mins)
        assert fresh.sampler.max_priority == replay.sampler.max_priority
    for r in (replay, fresh):  # both go on the same way: slots, insertion ids, new entries' priority
        r.add(message(chunk(99)))
    assert_same_transitions(replay, fresh)
    if mode == "prioritized":
        np.testing.assert_array_equal(replay.sampler.tree._sums, fresh.sampler.tree._sums)
    arrays = fresh.sample(256).transitions
    np.testing.assert_array_equal(arrays["count"], fresh.storage.data["count"][arrays["slots"]])


def test_a_fifo_round_trips_its_chunks_in_order_with_their_metadata_and_books(tmp_path):
    replay = filled("fifo", capacity=100, chunks=15)  # 120 into 100: the oldest evicted
    replay.sample(16)  # two chunks served
    path = tmp_path / "replay-0000000001.snap"
    write(path, replay)
    fresh = ReplayShard("fifo", 100)
    assert fresh.restore(read_snapshot(path, IDENTITY)) == replay.stats()["size"]
    assert fresh.stats() == replay.stats()
    ours, theirs = fresh.sample(1000), replay.sample(1000)
    assert isinstance(ours, FifoReply) and isinstance(theirs, FifoReply)
    assert [chunk_meta(o, o.incarnation) for o in ours.chunks] == [chunk_meta(t, t.incarnation) for t in theirs.chunks]
    assert (ours.chunks[0].version, ours.chunks[0].actor, ours.chunks[0].env_steps) == (5, 1, 8)
    ours, theirs = ours.chunks, theirs.chunks
    for o, t in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(o.arrays["extra"]["done"], t.arrays["extra"]["done"])
        np.testing.assert_array_equal(o.arrays["count"], t.arrays["count"])


@pytest.mark.parametrize("mode", ["uniform", "prioritized"])
# part-filled (free slots first, then the wrap), full, and full with the guard band wrapping past the ring's end
@pytest.mark.parametrize("chunks", [8, 30, 23])
@pytest.mark.parametrize("during", [0, 2, 3, 7, 40])  # chunks of 8 written while the thread reads the ring
def test_a_capture_written_while_ingest_goes_on_is_the_state_at_capture_or_nothing(tmp_path, mode, chunks, during):
    replay = filled(mode, capacity=100, chunks=chunks)
    before = ReplayShard(mode, 100)
    before.restore(read_snapshot_of(tmp_path / "before.snap", replay))  # a reference copy, written with no ingest
    taken = replay.capture(guard=20)
    assert taken is not None
    for i in range(during):  # what the actors write while the thread is reading: after capture, before verify
        replay.add(message(chunk(100 + i)))
    path = tmp_path / "replay-0000000001.snap"
    budget = 100 - before.storage.size + 20  # free slots, then the guard band
    if during * 8 > budget:
        with pytest.raises(Overrun):
            write_snapshot(path, IDENTITY, taken.books, taken.arrays, taken.verify)
        assert not path.exists(), "an overrun file is never published"
        return
    write_snapshot(path, IDENTITY, taken.books, taken.arrays, taken.verify)
    fresh = ReplayShard(mode, 100)
    fresh.restore(read_snapshot(path, IDENTITY))
    assert_same_transitions(before, fresh)
    if mode == "prioritized":
        np.testing.assert_array_equal(before.sampler.tree._sums, fresh.sampler.tree._sums)


def read_snapshot_of(path, replay):
    write(path, replay)
    return read_snapshot(path, IDENTITY)


def test_an_empty_replay_captures_nothing():
    assert ReplayShard("uniform", 10).capture(16) is None and ReplayShard("fifo", 10).capture(16) is None


# -- what is refused --------------------------------------------------------------------------------------


def saved(tmp_path, identity=IDENTITY, chunks=30) -> tuple[SnapshotStore, ReplayShard]:
    store = SnapshotStore(tmp_path, identity)
    replay = filled("uniform", chunks=chunks)
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
    fresh = ReplayShard("uniform", 100)
    with caplog.at_level(logging.WARNING):
        assert store.restore(fresh.restore, log) == tmp_path / "replay-0000000001.snap"
    assert len(caplog.records) == 1 and caplog.records[0].getMessage().endswith(f"set aside as {path.name}.corrupt")
    assert (tmp_path / f"{path.name}.corrupt").exists() and not path.exists()
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
    fresh = ReplayShard("uniform", 100)
    with caplog.at_level(logging.WARNING):
        assert store.restore(fresh.restore, log) is None
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
        write_snapshot(path, IDENTITY, {}, {"x": [np.array([object()])]})


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "x", "dtype": "<f4", "shape": [2**62, 2**62]},  # sizes that would overflow int64 or memory
        {"name": "x", "dtype": "|O", "shape": [1]},  # an object array
        {"name": "x", "dtype": [["a", "<f4"]], "shape": [1]},  # a structured one
    ],
)
def test_a_forged_header_is_corrupt_before_anything_is_allocated(tmp_path, spec):
    header = json.dumps({"format": "surreal-replay-snapshot", "version": 1, "identity": IDENTITY, "arrays": [spec]})
    body = MAGIC + struct.pack("<Q", len(header)) + header.encode() + bytes(8)
    path = tmp_path / "replay-0000000001.snap"
    path.write_bytes(body + hashlib.sha256(body).digest())
    with pytest.raises(SnapshotError, match="corrupt"):
        read_snapshot(path, IDENTITY)


def test_books_that_do_not_fit_the_arrays_are_corrupt_and_the_replay_is_left_untouched(tmp_path, caplog):
    store, replay = saved(tmp_path)
    taken = snapshot_of(replay)
    taken.books["cursor"] = 7  # a ring holding 99 of 100 has its cursor at 99
    taken.arrays["ids"] = [taken.arrays["ids"][0][:-1]]
    store.save(taken)
    state = read_snapshot(store.paths()[-1], IDENTITY)
    fresh = ReplayShard("uniform", 100)
    with pytest.raises(ValueError):
        fresh.restore(state)
    assert fresh.stats()["size"] == 0 and not fresh.storage.data, "nothing half-restored"
    with caplog.at_level(logging.WARNING):
        assert store.restore(fresh.restore, log) == tmp_path / "replay-0000000001.snap"
    assert (tmp_path / "replay-0000000002.snap.corrupt").exists()


# -- the folder and the schedule --------------------------------------------------------------------------


def test_the_store_keeps_the_newest_two_and_a_write_cut_short_leaves_them(tmp_path):
    store, replay = saved(tmp_path)
    for _ in range(3):
        store.save(snapshot_of(replay))
    assert [p.name for p in store.paths()] == ["replay-0000000003.snap", "replay-0000000004.snap"]
    taken = snapshot_of(replay)
    taken.verify = lambda: (_ for _ in ()).throw(OSError("disk full"))  # fails after the body is written
    with pytest.raises(OSError):
        store.save(taken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay-0000000003.snap", "replay-0000000004.snap"]
    (tmp_path / ".replay-0000000005.snap.tmp").write_bytes(b"half a snapshot")  # a shard killed mid-write
    reopened = SnapshotStore(tmp_path, IDENTITY)  # a restarted shard clears it
    assert not (tmp_path / ".replay-0000000005.snap.tmp").exists()
    fresh = ReplayShard("uniform", 100)
    assert reopened.restore(fresh.restore, log) == tmp_path / "replay-0000000004.snap"


def test_the_schedule_writes_in_the_background_only_when_something_changed(tmp_path):
    replay = filled("uniform", chunks=5)
    store = SnapshotStore(tmp_path, IDENTITY)
    snapshots = Snapshots(store, replay, interval_s=0.01, log=log)
    try:
        assert snapshots.final() is None and store.paths() == [], "unchanged since it started: nothing to write"
        replay.add(message(chunk(7)))
        written = wait_until(lambda: snapshots.tick(float("inf")), 30)
        assert written.transitions == 48 and written.nbytes == written.path.stat().st_size
        for _ in range(20):  # nothing changed since: ticks write nothing more
            assert snapshots.tick(float("inf")) is None
        assert len(store.paths()) == 1 and snapshots.final() is None
        replay.sample(8)  # sampling changes the books
        final = snapshots.final()
        assert final is not None and final.path.name == "replay-0000000002.snap"
        assert read_snapshot(final.path, IDENTITY).books["served"] == 8
        assert replay.change_token() == snapshots.schedule.token
    finally:
        snapshots.close()


def thread_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own niceness is Linux's")
def test_periodic_snapshots_yield_the_cpu_to_the_loop_and_the_last_is_written_at_the_loops_priority(tmp_path):
    replay = filled("uniform", chunks=5)
    store = SnapshotStore(tmp_path, IDENTITY)
    snapshots = Snapshots(store, replay, interval_s=0.01, log=log)
    niceness: list[int] = []
    real_save = store.save

    def save(captured):
        niceness.append(thread_nice())
        return real_save(captured)

    store.save = save
    try:
        replay.add(message(chunk(7)))
        wait_until(lambda: snapshots.tick(float("inf")), 30)
        replay.sample(8)
        assert snapshots.final() is not None
    finally:
        snapshots.close()
    loop = thread_nice()
    assert niceness == [min(19, loop + WRITER_NICE), loop], "periodic: nicer than the loop; final: the loop's own"


def test_a_failing_disk_is_logged_and_the_shard_goes_on(tmp_path, caplog):
    replay = filled("uniform", chunks=5)
    store = SnapshotStore(tmp_path / "shard", IDENTITY)
    snapshots = Snapshots(store, replay, interval_s=0.01, log=log)
    replay.add(message(chunk(7)))
    (tmp_path / "shard").rename(tmp_path / "gone")  # the folder vanishes under the shard
    with caplog.at_level(logging.WARNING):
        assert snapshots.final() is None
    assert "replay snapshot failed" in caplog.records[-1].getMessage()
    (tmp_path / "gone").rename(tmp_path / "shard")
    assert snapshots.final() is not None, "the next snapshot tries again"
    snapshots.close()


def test_a_snapshot_ingest_outran_is_abandoned_and_retried_with_a_larger_guard(tmp_path, caplog):
    replay = filled("uniform", chunks=30)
    store = SnapshotStore(tmp_path, IDENTITY)
    snapshots = Snapshots(store, replay, interval_s=0.01, log=log)
    snapshots.guard = 8
    reading, written = threading.Event(), threading.Event()
    real_save = store.save

    def slow_save(taken):  # the thread reads the ring while the test plays the actors
        reading.set()
        written.wait(30)
        return real_save(taken)

    store.save = slow_save  # type: ignore[method-assign]
    try:
        replay.add(message(chunk(50)))
        assert snapshots.tick(float("inf")) is None and reading.wait(30)
        for i in range(3):  # 24 transitions over a guard band of 8
            replay.add(message(chunk(60 + i)))
        written.set()
        with caplog.at_level(logging.INFO):
            assert wait_until(lambda: snapshots.writing is not None and snapshots.writing.done(), 30)
            assert snapshots.tick(float("inf")) is None
        assert "abandoned" in caplog.records[-1].getMessage() and snapshots.guard == 16
        assert store.paths() == [] and list(tmp_path.iterdir()) == []
        store.save = real_save  # type: ignore[method-assign]
        done = wait_until(lambda: snapshots.tick(float("inf")), 30)
        fresh = ReplayShard("uniform", 100)
        assert store.restore(fresh.restore, log) == done.path
        assert_same_transitions(replay, fresh)
    finally:
        written.set()
        snapshots.close()


def test_a_snapshot_restores_into_the_declared_layout_and_one_of_other_fields_is_set_aside(tmp_path, caplog):
    """A shard laid out by the experiment restores a snapshot of its own layout; one of other fields (a shard that a
    hostile first chunk laid out, before layouts were declared) does not fit, is set aside, and the shard starts
    empty in its declared layout."""
    from surreal.proto.wire import Field

    layout = {
        "obs": Field(np.dtype(np.float32), (3,)),
        "extra/done": Field(np.dtype(bool)),
        "count": Field(np.dtype(np.int64)),
    }
    ours = ReplayShard("uniform", 64, layout=layout)
    ours.add(message(chunk(1.0)))
    store = SnapshotStore(tmp_path / "ours", IDENTITY)
    captured = ours.capture(16)
    assert captured is not None
    store.save(captured)
    fresh = ReplayShard("uniform", 64, layout=layout)
    assert store.restore(fresh.restore, logging.getLogger("test")) is not None
    assert fresh.storage.size == 8 and fresh.storage.layout == layout

    theirs = ReplayShard("uniform", 64)  # laid out by a first chunk of another observation size
    theirs.add(message({**chunk(1.0), "obs": np.zeros((4, 2, 5), np.float32)}))
    other = SnapshotStore(tmp_path / "theirs", IDENTITY)
    captured = theirs.capture(16)
    assert captured is not None
    other.save(captured)
    declared = ReplayShard("uniform", 64, layout=layout)
    with caplog.at_level(logging.WARNING):
        assert other.restore(declared.restore, logging.getLogger("test")) is None
    assert "set aside" in caplog.text and declared.storage.size == 0
    assert declared.storage.data["obs"].shape == (64, 3)


# -- what was written before ------------------------------------------------------------------------------


def test_a_snapshot_spelled_out_as_format_1_lays_it_out_restores(tmp_path):
    """The books' keys are the file format (each storage's and sampler's `TypedDict`): files written by earlier code,
    spelled out here by hand, restore into today's storages and samplers."""
    path = tmp_path / "replay-0000000001.snap"
    books = {"size": 3, "cursor": 3, "added": 3, "served": 5, "max_priority": 2.5}
    ring = {"data/x": [np.arange(3.0).reshape(3, 1)], "ids": [np.arange(1, 4, dtype=np.uint64)]}
    write_snapshot(path, IDENTITY, books, {**ring, "priorities": [np.array([1.0, 2.0, 0.5])]})
    shard = ReplayShard("prioritized", 10)
    assert shard.restore(read_snapshot(path, IDENTITY)) == 3
    assert shard.stats() == {"size": 3, "capacity": 10, "added": 3, "served": 5, "dropped": 0}
    assert shard.sampler.max_priority == 2.5 and shard.sampler.tree.total == 3.5
    meta = {"version": 4, "incarnation": "a", "actor": 2, "env_steps": 8, "episode_returns": [1.5]}
    books = {"items": [{"meta": {**meta, "episode_lengths": [3]}, "transitions": 8}], "added": 16, "served": 8}
    write_snapshot(path, IDENTITY, {**books, "dropped": 0, "dropped_chunks": 0}, {"fifo/0/obs": [np.ones((4, 2, 3))]})
    fifo = ReplayShard("fifo", 100)
    assert fifo.restore(read_snapshot(path, IDENTITY)) == 8
    (held,) = fifo.sample(100).chunks
    assert (held.version, held.incarnation, held.actor, held.env_steps, held.episode_returns) == (4, "a", 2, 8, [1.5])


@pytest.mark.parametrize("mode", ["fifo", "uniform"])
def test_a_shard_checkpoint_without_a_replay_or_generator_loads_as_one_written_before(mode):
    """Checkpoints written before every shard kept a generator and captured an empty ring hold None there."""
    shard = ReplayShard(mode, 100, seed=1)
    before = {**shard.state(), "replay": None, "rng": None, "env_steps_in": 40, "actors_heard": [3]}
    fresh = ReplayShard(mode, 100, seed=1)
    fresh.load_state(before)
    assert fresh.stats()["size"] == 0 and fresh.env_steps_in == 40 and fresh.actors_heard == {3}
    assert fresh.rng.bit_generator.state == shard.rng.bit_generator.state


@pytest.mark.parametrize("mode", ["fifo", "uniform", "prioritized"])
def test_an_empty_shards_checkpoint_loads_with_its_books(mode):
    shard = filled(mode, chunks=3)
    shard.sample(24)  # a FIFO is empty after it, with its books; a ring keeps what it holds
    fresh = ReplayShard(mode, 100)
    fresh.load_state(shard.state())
    assert fresh.stats() == shard.stats() and fresh.change_token() == shard.change_token()
    empty = ReplayShard(mode, 100)
    empty.load_state(ReplayShard(mode, 100).state())
    assert empty.stats()["size"] == 0 and empty.capture(16) is None
