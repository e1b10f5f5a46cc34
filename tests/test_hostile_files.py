"""The probe suite: hostile variants of a real policy artifact, checkpoint and run folder, each through the command a
user runs on a downloaded file (`surreal eval FILE --episodes 1`, `surreal eval RUN`, `surreal run --resume RUN`).

Every variant must be refused the same way: exit status 1 or 2, at most one line on stderr and no traceback, and no
module imported that the file names (a `pwnprobe.py` in the working folder writes a marker file when it is
imported). The issue's ten variants of a policy file, and a run folder naming a module, run as the real command in a
child process, within 30 s of CPU time (RLIMIT_CPU: the kernel stops the command past it, however busy the machine)
and under a 6 GiB address-space limit (RLIMIT_AS), so that a file cannot make the command allocate what it claims;
the other variants run the same command line in this process (`surreal.cli.main`). Three of the ten broke before:
the module an env id names was imported, NaN weights were scored, and a header nested 200,000 deep was a
RecursionError traceback. The named module runs when the user names it (`--import`).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import resource
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from surreal.algos import get_algorithm
from surreal.cli import main
from surreal.config import algo_config, load_config, save_config
from surreal.envs import make_env
from surreal.policy.artifact import FILE_NAME, encode
from surreal.policy.build import PolicyRecorder

ADDRESS_SPACE_BYTES = 6 << 30
CPU_SECONDS = 30
HANG_S = 300  # wall clock, only to catch a hang: the verdict on time is the CPU limit's
OVERRIDES = ["algo=ppo", "env=Pendulum-v1", "algo.hidden_sizes=[8,8]", "seed=3"]
MARKER = "PWNED"
# Imported, it leaves a marker and registers two ids: one an env (Pendulum's, so a policy trained on Pendulum fits
# it), one nothing registers, so a resumed run that was allowed to import it stops at preflight, before any role.
PWNPROBE = f"""
from pathlib import Path
import gymnasium as gym

Path({MARKER!r}).write_text("imported")
gym.register("Pwn-v0", entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv", max_episode_steps=10)
"""


def limits() -> None:
    """In the child, before exec: what a command may take of this machine."""
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def surreal(cwd: Path, *args: str) -> tuple[int, str]:
    """`python -m surreal ARGS` in `cwd` under `limits`: (exit status, stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "surreal", *args],
        cwd=cwd,
        env={**os.environ, "SURREAL_RUNS_ROOT": str(cwd / "runs")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        preexec_fn=limits,
        check=False,
    )
    return done.returncode, done.stderr


def assert_refused(cwd: Path, code: int, err: str, expected: str) -> None:
    """Exit 1 or 2 (not a signal: the CPU or memory limit), one line on stderr naming `expected`, no marker."""
    assert code in (1, 2), (code, err[-3000:])
    assert "Traceback" not in err and err.strip().count("\n") == 0, err[-3000:]
    assert expected in err, err
    assert not (cwd / MARKER).exists(), "a module the file named was imported"


# -- a real artifact, checkpoint and run folder ---------------------------------------------------------------


def spaces() -> tuple:
    env = make_env("Pendulum-v1", 0)
    env.close()
    return env.observation_space, env.action_space


@pytest.fixture(scope="session")
def learner_state() -> dict:
    """A fresh PPO learner on Pendulum (8x8), its statistics moved off the prior: what an artifact and a checkpoint
    of a run hold."""
    cfg = load_config(OVERRIDES)
    learner = get_algorithm("ppo").make_learner(*spaces(), algo_config(cfg), torch.device("cpu"))
    learner.obs_rms.update(np.random.default_rng(0).normal(3.0, 2.0, (64, 3)))
    return {"params": learner.params(), "state": learner.state_dict()}


@pytest.fixture(scope="session")
def artifact(tmp_path_factory, learner_state) -> bytes:
    """The policy file a learner writes (PolicyRecorder, as roles/learner.py), as bytes."""
    path = tmp_path_factory.mktemp("artifact") / FILE_NAME
    recorder = PolicyRecorder(load_config(OVERRIDES), *spaces(), "abc123")
    recorder.save(path, learner_state["params"], version=7, env_steps=640, updates=3)
    return path.read_bytes()


@pytest.fixture
def workdir(tmp_path) -> Path:
    """The folder a user runs the command in, with `pwnprobe.py` importable from it (`python -m` puts it on the
    path)."""
    (tmp_path / "pwnprobe.py").write_text(PWNPROBE)
    return tmp_path


def safetensors_parts(data: bytes) -> tuple[dict, bytes]:
    (size,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + size]), data[8 + size :]


