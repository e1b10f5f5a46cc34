"""`make local-kind-test` cannot run on this machine (no Docker, no kind); what can be checked here: it stops at
once, before creating anything, with a clear message and a non-zero exit when Docker, its daemon or kind is
missing, and the script is valid bash."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "infra" / "kind" / "kind-test.sh"


def stub(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    calls = tmp_path / "calls"
    full = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CALLS": str(calls), **env}
    return subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=60, check=False)


def test_the_script_is_valid_bash() -> None:
    assert os.access(SCRIPT, os.X_OK)
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)


def test_stops_at_once_without_docker(tmp_path: Path) -> None:
    done = run(tmp_path, DOCKER=str(tmp_path / "docker"), KIND=str(stub(tmp_path / "kind", 'echo "$@" >> "$CALLS"')))
    assert done.returncode != 0
    assert "docker not found on PATH" in done.stderr and "cannot run without it" in done.stderr
    assert not (tmp_path / "calls").exists(), "nothing may be created before the checks pass"


def test_stops_when_the_docker_daemon_is_down(tmp_path: Path) -> None:
    docker = stub(tmp_path / "docker", 'echo "$@" >> "$CALLS"; [ "$1" = info ] && exit 1; exit 0')
    done = run(tmp_path, DOCKER=str(docker), KIND=str(stub(tmp_path / "kind", 'echo "kind $@" >> "$CALLS"')))
    assert done.returncode != 0 and "daemon is not reachable" in done.stderr
    assert (tmp_path / "calls").read_text().splitlines() == ["info"]


def test_stops_without_kind(tmp_path: Path) -> None:
    docker = stub(tmp_path / "docker", "exit 0")
    done = run(tmp_path, DOCKER=str(docker), KIND=str(tmp_path / "no-kind"))
    assert done.returncode != 0 and "kind not found on PATH" in done.stderr


def test_make_target_reports_the_same(tmp_path: Path) -> None:
    done = subprocess.run(
        ["make", "-s", "local-kind-test", f"DOCKER={tmp_path / 'docker'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "docker not found on PATH" in done.stderr
