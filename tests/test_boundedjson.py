"""Every parser of outside bytes is bounded before it parses (surreal/boundedjson.py and the readers that use it, the
wire's msgpack headers, checkpoints, config files): a text over its length, nesting, count or string bounds is one
`ValueError` line naming what, never a `RecursionError`, and never an allocation the bytes ask for."""

from __future__ import annotations

import json
import struct
import zipfile

import msgpack
import numpy as np
import pytest
import torch

from surreal.boundedjson import JsonBounds, JsonBoundsError, loads
from surreal.config import ConfigError, load_config, read_config, save_config
from surreal.metricsfile import parse_row
from surreal.proto.codec import Limits, ProtocolError, decode, encode
from surreal.proto.wire import EXPERIENCE, Chunk, encode_chunk
from surreal.replay.shard import ReplayShard
from surreal.runjson import RUN_JSON, read_json, read_json_strict
from surreal.runtime.checkpoint import MAX_DEPTH, CheckpointError, check_structure, load_checkpoint

BOUNDS = JsonBounds(max_bytes=1 << 20, max_depth=8, max_items=1000, max_string=100)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[" * 200_000 + "]" * 200_000, "nested deeper than 8 levels"),
        ('{"a": ' * 9 + "1" + "}" * 9, "nested deeper than 8 levels"),
        ("[" + ",".join(["1"] * 2000) + "]", "more than 1,000 values"),
        ('{"k": "' + "x" * 101 + '"}', "string of more than 100 characters"),
        ('{"' + "k" * 101 + '": 1}', "string of more than 100 characters"),
        ("[1, NaN]", "NaN is not a number JSON holds"),
        ("[Infinity]", "Infinity is not a number JSON holds"),
        ("[1e999]", "out of a float's range"),
        ("1" * 5000, "not JSON"),  # more digits than Python reads: a ValueError, not a traceback
        ('{"a": 1', "not JSON"),
    ],
    ids=["200,000 deep", "9 deep", "values", "a long value", "a long key", "NaN", "Infinity", "1e999", "digits", "cut"],
)
def test_json_over_its_bounds_or_not_json_is_one_line(text, expected):
    with pytest.raises(JsonBoundsError, match=expected) as refused:
        loads(text, BOUNDS, "probe")
    assert "\n" not in str(refused.value) and str(refused.value).startswith("probe: ")


def test_what_looks_like_structure_inside_a_string_is_a_string():
    text = json.dumps({"a": '[[[[[[[[[[{{{{{{{{{{,,,,\\"]]]]', "b": [1, 2, {"c": "\\\\"}]})
    assert loads(text, BOUNDS, "probe") == json.loads(text)
    assert loads(text.encode(), BOUNDS, "probe") == json.loads(text)


def test_length_and_encoding_are_checked_before_anything_is_decoded():
    with pytest.raises(JsonBoundsError, match="over the 1,048,576-byte limit"):
        loads(b" " * ((1 << 20) + 1), BOUNDS, "probe")
    with pytest.raises(JsonBoundsError, match="not UTF-8"):
        loads(b'{"a": "\xff"}', BOUNDS, "probe")
    assert loads("[1, NaN]", JsonBounds(1 << 20, allow_nan=True), "probe")[0] == 1


def test_run_folder_json_and_metrics_rows_over_their_bounds_are_unreadable_not_a_traceback(tmp_path):
    deep = "[" * 200_000 + "]" * 200_000
    (tmp_path / "reproduce.json").write_text('{"git_sha": ' + deep + "}")
    assert read_json(tmp_path / "reproduce.json") is None
    with pytest.raises(ConfigError, match="nested deeper than"):
        read_json_strict(tmp_path / "reproduce.json")
    (tmp_path / "big.json").write_bytes(b" " * (RUN_JSON.max_bytes + 1))
    with pytest.raises(ConfigError, match="byte limit"):
        read_json_strict(tmp_path / "big.json")
    assert parse_row(deep) is None and parse_row('{"updates": 3, "loss": NaN}')["updates"] == 3

    from surreal.provenance import run_git_sha  # reads reproduce.json, as the learner and evaluator do

    assert isinstance(run_git_sha(tmp_path), str)


def test_a_replay_snapshot_whose_header_nests_deep_is_corrupt_not_a_traceback(tmp_path):
    from surreal.replay.snapfile import MAGIC, SnapshotError, read_snapshot

    header = ("[" * 200_000 + "]" * 200_000).encode()
    (tmp_path / "replay-0000000001.snap").write_bytes(MAGIC + struct.pack("<Q", len(header)) + header + b"\0" * 32)
    with pytest.raises(SnapshotError, match="nested deeper than"):
        read_snapshot(tmp_path / "replay-0000000001.snap", {})


