"""The Python API: `surreal.train`, `surreal.start`, `surreal.Run` (docs/api.md).

    import surreal

    run = surreal.train(algo="sac", env="Pendulum-v1", actors=2, steps=20_000, name="pend-sac")
    print(run.summary["eval_return_mean"], len(run.metrics), run.dir)
    action = run.policy()(observation)

A run is the very run `surreal run` makes, by the same run service (surreal/run/): the experiment is prepared here,
once (config, preflight, run folder), then `mode="processes"` hands the prepared folder to a launcher of its own, a
child of this process that starts and supervises every role; `mode="serial"` runs every role's core in a thread of
this process (run/serial.py: deterministic for a seed, for notebooks and tests). Either way the run folder is the
same (`runs/<name>/`: config.yaml, metrics.jsonl, evals.jsonl, eval.json, checkpoints, summary.json), and `Run` reads
its results from there, so `Run.open` reads a run started from the CLI just as well.

Errors are the CLI's (`train`). A script that ends while a run it `start`ed still runs stops that run as Ctrl-C would
(`_stop_runs_left`): its launcher would otherwise be ended without a word, and a serial run would keep the script from
exiting until its budget was spent.

Importing `surreal` loads none of this; this module imports Hydra, torch and the launcher only when a run is
made or read.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from surreal.errors import ConfigError

if TYPE_CHECKING:
    from surreal.config import ExperimentConfig
    from surreal.policy.load import Policy
    from surreal.run.prepare import PreparedRun

Mode = Literal["processes", "serial"]
MODES = ("processes", "serial")
LAUNCHER_LOG = "launcher.log"  # in <run>/logs/: what the launcher of a run started here printed
# How long `stop` waits for a launcher to stop its roles: its learner's and replay shards' grace periods
# (launch/local.py LEARNER_GRACE_S, REPLAY_GRACE_S) and a margin; it returns as soon as the launcher is out.
STOP_TIMEOUT_S = 240.0
POLL_S = 0.1
PLAIN = re.compile(r"[A-Za-z0-9_.:/+-]+")  # a string Hydra's grammar reads as itself, unquoted
# One serial run at a time in a process: the roles' cores share torch's, NumPy's and Python's process-wide
# generators, so two at once would make neither deterministic.
_SERIAL = threading.Lock()
_STARTED: list[Run] = []  # the runs started in this process: those still running when it exits are stopped


class RunFailed(RuntimeError):
    """The run ended without completing its budget (a role exhausted its restarts, the serial loop raised).
    `run` is the `Run` (its folder, logs and summary say more)."""

    def __init__(self, message: str, run: Run) -> None:
        super().__init__(message)
        self.run = run


# -- overrides --------------------------------------------------------------------------------------------


def format_value(value: Any) -> str:
    """A Python value as Hydra's override grammar reads it back: `true`, `null`, `3e-04`, `[64,64]`, `'a b'`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return value if PLAIN.fullmatch(value) else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{key}:{format_value(v)}" for key, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as a config value")


def as_overrides(overrides: Mapping[str, Any] | Sequence[str] | None = None, **shorthands: Any) -> list[str]:
    """`surreal run`'s overrides from keyword shorthands (algo, env, actors, steps, seed, name; None: not set) and
    `overrides`: a mapping of dotted keys to Python values (nested mappings: dotted keys below), or `key=value`
    strings as typed on the command line."""
    items = [f"{key}={format_value(value)}" for key, value in shorthands.items() if value is not None]
    if overrides is None:
        return items
    if isinstance(overrides, str):
        raise TypeError("overrides is a mapping or a list of 'key=value' strings, not one string")
    if isinstance(overrides, Mapping):
        from surreal.config.loading import dotted_items

        return [*items, *(f"{key}={format_value(value)}" for key, value in dotted_items(overrides))]
    return [*items, *overrides]


# -- the run ----------------------------------------------------------------------------------------------


