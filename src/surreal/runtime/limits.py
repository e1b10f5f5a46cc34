"""Process limits a role needs at scale: open files.

Every ZMQ peer (an actor's PUSH on a replay shard, its DEALER on a ps) is one open file descriptor on the server,
and each ZMQ socket adds one of its own (its mailbox). The usual soft limit of 1,024 would refuse the 1,000th
actor: libzmq cannot accept the connection and keeps retrying, so the peer is silently never served. A role
therefore raises its soft RLIMIT_NOFILE to the hard limit at start (an unprivileged process may), and says in
one log line when even the hard limit is below what a large fleet needs. Torch-free.
"""

from __future__ import annotations

import logging
import resource

# Enough for several thousand peers per process (one descriptor each, plus the process's own sockets and files).
OPEN_FILES_WANTED = 16_384


def raise_open_files(log: logging.Logger | None = None) -> int | None:
    """Raise the soft open-file limit to the hard limit; returns the soft limit now in force (None: unlimited).
    With `log`, one warning when that is below `OPEN_FILES_WANTED`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # a hard limit the kernel caps lower (nr_open)
            pass
    if log is not None and soft != resource.RLIM_INFINITY and soft < OPEN_FILES_WANTED:
        log.warning(
            "open-file limit is %d (hard %s), below the %d a large fleet needs: about %d actors can connect; "
            "raise it with `ulimit -Hn` or the container runtime's nofile limit",
            soft,
            "unlimited" if hard == resource.RLIM_INFINITY else hard,
            OPEN_FILES_WANTED,
            max(0, soft - 64),
        )
    return None if soft == resource.RLIM_INFINITY else soft
