"""`surreal run` with every role in plaintext: the launcher's CURVE keys left out, as the chart's
`curve.enabled=false` leaves them out of every pod (no SURREAL_CURVE_DIR: a role then binds and connects without
CURVE). The baseline of bench/atari_curve.py's system runs, which price CURVE end to end; nothing else uses it.

    python -m bench.plaintext_run run preset=ppo-atari env=ALE/Pong-v5 ...   # the arguments `surreal` takes
"""

from __future__ import annotations

import sys
from pathlib import Path

from surreal import cli
from surreal.launch import local


def no_keys(private: Path) -> None:
    """What `launch_keys` hands the roles instead of a folder of keys: none (plaintext)."""
    del private


if __name__ == "__main__":
    local.launch_keys = no_keys  # type: ignore[assignment]  # launch() reads it at call time
    raise SystemExit(cli.main(sys.argv[1:]))
