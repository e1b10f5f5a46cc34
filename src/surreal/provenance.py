"""Where a run came from: the git commit and package versions it started with, as reproduce.json records them and
the policy artifact's header repeats. A leaf, so the run service and the roles alike can ask."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from surreal.runjson import read_json

PACKAGES = ("surreal-rl", "numpy", "torch", "gymnasium", "mujoco", "pyzmq", "msgpack", "hydra-core", "omegaconf")
GIT_TIMEOUT_S = 10.0


def git_state(path: Path | None = None) -> tuple[str, bool]:
    """(sha, dirty) of the git checkout this package is imported from; ("unknown", False) otherwise.

    The package file must be tracked by that checkout: a wheel installed into a virtualenv that happens
    to sit inside some repository would otherwise report that repository's sha.
    """
    anchor = (path or Path(__file__)).resolve()

    def git(*args: str) -> subprocess.CompletedProcess[str] | None:
        try:
            return subprocess.run(
                ["git", *args], cwd=anchor.parent, capture_output=True, text=True, timeout=GIT_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired):
            return None

    tracked = git("ls-files", "--error-unmatch", anchor.name)
    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")
    if tracked is None or sha is None or status is None or tracked.returncode or sha.returncode:
        return "unknown", False
    return sha.stdout.strip(), bool(status.stdout.strip())


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def started_record(overrides: Sequence[str]) -> dict[str, Any]:
    """reproduce.json of a new run: the code, the interpreter, the packages and the command that started it."""
    sha, dirty = git_state()
    return {
        "git_sha": sha,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(),
        "executable": sys.executable,
        "cwd": os.getcwd(),
        "command": sys.argv,
        "overrides": list(overrides),
        "started_at": round(time.time(), 3),  # Unix time, as the rows' `time`: their offset from the start
    }


def resumed_record(overrides: Sequence[str]) -> dict[str, Any]:
    """One entry of reproduce.json's `resumes`: when, from which code and with which overrides a run went on."""
    sha, dirty = git_state()
    return {
        "resumed_at": round(time.time(), 3),
        "git_sha": sha,
        "git_dirty": dirty,
        "command": sys.argv,
        "overrides": list(overrides),
    }


def run_git_sha(run_dir: Path | None) -> str:
    """The commit a run was trained from: reproduce.json's (the launcher wrote it), else this checkout's."""
    if run_dir is not None:
        sha = (read_json(run_dir / "reproduce.json") or {}).get("git_sha")  # bounded: the folder may be downloaded
        if isinstance(sha, str):
            return sha
    return git_state()[0]
