"""The Python API (surreal/api.py, docs/api.md): the documented example run as it stands in a fresh process, a
serial run stopped and resumed through the API ending bit for bit as the run never stopped, the CLI's one-line
errors as exceptions, a CLI run opened, stopped and resumed from Python, and `import surreal` staying light."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

import surreal
from conftest import REPO, wait_until
from surreal.api import as_overrides, format_value
from surreal.config import ConfigError, load_config
from surreal.metricsfile import read_metrics
from surreal.run.folder import RunFolderLock, create_run_folder, launcher_pid
from surreal.run.resume import checkpoint_counters
from test_resume import differences, final_checkpoint, without_wall_times


def processes_for(root: Path) -> list[psutil.Process]:
    """Live processes started for runs under `root`: every role has SURREAL_RUN_DIR, a launcher the API starts
    SURREAL_RUNS_ROOT."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            env = process.environ()
            if process.status() != psutil.STATUS_ZOMBIE and any(
                env.get(key, "").startswith(str(root)) for key in ("SURREAL_RUN_DIR", "SURREAL_RUNS_ROOT")
            ):
                found.append(process)
    return found


@pytest.fixture
def nothing_left(tmp_path: Path):
    """After the test: no process started for its runs is left (any that is gets killed, by pid, and fails it)."""
    yield
    try:
        wait_until(lambda: not processes_for(tmp_path), 30)
    finally:
        for process in processes_for(tmp_path):
            process.kill()


def first_python_block(path: Path) -> str:
    match = re.search(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)
    assert match, f"{path.name} has a Python example"
    return match.group(1)


def readme_example() -> str:
    """The README's Python example, which docs/api.md opens with too."""
    example = first_python_block(REPO / "README.md")
    assert example == first_python_block(REPO / "docs" / "api.md"), "the README and docs/api.md show one example"
    return example


