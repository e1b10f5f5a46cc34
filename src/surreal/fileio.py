"""Writing a file so that a reader sees the old content or the new, never half of it.

The run folder's JSON, the experiment config roles read through SURREAL_CONFIG, and the learner's
checkpoints are all read by other processes (or by a learner restarted after a kill) while they may be
rewritten: each is written to a hidden temporary name beside it and renamed over it, which POSIX makes
atomic. `durable=True` also fsyncs the file and then its folder, so the rename survives a power cut;
what only has to survive a killed process (the launcher's files) skips that cost.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_writer(path: str | os.PathLike[str], *, durable: bool = False) -> Iterator[BinaryIO]:
    """A binary file to write that replaces `path` when the block ends without an exception; after an
    exception `path` is untouched (the temporary `.<name>.tmp` beside it may remain)."""
    final = Path(path)
    tmp = final.with_name(f".{final.name}.tmp")
    with open(tmp, "wb") as f:
        yield f
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, final)
    if durable:
        dir_fd = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Replace `path` with `text` as UTF-8 at once (`atomic_writer`, not durable)."""
    with atomic_writer(path) as f:
        f.write(text.encode("utf-8"))