class Run:
    """A run folder and, for a run started here, the launcher process or serial thread running it.

    Results are read from the folder whenever asked, so they follow a run that is still going."""

    def __init__(self, run_dir: str | os.PathLike[str], imports: Sequence[str] = ()) -> None:
        self.dir = Path(run_dir).resolve()
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.imports = tuple(imports)  # modules the user named for this run's env (`open`, `start`)

    @classmethod
    def open(cls, path: str | os.PathLike[str], imports: Sequence[str] = ()) -> Run:
        """The run in an existing folder (started from here, the CLI or another machine). A folder is as untrusted
        as a policy file: its config.yaml's env is made (by `policy()` of a run without a policy artifact) only if
        its id imports nothing but `imports`, the modules you name (imported first) or have imported."""
        from surreal.run.resume import find_run_dir

        return cls(find_run_dir(path), imports)

    def __repr__(self) -> str:
        return f"Run({str(self.dir)!r}, status={self.status!r})"

    @property
    def name(self) -> str:
        return self.dir.name

    # -- results, read from the folder -------------------------------------------------------------------

    @property
    def config(self) -> ExperimentConfig:
        """The experiment (config.yaml: every key resolved)."""
        from surreal.config import read_config

        return read_config(self.dir / "config.yaml")

    @property
    def summary(self) -> dict[str, Any] | None:
        """summary.json (status, env steps, wall time, final eval, restarts), written when a launch ends; None
        before. After `--resume`, the resumed session's."""
        from surreal.runjson import read_json

        return read_json(self.dir / "summary.json")

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """metrics.jsonl's rows: the learner's counters and update statistics, one row per record."""
        from surreal.metricsfile import METRICS_FILE, read_metrics

        return read_metrics(self.dir / METRICS_FILE)

    @property
    def evals(self) -> list[dict[str, Any]]:
        """evals.jsonl's rows: the evaluator's evaluations during training (with `learner.eval_interval`)."""
        from surreal.metricsfile import read_evals

        return read_evals(self.dir)

    @property
    def final_eval(self) -> dict[str, Any] | None:
        """eval.json: the final deterministic evaluation (returns, mean, std, env steps); None before."""
        from surreal.runjson import read_json

        return read_json(self.dir / "eval.json")

    @property
    def running(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        if self._thread is not None:
            return self._thread.is_alive()
        from surreal.run.folder import launcher_pid

        return launcher_pid(self.dir) is not None

    @property
    def status(self) -> str:
        """running, completed, failed, interrupted (summary.json's), or `unknown`: no summary of its last launch
        (not started yet, or its launcher was killed: then summary.json, if any, is older than the launch)."""
        if self.running:
            return "running"
        from surreal.run.folder import LOCK_FILE

        summary = self.summary
        if summary is None or _older(self.dir / "summary.json", self.dir / LOCK_FILE):
            return "unknown"
        return str(summary["status"])

    def policy(self) -> Policy:
        """The trained policy (`surreal.load_policy` of the run folder: its policy artifact, or for a run from before
        artifacts its newest checkpoint): `policy.act(obs)` is its deterministic action."""
        from surreal.policy.load import load_policy

        return load_policy(self.dir, self.imports)

    # -- control -------------------------------------------------------------------------------------------

    def wait(self, timeout_s: float | None = None) -> Run:
        """Block until the run is over; returns the run, completed or stopped. Raises `RunFailed` if it failed,
        ConfigError if a serial run was to continue a checkpoint it cannot, TimeoutError after `timeout_s`. Ctrl-C
        here stops the run (it saves its state: `resume=` continues it) and raises KeyboardInterrupt."""
        try:
            self._join(timeout_s)
        except KeyboardInterrupt:
            self.stop()
            raise
        self._raise_outcome()
        return self

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> Run:
        """Stop the run as Ctrl-C stops `surreal run`: the learner checkpoints, replay shards snapshot, and
        summary.json says `interrupted`. Returns once it is over (SIGKILL after `timeout_s`). Works on an opened
        run too, by signalling the launcher that holds its folder."""
        from surreal.run.folder import launcher_pid

        if self._process is not None:
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGINT)
                try:
                    self._process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
        elif self._thread is not None:
            self._stop.set()
            self._thread.join(timeout_s)
        elif (pid := launcher_pid(self.dir)) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
            with contextlib.suppress(TimeoutError):
                self._join(timeout_s)
        return self

    def _join(self, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.running:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self.dir} still running after {timeout_s} s")
            if self._thread is not None:
                self._thread.join(POLL_S)
            elif self._process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(POLL_S)
            else:
                time.sleep(POLL_S)

    def _raise_outcome(self) -> None:
        if self._error is not None:
            if isinstance(self._error, ConfigError):
                raise self._error
            raise RunFailed(f"{self.dir}: {type(self._error).__name__}: {self._error}", self) from self._error
        if self._process is not None:
            code = self._process.returncode
            if code not in (0, 130):
                reason = (self.summary or {}).get("reason") or f"the launcher exited with code {code}"
                raise RunFailed(f"{self.dir}: {reason} (its lines: {self.dir / 'logs' / LAUNCHER_LOG})", self)
        elif self.status == "failed":
            raise RunFailed(f"{self.dir}: {(self.summary or {}).get('reason')}", self)

    # -- starting --------------------------------------------------------------------------------------------

    def _launch(self, prepared: PreparedRun, root: Path) -> None:
        """A launcher of its own for the folder prepared here, a child handed its lock (run/start.py), its output in
        logs/launcher.log after what the preparation said. The child gets SIGTERM (and stops as on Ctrl-C) if the
        thread that started it dies, so no run outlives its owner unseen."""
        from surreal.launch.supervisor import die_with
        from surreal.run.start import handed_over

        env = {**os.environ, "SURREAL_RUNS_ROOT": str(root), "PYTHONUNBUFFERED": "1"}
        said = [f"surreal: warning: {w}\n" for w in prepared.warnings] + [f"[surreal] {n}\n" for n in prepared.notes]
        with prepared.lock, open(self.dir / "logs" / LAUNCHER_LOG, "a", encoding="utf-8") as log:
            log.write("".join(said))
            log.flush()
            self._process = subprocess.Popen(
                handed_over(prepared),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with(os.getpid()),
                pass_fds=[prepared.lock.file.fileno()],
            )
        _left_running_is_stopped(self)

    def _start_serial(self, prepared: PreparedRun) -> None:
        """Run `prepared` in a daemon thread, holding the serial claim `start` took: at the script's end the
        interpreter does not wait for it to spend its budget; `_stop_runs_left` stops it (a checkpoint) and says so."""
        self._thread = threading.Thread(
            target=self._run_serial, args=(prepared,), name=f"surreal-{self.name}", daemon=True
        )
        self._thread.start()
        _left_running_is_stopped(self)

    def _run_serial(self, prepared: PreparedRun) -> None:
        """The serial run in this thread; what it raised is kept for `wait()`; releases the serial claim."""
        from surreal.run.start import start

        try:
            start(prepared, "serial", stop=lambda: "stopped by Run.stop()" if self._stop.is_set() else None)
        except Exception as exc:  # noqa: BLE001 - handed to wait(), which raises it
            self._error = exc
        finally:
            _SERIAL.release()