def test_import_surreal_loads_neither_torch_nor_hydra():
    code = textwrap.dedent(
        """
        import sys
        import surreal
        surreal.train, surreal.start, surreal.Run, surreal.RunFailed, surreal.ConfigError  # the API's names
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "hydra", "omegaconf", "gymnasium"))
        print(heavy)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_python_values_become_overrides_the_config_reads_back():
    overrides = {
        "algo.hidden_sizes": [32, 16],
        "algo.lr": 3e-4,
        "algo.target_kl": None,
        "algo.norm_adv": True,
        "env.kwargs": {"ctrl_cost_weight": 0.25, "xml_file": "a b.xml"},
        "learner.eval_interval": 1_000,
    }
    items = as_overrides(overrides, algo="ppo", env="HalfCheetah-v5", actors=3, steps=5_000, seed=4, name=None)
    cfg = load_config(items)
    assert (cfg.algo.name, cfg.env.id, cfg.topology.actors, cfg.total_env_steps, cfg.seed) == (
        "ppo",
        "HalfCheetah-v5",
        3,
        5_000,
        4,
    )
    assert cfg.algo.hidden_sizes == [32, 16] and cfg.algo.lr == 3e-4 and cfg.algo.target_kl is None
    assert cfg.algo.norm_adv is True and cfg.learner.eval_interval == 1_000
    assert cfg.env.kwargs == {"ctrl_cost_weight": 0.25, "xml_file": "a b.xml"}
    assert load_config(as_overrides(["algo=ddpg", "algo.tau=0.01"])).algo.tau == 0.01, "command-line strings too"
    assert format_value("it's") == "'it\\'s'"
    with pytest.raises(TypeError):
        as_overrides("algo=ddpg")


@pytest.mark.system
def test_the_readme_example_runs_in_a_fresh_process_and_its_result_reads_through_the_api(tmp_path, nothing_left):
    """The README's example (docs/api.md's first), verbatim, as a script of its own; then its run, read back here
    through the API."""
    script = tmp_path / "example.py"
    script.write_text(readme_example(), encoding="utf-8")
    env = {**os.environ, "SURREAL_RUNS_ROOT": str(tmp_path / "runs")}
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = surreal.Run.open(tmp_path / "runs" / "quickstart")
    assert run.status == "completed" and not run.running
    final = run.final_eval
    assert final is not None and run.summary is not None
    assert run.summary["env_steps"] >= 10_000 and final["env_steps"] >= 10_000
    assert run.summary["eval_return_mean"] == final["eval_return_mean"]
    assert run.metrics and run.metrics[-1]["env_steps"] <= final["env_steps"]
    printed = out.stdout.splitlines()
    assert printed[0] == f"completed {final['eval_return_mean']} {run.dir}", "what the example printed is the run's"
    assert printed[-1].startswith("episode return ")
    assert run.config.env.id == "InvertedPendulum-v5" and run.config.topology.actors == 2
    assert launcher_pid(run.dir) is None, "no launcher holds the folder any more"


# A serial run stopped at whatever point the test gets to, then resumed with the budget it is compared at: PPO
# in lockstep (learning rate not annealed: annealing follows the budget, which differs here before the resume)
# and DDPG with prioritized replay, n-step returns and OU noise (test_resume.py's cases).
SERIAL_CASES = {
    "ppo": [
        *("algo=ppo", "env=InvertedPendulum-v5", "deterministic=true", "actors=1", "topology.envs_per_actor=2"),
        *("actor.chunk_steps=32", "algo.batch_size=128", "algo.minibatch_size=32", "algo.update_epochs=2"),
        *("algo.hidden_sizes=[16,16]", "algo.anneal_lr=false"),
    ],
    "ddpg": [
        *("algo=ddpg", "env=Pendulum-v1", "actors=2", "actor.chunk_steps=10", "algo.learning_starts=200"),
        *("algo.batch_size=32", "algo.hidden_sizes=[16,16]", "algo.replay_ratio=0.3", "algo.n_step=3"),
        *("algo.noise_type=ou", "algo.publish_interval=5", "replay.mode=prioritized", "replay.capacity=4000"),
    ],
}
SERIAL_COMMON = ["device=cpu", "seed=5", "learner.checkpoint_interval=1000", "learner.keep_checkpoints=5"]
# The stopped run's budget (10M) and the straight one's differ, and a task's evaluation cadence (conf/tasks.yaml)
# applies only to a run longer than it: the cadence is set, so both runs are the same experiment.
SERIAL_COMMON += ["learner.eval_episodes=2", "learner.eval_interval=0"]


@pytest.mark.parametrize("case", list(SERIAL_CASES))
@pytest.mark.system
def test_a_serial_run_stopped_and_resumed_through_the_api_ends_bit_for_bit_as_never_stopped(tmp_path, case):
    """`start(mode="serial")`, `stop()` wherever it is, `train(resume=..., steps=N)`: the same final checkpoint
    (every weight, optimizer and generator state, the replay, the envs mid-episode), metrics.jsonl and eval.json as
    `train(steps=N)` straight through. The stop point is wherever the test gets to: any point must do."""
    overrides = [*SERIAL_COMMON, *SERIAL_CASES[case]]
    run = surreal.start(overrides=overrides, steps=10_000_000, name="stopped", mode="serial", runs_root=tmp_path)
    updated = lambda: any(row["updates"] for row in read_metrics(run.dir / "metrics.jsonl"))  # past the warm-up
    wait_until(lambda: updated() or not run.running, 300)
    assert run.stop().status == "interrupted" and run.summary["reason"] == "stopped by Run.stop()"
    counters = checkpoint_counters(run.dir)
    assert counters is not None and counters["updates"] >= 1
    budget = counters["env_steps"] + 600
    resumed = surreal.train(resume=run.dir, steps=budget, mode="serial", runs_root=tmp_path)
    assert resumed.dir == run.dir and resumed.status == "completed"
    assert resumed.summary["resumed_at_env_steps"] == counters["env_steps"]
    straight = surreal.train(overrides=overrides, steps=budget, name="straight", mode="serial", runs_root=tmp_path)

    a, b = final_checkpoint(straight.dir), final_checkpoint(resumed.dir)
    assert a["counters"]["env_steps"] >= budget and a["counters"]["updates"] > counters["updates"]
    assert differences(a, b) == []
    assert without_wall_times(straight.metrics) == without_wall_times(resumed.metrics)
    assert straight.final_eval == resumed.final_eval
    reproduce = json.loads((run.dir / "reproduce.json").read_text())
    assert [r["overrides"] for r in reproduce["resumes"]] == [[f"steps={budget}"]]


LEFT_RUNNING = """
import sys, time
import surreal
from surreal.metricsfile import read_metrics

overrides = ["algo.batch_size=256", "algo.minibatch_size=64", "actor.chunk_steps=64", "device=cpu"]
run = surreal.start("ppo", "Pendulum-v1", actors=1, steps=10**7, overrides=overrides, name="left", mode=sys.argv[1])
deadline = time.monotonic() + 240  # only catches a hang
while not read_metrics(run.dir / "metrics.jsonl") and time.monotonic() < deadline:  # its first episodes
    time.sleep(0.1)
