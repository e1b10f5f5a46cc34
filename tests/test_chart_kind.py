"""`make local-kind-test` cannot run on this machine (no Docker, no kind); what can be checked here: it stops at
once, before creating anything, with a clear message and a non-zero exit when Docker, its daemon or kind is
missing; the script is valid bash; and, with stand-in docker / kind / helm / kubectl that record their calls, it
leaves the logs and `helm test` output CI uploads (kind.yml) and deletes the cluster whether `helm test` passes
or fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import make

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
    done = make("-s", "local-kind-test", f"DOCKER={tmp_path / 'docker'}", timeout_s=120)
    assert done.returncode != 0 and "docker not found on PATH" in done.stderr


KUBECTL_STUB = """echo "kubectl $*" >> "$CALLS"
case "$*" in
  *"get pods -o name"*) printf 'pod/smoke-surreal-learner-0\\npod/smoke-surreal-replay-0\\n' ;;
  *"get pods -o wide"*) echo "NAME READY STATUS RESTARTS" ;;
  *"describe pods"*) echo "Name: smoke-surreal-learner-0" ;;
  *"get events"*) echo "Normal Started" ;;
  *"logs smoke-surreal-learner-0"*"--previous"*) echo "learner before its restart" ;;
  *"--previous"*) echo "previous terminated container not found" >&2; exit 1 ;;
  *"logs smoke-surreal-"*) echo "log of $4" ;;
  *"exec"*"cat /data/run/metrics.jsonl"*) echo '{"env_steps": 4096, "updates": 2}' ;;
  *) echo "kubectl output" ;;
esac"""


def run_with_a_cluster(tmp_path: Path, helm_test_rc: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The script end to end against stand-ins; `helm test` exits with helm_test_rc."""
    artifacts = tmp_path / "artifacts"
    helm = f'echo "helm $*" >> "$CALLS"; [ "$1" = test ] && {{ echo "Phase: Succeeded"; exit {helm_test_rc}; }}; exit 0'
    done = run(
        tmp_path,
        DOCKER=str(stub(tmp_path / "docker", 'echo "docker $*" >> "$CALLS"')),
        KIND=str(stub(tmp_path / "kind", 'echo "kind $*" >> "$CALLS"')),
        HELM=str(stub(tmp_path / "helm", helm)),
        KUBECTL=str(stub(tmp_path / "kubectl", KUBECTL_STUB)),
        IMAGE_TAG="t1",
        KIND_ARTIFACTS=str(artifacts),
    )
    return done, artifacts


def kind_calls(tmp_path: Path) -> list[str]:
    return [line for line in (tmp_path / "calls").read_text().splitlines() if line.startswith("kind ")]


def test_a_passing_run_leaves_logs_and_helm_test_output_and_deletes_the_cluster(tmp_path: Path) -> None:
    done, artifacts = run_with_a_cluster(tmp_path, helm_test_rc=0)
    assert done.returncode == 0, done.stderr
    assert "Phase: Succeeded" in (artifacts / "helm-test.log").read_text()
    assert (artifacts / "logs" / "smoke-surreal-learner-0.log").read_text().strip() == "log of smoke-surreal-learner-0"
    assert (artifacts / "logs" / "smoke-surreal-replay-0.log").exists()
    assert "before its restart" in (artifacts / "logs" / "smoke-surreal-learner-0.previous.log").read_text()
    assert not (artifacts / "logs" / "smoke-surreal-replay-0.previous.log").exists(), "no restart, no file"
    assert '"env_steps": 4096' in (artifacts / "learner-metrics.jsonl").read_text()
    assert {"pods.txt", "describe-pods.txt", "events.txt"} <= {p.name for p in artifacts.iterdir()}
    calls = kind_calls(tmp_path)
    assert calls[0].startswith("kind create cluster --name surreal-smoke")
    assert calls[-1] == "kind delete cluster --name surreal-smoke"
    assert [c for c in calls if "load docker-image" in c] == [
        "kind load docker-image surreal-actor:t1 --name surreal-smoke",
        "kind load docker-image surreal-replay:t1 --name surreal-smoke",
    ]


def test_a_failing_helm_test_still_leaves_its_output_and_the_logs_and_deletes_the_cluster(tmp_path: Path) -> None:
    done, artifacts = run_with_a_cluster(tmp_path, helm_test_rc=1)
    assert done.returncode != 0
    assert "Phase: Succeeded" in (artifacts / "helm-test.log").read_text()  # whatever helm printed is kept
    assert (artifacts / "logs" / "smoke-surreal-learner-0.log").exists()
    assert "log of smoke-surreal-learner-0" in done.stderr, "the learner's log tail is on the console too"
    assert kind_calls(tmp_path)[-1] == "kind delete cluster --name surreal-smoke"
    assert "local-kind-test: passed" not in done.stdout