def _left_running_is_stopped(run: Run) -> None:
    """Have `run` stopped, with a line saying so, if it still runs when this process exits (`_stop_runs_left`)."""
    if not _STARTED:
        atexit.register(_stop_runs_left)
    _STARTED.append(run)


def _stop_runs_left() -> None:
    """At the exit of a process that started runs: each one still running is stopped as Ctrl-C stops `surreal run`
    (its state saved: `resume=` continues it) and named in one line on stderr."""
    for run in _STARTED:
        if not run.running:
            continue
        run.stop()
        print(
            f"surreal: the script ended while run {run.dir} was still running: it was interrupted (its state saved); "
            f"continue it with `surreal run --resume {run.dir}` or surreal.train(resume={str(run.dir)!r})",
            file=sys.stderr,
            flush=True,
        )


def _older(path: Path, than: Path) -> bool:
    """Whether `path` was last written before `than` (a launcher writes its pid into the lock file as it starts)."""
    try:
        return path.stat().st_mtime < than.stat().st_mtime
    except FileNotFoundError:
        return False


# -- the functions ----------------------------------------------------------------------------------------


def start(
    algo: str | None = None,
    env: str | None = None,
    *,
    actors: int | None = None,
    steps: int | None = None,
    seed: int | None = None,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    name: str | None = None,
    mode: Mode = "processes",
    resume: str | os.PathLike[str] | Run | None = None,
    runs_root: str | os.PathLike[str] | None = None,
    imports: Sequence[str] = (),
) -> Run:
    """Start a run and return at once; `Run.wait()` blocks until it is over. Arguments as `train`'s."""
    from surreal.envs import env_ids_in, import_modules, modules_named
    from surreal.run.folder import runs_root as default_root
    from surreal.run.prepare import RunComplete, prepare

    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
    if isinstance(resume, str) and "://" in resume:
        raise ConfigError(f"resume={resume!r}: a bucket's run resumes with `surreal run --resume {resume}`")
    root = Path(runs_root if runs_root is not None else default_root()).resolve()
    items = as_overrides(overrides, algo=algo, env=env, actors=actors, steps=steps, seed=seed, name=name)
    imports = [*imports, *(resume.imports if isinstance(resume, Run) else ())]
    import_modules(imports, "imports=")
    if resume is not None:
        if name is not None:
            raise ConfigError("name= names a new run; a resumed run keeps its folder")
        import_modules(modules_named(env_ids_in(items)), "env=")  # an env you name is yours to import
    if mode == "serial" and not _SERIAL.acquire(blocking=False):
        raise ConfigError("a serial run is already running in this process: wait for it (or use mode='processes')")
    try:
        # ConfigError: what cannot run, refused before anything starts (surreal/run/prepare.py)
        prepared = prepare(items, resume=resume.dir if isinstance(resume, Run) else resume, mode=mode, root=root)
    except BaseException as exc:
        if mode == "serial":
            _SERIAL.release()
        if isinstance(exc, RunComplete):  # resumed with its budget spent: nothing to start, its results are there
            return Run.open(exc.run_dir, imports)
        raise
    for line in prepared.warnings:  # a budget a default eats (run/preflight.py), as the CLI prints it
        warnings.warn(line, UserWarning, stacklevel=3)
    run = Run(prepared.dir, imports)
    if mode == "processes":
        run._launch(prepared, root)
    else:
        run._start_serial(prepared)
    return run