print("the script ends", flush=True)
"""


@pytest.mark.system
@pytest.mark.parametrize("mode", ["serial", pytest.param("processes", marks=pytest.mark.slow)])
def test_a_script_that_ends_with_its_run_still_running_says_it_was_interrupted_and_how_to_resume(
    tmp_path, nothing_left, mode
):
    """A started run outliving its script is stopped as Ctrl-C stops it (a serial run used to hold the script until
    its budget was spent; a launcher was ended without a word) and one line says so and how to go on."""
    script = tmp_path / "left.py"
    script.write_text(LEFT_RUNNING, encoding="utf-8")
    env = {**os.environ, "SURREAL_RUNS_ROOT": str(tmp_path / "runs")}
    out = subprocess.run(
        [sys.executable, str(script), mode], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and out.stdout.strip() == "the script ends", out.stderr[-3000:]
    run_dir = tmp_path / "runs" / "left"
    said = [line for line in out.stderr.splitlines() if line.startswith("surreal:")]
    assert said == [
        f"surreal: the script ended while run {run_dir} was still running: it was interrupted (its state saved); "
        f"continue it with `surreal run --resume {run_dir}` or surreal.train(resume={str(run_dir)!r})"
    ], out.stderr[-3000:]
    run = surreal.Run.open(run_dir)
    assert run.status == "interrupted" and not run.running
    counters = checkpoint_counters(run_dir)
    assert counters is not None and counters["env_steps"] >= run.metrics[-1]["env_steps"], "checkpointed as it stopped"


def test_errors_raise_the_clis_one_line_messages_before_anything_starts(tmp_path):
    root = tmp_path / "runs"
    assert surreal.ConfigError is ConfigError
    with pytest.raises(ConfigError, match=r"unknown config key 'algo.lrr' \(did you mean 'algo.lr'\?\)"):
        surreal.start(algo="ppo", overrides={"algo.lrr": 1e-3}, runs_root=root)
    with pytest.raises(ConfigError, match="did you mean 'HalfCheetah-v5'"):
        surreal.start(env="HalfCheeta-v5", runs_root=root)
    with pytest.raises(ConfigError, match="no such run folder"):
        surreal.start(resume="nowhere", runs_root=root)
    assert not root.exists(), "nothing made for a refused run"

    overrides = [*SERIAL_COMMON, *SERIAL_CASES["ppo"]]
    run = surreal.train(overrides=overrides, steps=512, name="done", mode="serial", runs_root=root)
    with pytest.raises(ConfigError, match="already holds a run; choose another name="):
        surreal.start(overrides=overrides, name="done", runs_root=root)
    with pytest.raises(ConfigError, match=r"algo.update_epochs \(2 -> 3\) would change the experiment"):
        surreal.start(resume=run, overrides={"algo.update_epochs": 3}, runs_root=root)
    with pytest.raises(ConfigError, match="algo= chooses config files"):
        surreal.start(resume=run, algo="ddpg", runs_root=root)
    with pytest.raises(ConfigError, match="a serial run is already running"):
        first = surreal.start(resume=run, steps=10_000_000, mode="serial", runs_root=root)
        try:
            surreal.start(overrides=overrides, name="second", mode="serial", runs_root=root)
        finally:
            first.stop()
    assert first.status == "interrupted"


COUNTED_ENVS = """
import os

import gymnasium as gym
import numpy as np


class Counted(gym.Env):
    \"\"\"An env that notes each time it is built, and where: in a role (SURREAL_RUN_DIR set) or not.\"\"\"

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self):
        with open(os.environ["COUNTED_BUILDS"], "a") as f:
            f.write(f"{os.getpid()} {'role' if os.environ.get('SURREAL_RUN_DIR') else 'preparation'}\\n")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


