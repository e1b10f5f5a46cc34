"""Shared test helpers: free loopback ports, role subprocesses that are always cleaned up, bounded waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
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
    """Slow tests (whole runs) get a longer hang limit than pyproject's per-test `timeout`; GPU tests are skipped
    where torch sees no CUDA device (bench/gpu.sh runs them on a lent GPU machine)."""
    cuda: bool | None = None
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
        if item.get_closest_marker("gpu"):
            if cuda is None:
                import torch

                cuda = torch.cuda.is_available()
            if not cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


# -- the default tier's time budget (docs/development.md, "Test tiers") -------------------------------------------
# Every session prints its slowest tests, each timed whole (setup, call and teardown: a module's trained fixture
# counts against the test that builds it); `--max-test-seconds S` fails the session, naming them, when any took
# longer than S. `make test` passes 120 on CI, so a test that grew past the tier's budget is caught where it lands.

SLOWEST_SHOWN = 15
_test_seconds: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--max-test-seconds",
        type=float,
        default=None,
        help="fail the session when a test (setup + call + teardown) takes longer than this many seconds",
    )
    parser.addoption(
        "--long-results",
        default=None,
        help="write each slow test's outcome, seconds and claims into this JSON file (make test-long)",
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _test_seconds[report.nodeid] = _test_seconds.get(report.nodeid, 0.0) + report.duration
    counted = report.failed or report.skipped or report.when == "call"  # a setup that passed says nothing yet
    if "slow" in report.keywords and counted and _outcomes.get(report.nodeid) != "failed":
        _outcomes[report.nodeid] = report.outcome


def over_budget(seconds: dict[str, float], limit: float | None) -> list[tuple[str, float]]:
    """The tests that took longer than `limit`, slowest first (none without a limit)."""
    if limit is None:
        return []
    return sorted(((test, s) for test, s in seconds.items() if s > limit), key=lambda item: -item[1])


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if over_budget(_test_seconds, session.config.getoption("--max-test-seconds")):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    results = session.config.getoption("--long-results")
    if results and _outcomes and not hasattr(session.config, "workerinput"):  # the xdist controller writes it
        write_long_results(Path(results))


def write_long_results(path: Path) -> None:
    """Merge this session's slow tests into the results file: a test that ran replaces its entry, others stay."""
    import datetime
    import platform

    held = json.loads(path.read_text()) if path.exists() else {}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()
    tests = held.get("tests", {})
    for test, outcome in _outcomes.items():
        tests[test] = {
            "outcome": outcome,
            "seconds": round(_test_seconds.get(test, 0.0), 1),
            "claims": _claims.get(test, []),
            "commit": commit or "unknown",
            "date": datetime.date.today().isoformat(),
        }
    result = {
        "benchmark": "test-long",
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
        "command": "make test-long",
        "tests": dict(sorted(tests.items())),
    }
    path.write_text(json.dumps(result, indent=1) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if not _test_seconds:
        return
    slowest = sorted(_test_seconds.items(), key=lambda item: -item[1])[:SLOWEST_SHOWN]
    terminalreporter.section(f"{len(slowest)} slowest tests (setup + call + teardown)")
    for test, seconds in slowest:
        terminalreporter.write_line(f"{seconds:8.1f} s  {test}")
    limit = config.getoption("--max-test-seconds")
    over = over_budget(_test_seconds, limit)
    if over:
        terminalreporter.section(f"over the {limit:.0f} s budget of a test in this tier", red=True)
        for test, seconds in over:
            terminalreporter.write_line(f"{seconds:8.1f} s  {test}", red=True)
        terminalreporter.write_line(
            "move the check to a core, the simulator or scripted time, or to `make test-long` (docs/development.md)"
        )


# -- the long tier's results file (bench/results/test-long.<N>core.json) ------------------------------------------
# `make test-long` passes `--long-results FILE`: each slow test that ran is written there with its outcome, its
# seconds and the figures it held to a bound (`claim`), merged into what the file already holds, with the machine, the
# commit and the date. tests/test_long_tier.py, in the default tier, holds the file to its claims: every slow test is
# in it, passed, and every figure keeps its bound, so a docs page can cite the file as it cites a benchmark's.

_claims: dict[str, list[dict[str, object]]] = {}
_outcomes: dict[str, str] = {}


@pytest.fixture
def claim(request: pytest.FixtureRequest) -> Callable[..., None]:
    """`claim(name, value, at_least=..., at_most=...)`: assert a long-tier figure against its bound and record both
    for the results file (a learning run's eval return, a chaos run's restarts)."""

    def check(name: str, value: float, *, at_least: float | None = None, at_most: float | None = None) -> None:
        assert at_least is not None or at_most is not None, "a claim needs a bound"
        _claims.setdefault(request.node.nodeid, []).append(
            {"name": name, "value": float(value), "at_least": at_least, "at_most": at_most}
        )
        assert at_least is None or value >= at_least, f"{name} = {value}, below its bound {at_least}"
        assert at_most is None or value <= at_most, f"{name} = {value}, above its bound {at_most}"

    return check


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


# -- a real S3 server (moto's, from the test extra) for the run-folder-in-a-bucket tests ---------------------------

MOTO_SERVER = """
import sys, threading
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # until the test process closes our stdin (or dies)
"""
S3_START_TIMEOUT_S = 120.0


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server in a process of its own on 127.0.0.1, on a port the OS handed out; stopped by pid."""
    server = subprocess.Popen(
        [sys.executable, "-c", MOTO_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # a line per request
        text=True,
    )
    try:
        assert server.stdout is not None
        ready = threading.Thread(target=lambda: port.append(server.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        port: list[str] = []
        ready.start()
        ready.join(S3_START_TIMEOUT_S)
        assert port and port[0].strip().isdigit(), f"moto's server did not start: {port}"
        yield f"http://127.0.0.1:{port[0].strip()}"
    finally:
        server.kill()
        server.wait(timeout=30)


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the test's S3 server, as `s3://<bucket>`. The client settings go into the environment, which
    s3fs reads (AWS_ENDPOINT_URL) and every process the test starts inherits."""
    import uuid

    for name, value in {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    bucket = f"surreal-{uuid.uuid4().hex[:12]}"
    import fsspec

    fsspec.filesystem("s3", skip_instance_cache=True).mkdir(bucket)
    return f"s3://{bucket}"