def train(
    algo: str | None = None,
    env: str | None = None,
    *,
    actors: int | None = None,
    steps: int | None = None,
    seed: int | None = None,
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    name: str | None = None,
    mode: Mode = "processes",
    resume: str | os.PathLike[str] | Run | None = None,
    runs_root: str | os.PathLike[str] | None = None,
    imports: Sequence[str] = (),
) -> Run:
    """Train until the budget is spent and return the `Run`.

    algo, env, actors, steps, seed: `surreal run`'s shorthands (None: the packaged default). overrides: any other
    config keys, as {"algo.lr": 1e-3, "learner.eval_interval": 10_000} or ["algo.lr=1e-3"]. name: the run folder
    under `runs_root` (default SURREAL_RUNS_ROOT or ./runs; None: a timestamped name). mode: "processes" (every
    role a supervised process, as `surreal run`) or "serial" (one process, deterministic for a seed). resume: a run
    folder (or Run) to continue from its checkpoints instead; overrides may then change only its budget (steps)
    and how it runs. imports: modules to import first (your envs' module, as `surreal run --import`): a resumed run
    folder whose config.yaml names a `module:Name` env is refused unless its module is named here, in `env=`, or
    already imported. Raises ConfigError (the CLI's message) before anything starts, RunFailed if the run fails."""
    return start(**locals()).wait()  # every argument, as given
