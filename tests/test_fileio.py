"""Atomic writes: a reader sees the old file or the new one, and a failed write leaves the old one."""

from __future__ import annotations

import pytest

from surreal.fileio import atomic_write_text, atomic_writer


@pytest.mark.parametrize("durable", [False, True])
def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path, durable):
    path = tmp_path / "summary.json"
    atomic_write_text(path, "old ✓\n")
    with atomic_writer(path, durable=durable) as f:
        f.write(b"new\n")
    assert path.read_bytes() == b"new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_a_write_that_fails_leaves_the_previous_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    atomic_write_text(path, "previous")
    with pytest.raises(RuntimeError), atomic_writer(path, durable=True) as f:
        f.write(b"half of a ")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "previous"
