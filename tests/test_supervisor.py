"""Supervisor: restarts with backoff, failures shown on the console, resume argv, nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from conftest import wait_until
from surreal.launch.supervisor import ProcessSpec, Supervisor


def script(tmp_path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def run_until(supervisor: Supervisor, condition, timeout_s: float) -> None:
    def step():
        supervisor.poll()
        return condition()

    wait_until(step, timeout_s, interval_s=0.05)


def test_crashing_child_is_restarted_with_resume_argv_then_given_up_on(tmp_path):
    reports: list[str] = []
    crash = script(tmp_path, "crash", "import sys; print('boom: bad thing', flush=True); sys.exit(3)")
    supervisor = Supervisor(tmp_path / "logs", report=reports.append)
    supervisor.start(ProcessSpec("learner", crash, dict(os.environ), "on-failure", max_restarts=2,
                                 resume_argv=[*crash, "--resume"]))
    run_until(supervisor, lambda: supervisor.failed is not None, 30)
    assert supervisor.failed == "learner" and supervisor.restarts()["learner"] == 2
    assert len(reports) == 3 and "exited with code 3" in reports[0] and "boom: bad thing" in reports[0]
    assert "gave up" in reports[-1]
    assert (tmp_path / "logs" / "learner.log").read_text().count("boom") == 3
    supervisor.stop()


def test_backoff_doubles_between_restarts(tmp_path):
    crash = script(tmp_path, "crash", "raise SystemExit(1)")
    supervisor = Supervisor(tmp_path / "logs", report=lambda _: None)
    child = supervisor.start(ProcessSpec("actor-0", crash, dict(os.environ), max_restarts=3))
    starts = []
    deadline = time.monotonic() + 30
    while supervisor.failed is None and time.monotonic() < deadline:
        if child.proc is not None and (not starts or starts[-1][0] != child.proc.pid):
            starts.append((child.proc.pid, time.monotonic()))
        supervisor.poll()
        time.sleep(0.01)
    gaps = [b[1] - a[1] for a, b in zip(starts, starts[1:], strict=False)]
    assert len(gaps) == 3 and gaps[0] >= 0.5 and gaps[1] >= 1.0 and gaps[2] >= 2.0
    supervisor.stop()


def test_clean_child_exit_finishes_and_stop_kills_one_that_ignores_sigterm(tmp_path):
    ok = script(tmp_path, "ok", "print('done')")
    stubborn = script(tmp_path, "stubborn", """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print('ready', flush=True)
        time.sleep(600)
    """)
    supervisor = Supervisor(tmp_path / "logs", report=lambda _: None)
    supervisor.start(ProcessSpec("actor-0", ok, dict(os.environ)))
    supervisor.start(ProcessSpec("replay-0", stubborn, dict(os.environ), "always"))
    run_until(supervisor, lambda: supervisor.exited("actor-0") == 0
              and "ready" in (tmp_path / "logs" / "replay-0.log").read_text(), 30)
    pids = supervisor.alive_pids()
    started = time.monotonic()
    supervisor.stop(grace_s=1.0)
    assert time.monotonic() - started < 10
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def test_children_die_with_a_killed_launcher(tmp_path):
    child_pid_file = tmp_path / "child.pid"
    launcher = script(tmp_path, "launcher", f"""
        import os, sys, time
        sys.path.insert(0, {str(os.getcwd())!r})
        from pathlib import Path
        from surreal.launch.supervisor import ProcessSpec, Supervisor
        s = Supervisor(Path({str(tmp_path / 'logs')!r}))
        c = s.start(ProcessSpec("actor-0", [sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ)))
        Path({str(child_pid_file)!r}).write_text(str(c.proc.pid))
        time.sleep(600)
    """)
    proc = subprocess.Popen(launcher)
    try:
        wait_until(lambda: child_pid_file.exists() and child_pid_file.read_text(), 30)
        child = psutil.Process(int(child_pid_file.read_text()))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        child.wait(timeout=10)  # PR_SET_PDEATHSIG delivered SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