# -- config files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: " + "[" * 100_000 + "]" * 100_000, "flow brackets"),
        ("a: &a [1, 2]\nb: [*a, *a]\n", "anchors and aliases"),
        ("".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "v: 1\n", "nested deeper than 32"),
        ("a: [" + ", ".join(["1"] * 200_000) + "]\n", "more than 131,072 YAML nodes"),
    ],
    ids=["flow nesting", "aliases", "block nesting", "nodes"],
)
def test_a_config_file_over_its_bounds_is_refused_before_yaml_builds_it(tmp_path, text, expected):
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match=expected) as refused:
        read_config(tmp_path / "config.yaml")
    assert "\n" not in str(refused.value)


def test_a_config_the_launcher_writes_reads_back_the_same(tmp_path):
    cfg = load_config(["algo=sac", "env=Pendulum-v1", "env.kwargs.g=9.81"])
    save_config(cfg, tmp_path / "config.yaml")
    assert read_config(tmp_path / "config.yaml") == cfg


# -- the wire's msgpack headers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        b"\x91" * 60_000 + b"\xc0",  # arrays nested 60,000 deep in a 60 kB header
        b"\xdb" + struct.pack(">I", 2**32 - 1) + b"abc",  # a string claiming 4 GiB
        b"\xdf" + struct.pack(">I", 2**31),  # a map claiming 2**31 entries
        b"\xdd" + struct.pack(">I", 2**31),  # an array claiming 2**31 items
        b"\xc6" + struct.pack(">I", 2**31),  # bytes claiming 2 GiB
    ],
    ids=["60,000 deep", "4 GiB string", "2**31 entries", "2**31 items", "2 GiB of bytes"],
)
def test_msgpack_bounds_a_header_by_its_frame_and_its_nesting(header):
    """What msgpack's unpacker itself bounds, shown: every length by the header frame's own size (so nothing it
    claims is allocated), the nesting by its C stack (1,024 levels), and `max_header_bytes` bounds the frame."""
    with pytest.raises(ProtocolError, match="bad_header"):
        decode([header])
    assert msgpack.version >= (1, 0), "max_*_len default to the buffer's size from msgpack 1.0"


def test_a_chunk_whose_metadata_nests_as_deep_as_msgpack_allows_is_stored_without_it():
    """1,000 levels (under msgpack's 1,024) decode; the chunk's metadata is read field by field, so the nesting
    never reaches the shard's books, and a reply of the shard packs as before."""
    deep: object = 0
    for _ in range(1000):
        deep = [deep]
    arrays = {"obs": np.zeros((4, 2, 3), np.float32), "rewards": np.zeros((4, 2), np.float32)}
    message = encode_chunk(Chunk(arrays, version=0, actor=1), "")
    frames = encode(EXPERIENCE, {**message.meta, "deep": deep}, message.arrays)
    assert len(frames[0]) < Limits().max_header_bytes
    shard = ReplayShard("fifo", 100)
    assert shard.add(decode(frames)) == 8
    captured = shard.capture(guard=0)
    assert captured is not None and "deep" not in captured.books["items"][0]["meta"], "nor does its snapshot's"
    reply = shard.sample(8)
    assert len(reply.chunks) == 1


# -- checkpoints -------------------------------------------------------------------------------------------------


def test_a_checkpoints_archive_and_structure_are_bounded(tmp_path):
    good = tmp_path / "ckpt-0000000001.pt"
    torch.save({"learner": {"w": torch.zeros(3)}, "counters": {"updates": 1}}, good)
    assert load_checkpoint(good)["counters"] == {"updates": 1}
    compressed = tmp_path / "compressed.pt"
    with zipfile.ZipFile(good) as source, zipfile.ZipFile(compressed, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry in source.infolist():
            archive.writestr(entry.filename, source.read(entry.filename))
    with pytest.raises(CheckpointError, match="compressed"):
        load_checkpoint(compressed)
    (tmp_path / "pickle.pt").write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(CheckpointError, match="not a torch checkpoint"):
        load_checkpoint(tmp_path / "pickle.pt")
    shared: list = [0]
    for _ in range(40):
        shared = [shared, shared]  # 2**40 values to walk, in 40 containers
    with pytest.raises(CheckpointError, match="more than"):
        check_structure(shared, "shared")
    nested: list = []
    for _ in range(MAX_DEPTH + 1):
        nested = [nested]
    with pytest.raises(CheckpointError, match="nested deeper than"):
        check_structure({"a": nested}, "nested")