def with_safetensors_header(text: bytes, rest: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text + rest


def edited(data: bytes, header_edit: Callable | None = None, tensor_edit: Callable | None = None) -> bytes:
    """`data` re-encoded with its header and tensors edited (as a hostile writer would)."""
    header, tensors = _decoded(data)
    if header_edit:
        header_edit(header)
    if tensor_edit:
        tensor_edit(tensors)
    return encode(header, tensors)


def _decoded(data: bytes) -> tuple[dict, dict]:
    from surreal.policy.artifact import decode

    return decode(data)


def deep_policy_header(data: bytes) -> bytes:
    entries, rest = safetensors_parts(data)
    entries["__metadata__"]["surreal.policy"] = "[" * 200_000 + "]" * 200_000
    return with_safetensors_header(json.dumps(entries).encode(), rest)


def deep_safetensors_header(data: bytes) -> bytes:
    _, rest = safetensors_parts(data)
    return with_safetensors_header(b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}", rest)


def offsets_past_the_file(data: bytes) -> bytes:
    entries, rest = safetensors_parts(data)
    name = max((k for k in entries if k != "__metadata__"), key=lambda k: entries[k]["data_offsets"][1])
    begin = entries[name]["data_offsets"][0]
    entries[name] = {"dtype": "F64", "shape": [10**9], "data_offsets": [begin, begin + 8 * 10**9]}  # 8 GB claimed
    return with_safetensors_header(json.dumps(entries).encode(), rest)


def nan_everywhere(tensors: dict) -> None:
    for name, array in tensors.items():
        if array.dtype.kind == "f":
            tensors[name] = np.full_like(array, np.nan)


class Exploit:
    """Unpickling this runs `touch PWNED` in the working folder."""

    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


def set_in(path: tuple[str, ...], value: object) -> Callable[[dict], None]:
    def edit(header: dict) -> None:
        node = header
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


# (name, the file's bytes from the real artifact's, what the one line says)
POLICY_VARIANTS: list[tuple[str, Callable[[bytes], bytes], str]] = [
    # The three that broke.
    ("env id naming a module", lambda d: edited(d, set_in(("env", "id"), "pwnprobe:Pwn-v0")), "--import pwnprobe"),
    ("every weight NaN", lambda d: edited(d, tensor_edit=nan_everywhere), "holds NaN or infinity"),
    ("policy header nested 200,000 deep", deep_policy_header, "nested deeper than"),
    # The seven that held.
    ("header length 2**62", lambda d: struct.pack("<Q", 2**62) + d[8:], "over the 1048576-byte limit"),
    ("truncated file", lambda d: d[: len(d) // 2], "cut short"),
    (
        "a 3 x 65,536 network over small tensors",
        lambda d: edited(d, set_in(("algo_config", "hidden_sizes"), [65_536] * 3)),
        "network of at least",
    ),
    (
        "an observation space of 10**9",
        lambda d: edited(d, set_in(("observation_space", "shape"), [10**9])),
        "observation_space",
    ),
    ("tensor offsets past the file", offsets_past_the_file, "cut short"),
    ("format version 99", lambda d: edited(d, set_in(("format_version",), 99)), "format version 99"),
    (
        "env kwargs pointing MuJoCo at /etc/passwd",
        lambda d: edited(d, set_in(("env",), {"id": "HalfCheetah-v5", "kwargs": {"xml_file": "/etc/passwd"}})),
        "cannot make env 'HalfCheetah-v5'",
    ),
    ("safetensors header nested 200,000 deep", deep_safetensors_header, "nested deeper than"),
]
# The policies-out issue's: the same command, in this process.
MORE_POLICY_VARIANTS: list[tuple[str, Callable[[bytes], bytes], str]] = [
    ("truncated weights", lambda d: d[:-100], "cut short"),
    (
        "wrong shapes",
        lambda d: edited(d, tensor_edit=lambda t: t.update({"policy/actor_mean.0.weight": np.zeros((9, 3), "f4")})),
        "actor_mean.0.weight",
    ),
    ("unknown keys", lambda d: edited(d, set_in(("payload",), "rm -rf /")), "unknown payload"),
    ("a pickle renamed to policy.safetensors", lambda d: pickle.dumps({"policy": Exploit()}), "over the"),
]


@pytest.mark.parametrize(("make", "expected"), [v[1:] for v in POLICY_VARIANTS], ids=[v[0] for v in POLICY_VARIANTS])
def test_a_hostile_policy_file_is_one_line_and_runs_nothing(workdir, artifact, make, expected):
    path = workdir / FILE_NAME
    path.write_bytes(make(artifact))
    code, err = surreal(workdir, "eval", str(path), "--episodes", "1")
    assert_refused(workdir, code, err, expected)


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`surreal ARGS` in this process (`surreal.cli.main`), in the working folder the caller chdir'ed to."""
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("make", "expected"), [v[1:] for v in MORE_POLICY_VARIANTS], ids=[v[0] for v in MORE_POLICY_VARIANTS]
)
def test_more_hostile_policy_files_are_one_line(workdir, artifact, capsys, monkeypatch, make, expected):
    monkeypatch.chdir(workdir)
    (workdir / FILE_NAME).write_bytes(make(artifact))
    code, err = in_process(capsys, "eval", FILE_NAME, "--episodes", "1")
    assert_refused(workdir, code, err, expected)


def test_a_header_of_100_mb_is_refused_unread(workdir, artifact, capsys, monkeypatch):
    monkeypatch.chdir(workdir)
    size = 100 << 20
    with open(workdir / FILE_NAME, "wb") as f:
        f.write(struct.pack("<Q", size))
        f.write(b"{" + b" " * (size - 2) + b"}")
        f.write(artifact[8:])
    code, err = in_process(capsys, "eval", FILE_NAME, "--episodes", "1")
    assert_refused(workdir, code, err, "over the 1048576-byte limit")


def test_the_module_a_policy_names_runs_when_the_user_names_it(workdir, artifact):
    """`--import pwnprobe`: the user's choice, so its env is made and the policy scored in it."""
    path = workdir / FILE_NAME
    path.write_bytes(edited(artifact, set_in(("env", "id"), "pwnprobe:Pwn-v0")))
    result = workdir / "scored.json"  # one episode is not the policy's own evaluation: written where asked
    code, err = surreal(workdir, "eval", str(path), "--episodes", "1", "--import", "pwnprobe", "--json", str(result))
    assert code == 0, err[-3000:]
    assert (workdir / MARKER).exists()
    assert json.loads(result.read_text())["env"] == "pwnprobe:Pwn-v0"


# -- checkpoints: a run folder without a policy artifact -------------------------------------------------------


def run_folder(
    root: Path, learner_state: dict, env: str = "Pendulum-v1", state: object = None, raw: bytes | None = None
) -> Path:
    """A run folder from before policy artifacts: config.yaml and one learner checkpoint (`state`, else the real
    one; `raw`: the checkpoint file's bytes as they are)."""
    run = root / "runs" / "downloaded"
    (run / "checkpoints").mkdir(parents=True)
    save_config(load_config([*OVERRIDES, f"env={env}"]), run / "config.yaml")
    checkpoint = run / "checkpoints" / "ckpt-0000000003.pt"
    if raw is not None:
        checkpoint.write_bytes(raw)
    else:
        real = {"learner": learner_state["state"], "counters": {"env_steps": 640, "updates": 3, "version": 7}}
        torch.save(real if state is None else state, checkpoint)
    return run


def deep_checkpoint(real: bytes, depth: int) -> bytes:
    """The real checkpoint's archive with its structure (data.pkl) replaced by `{"learner": {}, "counters": {"deep":
    [[[...]]]}}` nested `depth` lists deep: pickle opcodes build it without recursing (torch.save would recurse)."""
    text = lambda s: b"X" + struct.pack("<I", len(s)) + s.encode()  # noqa: E731 - BINUNICODE
    structure = (
        b"\x80\x02}(" + text("learner") + b"}" + text("counters") + b"}(" + text("deep")
        + b"]" * depth + b"a" * (depth - 1) + b"uu."
    )  # fmt: skip
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(real)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for entry in source.infolist():
            data = structure if entry.filename.endswith("/data.pkl") else source.read(entry.filename)
            archive.writestr(entry, data)
    return out.getvalue()


def nan_state(learner_state: dict) -> dict:
    state = {k: v for k, v in learner_state["state"].items()}
    state["model"] = {k: torch.full_like(v, float("nan")) for k, v in state["model"].items()}
    return {"learner": state, "counters": {"env_steps": 640, "updates": 3, "version": 7}}


def real_checkpoint_bytes(root: Path, learner_state: dict) -> bytes:
    return (run_folder(root / "real", learner_state) / "checkpoints" / "ckpt-0000000003.pt").read_bytes()


def test_a_checkpoints_config_naming_a_module_is_one_line_and_imports_nothing(workdir, learner_state):
    """`surreal eval RUN` of a run folder without a policy artifact makes its env from config.yaml: a downloaded run
    folder is as untrusted as a policy file."""
    run = run_folder(workdir, learner_state, env="pwnprobe:Pwn-v0")
    code, err = surreal(workdir, "eval", str(run), "--episodes", "1")
    assert_refused(workdir, code, err, "--import pwnprobe")


CHECKPOINT_VARIANTS: list[tuple[str, Callable[[Path, dict], Path], str]] = [
    ("NaN weights", lambda root, s: run_folder(root, s, state=nan_state(s)), "holds NaN or infinity"),
    (
        "a pickle renamed to a checkpoint",
        lambda root, s: run_folder(root, s, raw=pickle.dumps({"learner": Exploit()})),
        "not a torch checkpoint",
    ),
    (
        "truncated checkpoint",
        lambda root, s: run_folder(root, s, raw=real_checkpoint_bytes(root, s)[:-2000]),
        "not a torch checkpoint",
    ),
    (
        "a structure nested 100,000 deep",
        lambda root, s: run_folder(root, s, raw=deep_checkpoint(real_checkpoint_bytes(root, s), 100_000)),
        "nested deeper than",
    ),
]


@pytest.mark.parametrize(
    ("make", "expected"), [v[1:] for v in CHECKPOINT_VARIANTS], ids=[v[0] for v in CHECKPOINT_VARIANTS]
)
def test_a_hostile_checkpoint_is_one_line_and_runs_nothing(workdir, learner_state, capsys, monkeypatch, make, expected):
    monkeypatch.chdir(workdir)
    run = make(workdir, learner_state)
    code, err = in_process(capsys, "eval", str(run), "--episodes", "1")
    assert_refused(workdir, code, err, expected)


def test_a_config_yaml_of_anchors_is_refused_before_it_expands(workdir, learner_state, capsys, monkeypatch):
    """A billion laughs: 30 levels of aliases, each twice the one before, would be 2**30 values once OmegaConf
    copies them; no config here uses anchors."""
    monkeypatch.chdir(workdir)
    run = run_folder(workdir, learner_state)
    laughs = "".join(f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]\n" for i in range(1, 30))
    (run / "config.yaml").write_text(f"l0: &l0 [1, 2]\n{laughs}")
    code, err = in_process(capsys, "eval", str(run), "--episodes", "1")
    assert_refused(workdir, code, err, "anchors and aliases")


def test_a_run_folder_naming_a_module_is_refused_by_resume_unless_the_user_names_it(workdir, learner_state):
    """A downloaded run folder is as untrusted as a policy file: `--resume` refuses its module's env id in one line;
    with `--import`, the module is imported (the user's choice) and the launcher goes on to its own checks (here
    the id names an env the module does not register: exit 2 before any role starts)."""
    run = run_folder(workdir, learner_state, env="pwnprobe:Unregistered-v0")
    code, err = surreal(workdir, "run", "--resume", str(run), "--no-progress")
    assert_refused(workdir, code, err, "--import pwnprobe")
    code, err = surreal(workdir, "run", "--resume", str(run), "--no-progress", "--import", "pwnprobe")
    assert code == 2 and "not a registered Gymnasium environment" in err, err[-3000:]
    assert (workdir / MARKER).exists()


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        ('{"members": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested deeper than"),
        (json.dumps({"members": [{"name": "../../elsewhere", "overrides": [], "swept": {}}]}), "member 0's name"),
        (json.dumps({"members": [{"name": "m", "overrides": ["env=pwnprobe:Pwn-v0"], "swept": {}}]}), "--import"),
    ],
    ids=["nested deep", "a member out of its folder", "a member naming a module"],
)
def test_a_hostile_sweep_plan_is_one_line(workdir, capsys, monkeypatch, plan, expected):
    monkeypatch.chdir(workdir)
    sweep = workdir / "runs" / "sweep"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(plan)
    code, err = in_process(capsys, "run", "--multirun", "--resume", str(sweep), "--no-progress")
    assert_refused(workdir, code, err, expected)


# -- the Python API: the same rule ------------------------------------------------------------------------------


def test_load_policy_run_open_and_resume_refuse_a_run_folders_module_unless_named(workdir, learner_state, monkeypatch):
    import surreal as api
    from surreal.policy.load import PolicyError

    run = run_folder(workdir, learner_state, env="pwnprobe:Pwn-v0")
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(workdir))
    with pytest.raises(PolicyError, match=r"imports=\['pwnprobe'\]"):
        api.load_policy(run)
    with pytest.raises(PolicyError, match="--import pwnprobe"):
        api.Run.open(run).policy()
    with pytest.raises(api.ConfigError, match="--import pwnprobe"):
        api.start(resume=run, mode="serial", runs_root=workdir / "runs")
    assert not (workdir / MARKER).exists() and "pwnprobe" not in sys.modules
    try:
        policy = api.Run.open(run, imports=["pwnprobe"]).policy()  # named: imported, its env made
        assert (workdir / MARKER).exists() and policy.env_id == "pwnprobe:Pwn-v0"
        assert policy.act(np.zeros(3)).shape == (1,)
    finally:
        sys.modules.pop("pwnprobe", None)
        gym.envs.registry.pop("Pwn-v0", None)
