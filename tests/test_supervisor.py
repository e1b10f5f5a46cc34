"""Supervisor and local launcher: restarts with backoff, failures on the console, ordered stop, no orphans.

Children are tiny Python scripts (the launcher tests use fake roles that honour the SURREAL_* contract),
so everything here runs in seconds; the real roles are exercised by test_local_run.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from conftest import wait_until
from surreal.commands.run import run_experiment
from surreal.config import load_config, read_config
from surreal.launch import local
from surreal.launch.supervisor import ProcessSpec, Supervisor
from surreal.roles.common import EXIT_STOPPED, StopFlag
from surreal.settings import Settings


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def spec(name: str, argv: list[str], **kwargs) -> ProcessSpec:
    role, _, index = name.partition("-")
    return ProcessSpec(name, role, int(index or 0), argv, dict(os.environ), **kwargs)


def poll_until(supervisor: Supervisor, condition, timeout_s: float = 20.0) -> None:
    def step():
        supervisor.poll()
        return condition()

    wait_until(step, timeout_s, interval_s=0.02)


def gone(pid: int) -> bool:
    """Exited, or a zombie nobody reaps (the container's init may not)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.system
def test_crash_is_restarted_with_doubling_backoff_then_given_up_with_the_log_tail_shown(tmp_path, capsys):
    starts = tmp_path / "starts"
    crash = script(
        tmp_path,
        "crash",
        f"""
        import sys, time
        with open({str(starts)!r}, "a") as f:
            f.write(f"{{time.time()}}\\n")
        for i in range(30):
            print(f"line-{{i}}")
        print("ValueError: bad thing", flush=True)
        sys.exit(3)
    """,
    )
    with Supervisor(tmp_path / "logs") as supervisor:
        supervisor.start(spec("actor-0", crash, max_restarts=3))
        poll_until(supervisor, lambda: supervisor.failed is not None)
        assert supervisor.failed == "actor-0"
        assert supervisor.restarts() == {"actor-0": 3} and supervisor.returncode("actor-0") == 3
    times = [float(t) for t in starts.read_text().split()]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(gaps) == 3
    # Never sooner than the backoff; how much later depends on how fast Python starts here (the limit only
    # catches a restart that never came). The doubling itself is what the supervisor reports, checked below.
    for gap, backoff in zip(gaps, (0.5, 1.0, 2.0), strict=True):
        assert backoff - 0.05 <= gap <= backoff + 30, gaps
    err = capsys.readouterr().err
    assert err.count("actor-0 exited with code 3") == 4
    assert "restart 1/3 in 0.5 s" in err and "restart 2/3 in 1 s" in err and "restart 3/3 in 2 s" in err
    assert "gave up after 3 restart(s)" in err
    last_report = err.split("gave up")[1]
    assert "actor-0 | ValueError: bad thing" in last_report and "line-29" in last_report
    assert "line-9\n" not in last_report, "only the last 20 lines are shown"


def test_learner_is_restarted_with_its_resume_argv(tmp_path):
    learner = script(
        tmp_path,
        "learner",
        """
        import sys
        print("args", sys.argv[1:], flush=True)
        sys.exit(0 if "--resume" in sys.argv else 1)
    """,
    )
    with Supervisor(tmp_path / "logs", report=lambda _: None) as supervisor:
        supervisor.start(spec("learner", learner, resume_argv=[*learner, "--resume"]))
        poll_until(supervisor, lambda: supervisor.returncode("learner") is not None)
        assert supervisor.returncode("learner") == 0 and supervisor.restarts() == {"learner": 1}
        assert supervisor.failed is None
    log = (tmp_path / "logs" / "learner.log").read_text()
    assert "args []" in log and "args ['--resume']" in log


def test_always_restarts_a_clean_exit_and_never_fails_at_once(tmp_path):
    clean, crash = script(tmp_path, "clean", "pass"), script(tmp_path, "crash", "raise SystemExit(2)")
    with Supervisor(tmp_path / "logs", report=lambda _: None) as supervisor:
        supervisor.start(spec("replay-0", clean, restart="always", max_restarts=1))
        supervisor.start(spec("ps-0", crash, restart="never"))
        codes = lambda: (supervisor.returncode("replay-0"), supervisor.returncode("ps-0"))
        poll_until(supervisor, lambda: None not in codes())
        assert codes() == (0, 2) and supervisor.restarts() == {"replay-0": 1, "ps-0": 0}
        assert supervisor.failed == "ps-0", "a 'never' child fails the run on its first crash"


def test_stop_goes_role_by_role_and_leaves_no_process_behind(tmp_path):
    order, ready = tmp_path / "order", tmp_path / "ready"
    ready.mkdir()
    body = f"""
        import os, signal, subprocess, sys, time
        name = sys.argv[1]
        if name == "actor-0":  # a grandchild in the actor's process group, as a vector env's worker would be
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        def on_term(*_):
            with open({str(order)!r}, "a") as f:
                f.write(name + "\\n")
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        open(os.path.join({str(ready)!r}, name), "w").close()
        time.sleep(600)
    """
    role = script(tmp_path, "role", body)
    names = ["replay-0", "ps-0", "learner", "actor-0", "actor-1"]
    supervisor = Supervisor(tmp_path / "logs", report=lambda _: None)
    try:
        for name in names:
            supervisor.start(spec(name, [*role, name], restart="always"))
        poll_until(supervisor, lambda: len(list(ready.iterdir())) == len(names))
        launcher = psutil.Process()
        family = [
            p.pid
            for p in launcher.children(recursive=True)
            if p.pid in supervisor.alive_pids() or p.ppid() in supervisor.alive_pids()
        ]
        assert len(family) == len(names) + 1
    finally:
        supervisor.stop()
    stopped = order.read_text().split()
    assert sorted(stopped[:2]) == ["actor-0", "actor-1"] and stopped[2:] == ["learner", "ps-0", "replay-0"]
    assert supervisor.alive_pids() == []
    wait_until(lambda: all(gone(pid) for pid in family), 5)


def test_child_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    reports: list[str] = []
    stubborn = script(
        tmp_path,
        "stubborn",
        f"""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({str(tmp_path / "ready")!r}, "w").close()
        time.sleep(600)
    """,
    )
    supervisor = Supervisor(tmp_path / "logs", grace_s=0.5, report=reports.append)
    try:
        supervisor.start(spec("replay-0", stubborn, restart="always"))
        poll_until(supervisor, (tmp_path / "ready").exists)
        [pid] = supervisor.alive_pids()
        started = time.monotonic()
    finally:
        supervisor.stop()
    assert 0.5 <= time.monotonic() - started < 30, "killed after the grace period (the stub sleeps 600 s)"
    assert gone(pid) and supervisor.alive_pids() == []
    assert any("replay-0 ignored SIGTERM" in r for r in reports)


def test_a_child_with_a_grace_of_its_own_gets_that_long_after_sigterm(tmp_path):
    """A replay shard writes its final snapshot after SIGTERM: it gets its own grace, the others the default."""
    slow = script(
        tmp_path,
        "slow",
        f"""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.0), sys.exit(0)))
        open({str(tmp_path / "ready")!r}, "w").close()
        time.sleep(600)
    """,
    )
    reports: list[str] = []
    supervisor = Supervisor(tmp_path / "logs", grace_s=0.2, report=reports.append)
    try:
        supervisor.start(spec("replay-0", slow, restart="always", grace_s=30.0))
        poll_until(supervisor, (tmp_path / "ready").exists)
    finally:
        supervisor.stop()
    assert reports == [], "it was given the time it needed and exited by itself"
    assert local.plan_processes(load_config([]), tmp_path, {})[0].grace_s == local.REPLAY_GRACE_S


def test_children_die_with_a_kill_9ed_launcher(tmp_path):
    child_pid = tmp_path / "child.pid"
    launcher = script(
        tmp_path,
        "launcher",
        f"""
        import os, sys, time
        from pathlib import Path
        from surreal.launch.supervisor import ProcessSpec, Supervisor
        s = Supervisor(Path({str(tmp_path / "logs")!r}))
        s.start(ProcessSpec("actor-0", "actor", 0, [sys.executable, "-c", "import time; time.sleep(600)"],
                            dict(os.environ)))
        Path({str(child_pid)!r}).write_text(str(s.alive_pids()[0]))
        time.sleep(600)
    """,
    )
    proc = subprocess.Popen(launcher)
    pid = None
    try:
        wait_until(lambda: child_pid.exists() and child_pid.read_text(), 20)
        pid = int(child_pid.read_text())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        wait_until(lambda: gone(pid), 5)  # PR_SET_PDEATHSIG delivered SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if pid is not None and not gone(pid):
            os.kill(pid, signal.SIGKILL)


# -- the local launcher, on fake roles ---------------------------------------------------------------

FAKE_ROLE = """
    import json, os, signal, sys, time
    from pathlib import Path
    role, mode = sys.argv[1], os.environ["FAKE_MODE"]
    run = Path(os.environ["SURREAL_RUN_DIR"])
    name = role if role == "learner" else f"{role}-{os.environ['SURREAL_INDEX']}"
    env = {k: v for k, v in os.environ.items() if k.startswith("SURREAL_")}
    if role == "replay":  # a snapshot, as a real shard keeps one (before the learner can see this role started)
        (run / "replay" / f"shard-{os.environ['SURREAL_INDEX']}").mkdir(parents=True, exist_ok=True)
        (run / "replay" / f"shard-{os.environ['SURREAL_INDEX']}" / "replay-0000000001.snap").write_bytes(b"")
    (run / f"fake-{name}.json").write_text(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "env": env}))
    if role == "learner" and mode == "complete":
        deadline = time.monotonic() + 10
        expected = int(os.environ["FAKE_PROCESSES"])
        while len(list(run.glob("fake-*.json"))) < expected and time.monotonic() < deadline:
            time.sleep(0.02)
        with open(run / "metrics.jsonl", "a") as f:
            for u in (1, 2, 3):
                row = {"env_steps": 512 * u, "updates": u, "train_return_mean": 10.0 * u}
                f.write(json.dumps(row) + "\\n")
        eval_ = {"eval_return_mean": 42.0, "eval_return_std": 1.5, "eval_episodes": 2, "env_steps": 1536}
        (run / "eval.json").write_text(json.dumps(eval_))
        sys.exit(0)
    if role == "actor" and mode == "interrupt":
        os.kill(os.getppid(), signal.SIGINT)  # what Ctrl-C in the launcher's terminal does
    if role == "actor" and mode == "crash":
        print("RuntimeError: fake actor crash", flush=True)
        sys.exit(7)
    time.sleep(30)
"""


@pytest.fixture
def fake_roles(tmp_path, monkeypatch):
    """`surreal run` (commands/run.py) with every role replaced by FAKE_ROLE; yields the runs root."""
    monkeypatch.setenv("SURREAL_RUNS_ROOT", str(tmp_path / "runs"))
    monkeypatch.setattr(local, "ROLE_COMMAND", tuple(script(tmp_path, "fake_role", FAKE_ROLE)))
    yield tmp_path / "runs"


def fake_pids(run_dir: Path) -> list[int]:
    return [json.loads(p.read_text())["pid"] for p in run_dir.glob("fake-*.json")]


@pytest.mark.system
def test_run_experiment_starts_every_role_with_the_pod_contract_and_completes(fake_roles, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "complete")
    monkeypatch.setenv("FAKE_PROCESSES", str(2 + 2 + 1 + 3))
    overrides = ["name=ok", "actors=3", "topology.replay_shards=2", "topology.ps_replicas=2", "steps=1536"]
    assert run_experiment(overrides, live=False) == 0
    run_dir = (fake_roles / "ok").resolve()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["env_steps"] == 1536 and summary["updates"] == 3
    assert summary["eval_return_mean"] == 42.0 and summary["train_return_mean"] == 30.0
    assert (run_dir / "replay").exists(), "a completed run keeps its replay snapshots: --resume can take it further"
    assert summary["restarts"] == dict.fromkeys(
        ["replay-0", "replay-1", "ps-0", "ps-1", "learner", "actor-0", "actor-1", "actor-2"], 0
    )

    seen = {p.stem.removeprefix("fake-"): json.loads(p.read_text()) for p in run_dir.glob("fake-*.json")}
    settings = {name: Settings.from_env(info["env"]) for name, info in seen.items()}
    assert {name: info["argv"] for name, info in seen.items()}["learner"] == ["learner"]
    replay = [(settings[f"replay-{i}"].experience_port, settings[f"replay-{i}"].sample_port) for i in (0, 1)]
    ps = [f"tcp://127.0.0.1:{settings[f'ps-{i}'].ps_port}" for i in (0, 1)]
    for name in ("actor-0", "actor-1", "actor-2", "learner"):
        assert [(r.experience_port, r.sample_port) for r in settings[name].replay] == replay
    assert [list(settings[f"actor-{i}"].ps_addrs) for i in (0, 1, 2)] == [ps] * 3
    assert settings["ps-1"].learner_addr == f"tcp://127.0.0.1:{settings['learner'].params_pub_port}"
    assert [settings[f"actor-{i}"].index for i in (0, 1, 2)] == [0, 1, 2]
    assert all(s.config_path == run_dir / "config.yaml" and s.run_dir == run_dir for s in settings.values())
    ports = [s.metrics_port for s in settings.values()] + [p for r in replay for p in r]
    ports += [settings["ps-0"].ps_port, settings["ps-1"].ps_port, settings["learner"].params_pub_port]
    assert len(set(ports)) == len(ports) == 8 + 4 + 3
    wait_until(lambda: all(gone(pid) for pid in fake_pids(run_dir)), 5)


def test_run_experiment_stops_everything_on_sigint(fake_roles, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_MODE", "interrupt")
    assert run_experiment(["name=stopped", "actors=1"], live=False) == 130
    run_dir = fake_roles / "stopped"
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    assert "interrupted (SIGINT received)" in capsys.readouterr().out
    wait_until(lambda: all(gone(pid) for pid in fake_pids(run_dir)), 5)


@pytest.mark.system
def test_a_resumed_run_starts_its_learner_with_resume_in_the_same_folder(fake_roles, monkeypatch, capsys):
    """`surreal run --resume`: the learner's very first start is `--resume` (not only its restarts), the roles get
    the run folder's config with the new budget, and reproduce.json records the resume."""
    monkeypatch.setenv("FAKE_MODE", "interrupt")
    assert run_experiment(["name=again", "actors=1", "steps=1000"], live=False) == 130
    run_dir = (fake_roles / "again").resolve()
    monkeypatch.setenv("FAKE_MODE", "complete")
    monkeypatch.setenv("FAKE_PROCESSES", str(1 + 1 + 1 + 1))
    assert run_experiment(["steps=1536"], live=False, resume=run_dir) == 0
    learner = json.loads((run_dir / "fake-learner.json").read_text())
    assert learner["argv"] == ["learner", "--resume"]
    assert read_config(run_dir / "config.yaml").total_env_steps == 1536
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["resumed_at_env_steps"] is None, "no checkpoint to resume"
    assert [r["overrides"] for r in json.loads((run_dir / "reproduce.json").read_text())["resumes"]] == [["steps=1536"]]
    assert f"resuming {run_dir} (no checkpoint restores: the learner starts afresh)" in capsys.readouterr().out
    wait_until(lambda: all(gone(pid) for pid in fake_pids(run_dir)), 5)


def test_run_experiment_fails_when_a_role_exhausts_its_restarts(fake_roles, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_MODE", "crash")
    monkeypatch.setattr(local, "MAX_RESTARTS", 1)
    assert run_experiment(["name=broken", "actors=1"], live=False) == 1
    summary = json.loads((fake_roles / "broken" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["restarts"]["actor-0"] == 1
    assert "actor-0 exhausted its restarts" in summary["reason"]
    captured = capsys.readouterr()
    assert "actor-0 | RuntimeError: fake actor crash" in captured.err and "failed" in captured.out
    wait_until(lambda: all(gone(pid) for pid in fake_pids(fake_roles / "broken")), 5)


def test_bad_config_is_one_message_and_starts_nothing(fake_roles, capsys):
    assert run_experiment(["topology.actorz=2"], live=False) == 2
    err = capsys.readouterr().err
    assert err.startswith("surreal: ") and "topology.actorz" in err and "Traceback" not in err
    assert not fake_roles.exists()


def test_stop_flag_keeps_the_first_signal_and_puts_the_old_handlers_back_after_the_block():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with StopFlag() as stop:
        assert not stop and stop.signal is None
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C: noted, nothing raised
        time.sleep(0.1)
        assert stop and stop.signal == signal.SIGTERM
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_killed_child_restarts_at_once_uncounted_and_a_held_one_only_when_released(tmp_path):
    sleeper = script(tmp_path, "sleeper", "import time\ntime.sleep(60)\n")
    with Supervisor(tmp_path / "logs", grace_s=1.0, report=lambda _: None) as sup:
        sup.start(spec("actor-0", sleeper, max_restarts=0))
        sup.start(spec("actor-1", sleeper, max_restarts=0))
        poll_until(sup, lambda: sup.running("actor") == ["actor-0", "actor-1"])
        first = sup.alive_pids()
        assert sup.kill("actor-0")
        poll_until(sup, lambda: sorted(sup.running("actor")) == ["actor-0", "actor-1"] and sup.alive_pids() != first)
        assert sup.restarts()["actor-0"] == 0 and sup.failed is None, "max_restarts=0, yet not a failure"
        assert sup.kill("actor-1", hold=True)
        poll_until(sup, lambda: sup.running("actor") == ["actor-0"])
        time.sleep(0.3)
        sup.poll()
        assert sup.running("actor") == ["actor-0"], "held down"
        sup.release("actor-1")
        poll_until(sup, lambda: sorted(sup.running("actor")) == ["actor-0", "actor-1"])
        assert sup.failed is None
        pids = sup.alive_pids()
    assert all(gone(pid) for pid in pids)
    starts = [
        line.split(": ")[0].split(" start ")[1] for line in (tmp_path / "logs" / "actor-1.log").read_text().splitlines()
    ]
    assert starts == ["#1", "#2 (chaos)"], "the log numbers every start and says which were chaos's"


def test_a_role_stopped_by_a_signal_from_outside_restarts_at_once_uncounted_and_says_so(tmp_path):
    """A preemption or drain (the role saved its state and exited EXIT_STOPPED) is no failure: the learner comes
    back at once with its resume argv even with max_restarts=0, the console says why, the log names the start."""
    marker = tmp_path / "stopped-once"
    learner = script(
        tmp_path,
        "learner",
        f"""
        import pathlib, sys, time
        marker = pathlib.Path({str(marker)!r})
        if not marker.exists():
            marker.write_text("")
            sys.exit({EXIT_STOPPED})
        time.sleep(60)
        """,
    )
    reports: list[str] = []
    log = lambda: log_of(tmp_path, "learner")  # noqa: E731
    with Supervisor(tmp_path / "logs", grace_s=1.0, report=reports.append) as sup:
        sup.start(spec("learner", learner, max_restarts=0, resume_argv=[*learner, "--resume"]))
        poll_until(sup, lambda: sup.running("learner") == ["learner"] and marker.exists() and "--resume" in log())
        assert sup.restarts()["learner"] == 0 and sup.failed is None, "max_restarts=0, yet not a failure"
    assert any("stopped on a signal (a preemption or drain)" in r and "not counted" in r for r in reports), reports
    assert "#2 (after a stop on a signal)" in log()


def log_of(tmp_path: Path, name: str) -> str:
    path = tmp_path / "logs" / f"{name}.log"
    return path.read_text() if path.exists() else ""