gym.register("Counted-v0", entry_point=Counted, max_episode_steps=50)
"""


@pytest.mark.system
def test_processes_mode_builds_the_env_once_here_and_refuses_here_without_a_launcher_or_its_log(
    tmp_path, monkeypatch, nothing_left
):
    """`train(mode="processes")` prepares the run in this process (config, preflight: the env built once, run folder)
    and hands the folder to its launcher, which builds nothing before the roles start; what cannot run is refused
    by `start` itself, in one line, before any launcher or log exists."""
    (tmp_path / "counted_envs.py").write_text(COUNTED_ENVS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    builds = tmp_path / "builds"
    monkeypatch.setenv("COUNTED_BUILDS", str(builds))
    root = tmp_path / "runs"
    small = {"algo.batch_size": 128, "algo.minibatch_size": 32, "actor.chunk_steps": 32, "device": "cpu"}
    given = dict(env="counted_envs:Counted-v0", actors=1, overrides=small, runs_root=root, imports=["counted_envs"])

    run = surreal.start(steps=10**7, name="counted", **given)
    wait_until(lambda: builds.exists() and " role" in builds.read_text(), 180)  # the roles started
    assert run.stop().status == "interrupted"
    prepared = [line for line in builds.read_text().splitlines() if not line.endswith(" role")]
    assert prepared == [f"{os.getpid()} preparation"], "the env built once, here, before any role started"

    builds.unlink()
    (root / "busy").mkdir()
    with RunFolderLock(root / "busy"), pytest.raises(ConfigError, match="busy is in use by another launcher"):
        surreal.start(steps=1000, name="busy", **given)
    assert not (root / "busy" / "logs" / "launcher.log").exists(), "no launcher started, so no log to read"
    assert builds.read_text().splitlines() == [f"{os.getpid()} preparation"]
    assert processes_for(root) == []


@pytest.mark.slow
def test_a_cli_run_is_opened_stopped_and_resumed_from_python(tmp_path, nothing_left):
    """`surreal run` started from a shell: `Run.open` reads it while it trains, `stop()` signals the launcher that
    holds its folder (everything saved, status interrupted), and `train(resume=...)` runs it to its budget in
    processes, appending to its metrics. Nothing it started is left."""
    root = tmp_path / "runs"
    env = {**os.environ, "SURREAL_RUNS_ROOT": str(root), "PYTHONUNBUFFERED": "1"}
    overrides = ["env=InvertedPendulum-v5", "actors=1", "algo.batch_size=512", "actor.chunk_steps=64"]
    overrides += ["learner.eval_episodes=2", "learner.checkpoint_interval=1000"]
    with open(tmp_path / "console.log", "wb") as console:
        launcher = subprocess.Popen(
            [sys.executable, "-m", "surreal", "run", "name=cli", "steps=1000000", *overrides, "--no-progress"],
            env=env,
            cwd=tmp_path,
            stdout=console,
            stderr=subprocess.STDOUT,
        )
    seen: dict[int, psutil.Process] = {}
    try:
        wait_until(lambda: (root / "cli" / "config.yaml").exists(), 120)
        run = surreal.Run.open(root / "cli")

        def trained() -> bool:
            seen.update({p.pid: p for p in psutil.Process(launcher.pid).children(recursive=True)})
            return len([row for row in run.metrics if row["updates"]]) >= 2

        wait_until(trained, 300)
        assert run.running and run.status == "running" and launcher_pid(run.dir) == launcher.pid
        run.stop()
        assert launcher.wait(timeout=60) == 130 and run.status == "interrupted"
        stopped_at = run.metrics[-1]["updates"]
        assert f"checkpoint at update {stopped_at}" in (run.dir / "logs" / "learner.log").read_text()

        budget = run.metrics[-1]["env_steps"] + 1024
        resumed = surreal.train(resume=root / "cli", steps=budget, runs_root=root)
        assert resumed.status == "completed" and resumed.summary["env_steps"] >= budget
        assert f"resumed at update {stopped_at}," in (run.dir / "logs" / "learner.log").read_text()
        updates = [r["updates"] for r in resumed.metrics if r["updates"]]  # past the warm-up's rows
        assert updates == list(range(1, len(updates) + 1)), "appended: one row per update"
        assert "resuming" in (run.dir / "logs" / "launcher.log").read_text()
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGKILL)
            launcher.wait(timeout=30)
        for process in seen.values():
            if process.is_running():
                process.kill()
    wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in seen.values()), 30)


def test_an_opened_runs_status_is_unknown_when_its_last_launch_left_no_summary(tmp_path):
    """A summary.json older than the folder's last launch is an earlier session's: that launch was killed."""
    run_dir, _, lock = create_run_folder(load_config(["name=r"]), [], tmp_path)
    (run_dir / "summary.json").write_text(json.dumps({"status": "interrupted"}))
    lock.release()
    run = surreal.Run.open(run_dir)
    assert run.status == "interrupted" and not run.running
    with RunFolderLock(run_dir):  # a resumed launch, later killed: it never wrote its summary
        assert run.running and run.status == "running"
    os.utime(run_dir / "summary.json", (1.0, 1.0))
    assert run.status == "unknown"
