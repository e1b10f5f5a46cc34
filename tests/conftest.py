"""Shared test helpers: free loopback ports, role subprocesses that are always cleaned up, bounded waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from surreal.launch.local import free_ports
from surreal.settings import ReplayEndpoint, Settings

REPO = Path(__file__).resolve().parents[1]

# Tests start processes in temporary folders: a relative PYTHONPATH (`PYTHONPATH=src pytest`, to test a second
# checkout with one virtualenv) would point nowhere there, and they would import the installed checkout instead.
if os.environ.get("PYTHONPATH"):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        str(Path(entry).resolve()) for entry in os.environ["PYTHONPATH"].split(os.pathsep) if entry
    )


CHECKOV = REPO / ".tools" / "checkov" / "bin" / "checkov"


def checkov(*args: str, cwd: Path | None = None) -> tuple[list[dict], list[str], int]:
    """Runs checkov (installed by `make tools`) with JSON output: its reports, the failed checks one line each, and
    its exit status. A single report comes back as a list of one, as several frameworks' would."""
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make tools`"
    done = subprocess.run(
        [str(CHECKOV), *args, "--compact", "-o", "json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    parsed = json.loads(done.stdout)
    reports = parsed if isinstance(parsed, list) else [parsed]
    failed = [
        f"{f['check_id']} {f['resource']} ({f['file_path']}): {f['check_name']}"
        for report in reports
        for f in report["results"]["failed_checks"]
    ]
    return reports, failed, done.returncode


def make(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """`make ARGS` in the repository (a dry run with `-n`), its output captured; the caller judges the status."""
    return subprocess.run(["make", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False)


def free_port() -> int:
    return free_ports(1)[0]


SLOW_TIMEOUT_S = 1500  # a slow test's hang limit: its runs take minutes, several times that on a busy 2-core box


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests (whole runs) get a longer hang limit than pyproject's per-test `timeout`."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


def wait_until(condition: Callable[[], object], timeout_s: float, interval_s: float = 0.05) -> object:
    """Poll `condition` until truthy; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"condition not met within {timeout_s} s")


def loopback_settings(**overrides) -> Settings:
    """Settings with every port freshly allocated on 127.0.0.1 and the peers' addresses pointing at them."""
    exp, sample, pub, ps, metrics = free_ports(5)  # distinct: held open until all five are chosen
    values = dict(
        experience_port=exp,
        sample_port=sample,
        params_pub_port=pub,
        ps_port=ps,
        metrics_port=metrics,
        replay=(ReplayEndpoint("127.0.0.1", exp, sample),),
        learner_addr=f"tcp://127.0.0.1:{pub}",
        ps_addrs=(f"tcp://127.0.0.1:{ps}",),
    )
    values.update(overrides)
    return Settings(**values)


class Roles:
    """Starts `python -m surreal role ...` subprocesses and kills whatever is left at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []

    def start(self, role: str, settings: Settings, *args: str, extra_env: dict[str, str] | None = None):
        env = {**os.environ, **settings.to_env(), "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        log = open(self.tmp_path / f"{role}-{settings.index}-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "surreal", "role", role, *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.tmp_path,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[Roles]:
    manager = Roles(tmp_path)
    yield manager
    manager.stop_all()
