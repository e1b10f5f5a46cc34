"""bench/gpu.sh, the one command for every GPU figure, and bench/gpu_kit.py, the wheels it installs there.

The GPU machine is lent only now and then: `bench/gpu.sh --dry` runs every part at toy sizes on this machine's CPU
with this interpreter and no kit, so a renamed flag or result key fails here, not on the next GPU lease."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from bench import gpu_kit

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu.sh"

# Every file the parts write (T = dry), with the keys the docs' results tables read.
LEARNER_KEYS = {"benchmark", "env", "machine", "rows"}
THROUGHPUT_KEYS = {"benchmark", "env", "device", "points", "actors", "system_env_steps_per_s", "efficiency"}
LEARNING_KEYS = {"benchmark", "algo", "env", "steps", "actors", "overrides", "runs", "eval_return_mean"}
ATARI_KEYS = {
    "bench",
    "machine",
    "game",
    "actors",
    "device",
    "raw_frames_per_s",
    "system",
    "efficiency",
    "learner_alone",
}
EXPECTED = {
    "pytest-cuda": {"benchmark", "torch", "device_name", "tests", "passed", "failed", "error", "skipped", "cases"},
    "learner": LEARNER_KEYS,
    "learner-cpu": LEARNER_KEYS | {"device_auto"},
    "learner-group": {"benchmark", "backend", "machine", "rows"},
    "capacity-learner": {"benchmark", "machine", "device", "name", "learner", "raw", "source"},
    "throughput": THROUGHPUT_KEYS,
    "throughput-cpu-learner": THROUGHPUT_KEYS,
    "core-sharing": {"benchmark", "machine", "alone", "beside_busy", "per_actor_of_n", "beside_busy_ratio"},
    "learning-ppo-HalfCheetah-v5": LEARNING_KEYS,
    "learning-ddpg-HalfCheetah-v5": LEARNING_KEYS,
    "learning-td3-HalfCheetah-v5": LEARNING_KEYS,
    "learning-sac-HalfCheetah-v5": LEARNING_KEYS,
    "learning-crossq-HalfCheetah-v5": LEARNING_KEYS,
    "throughput-robosuite-Lift": THROUGHPUT_KEYS,
    "learning-ddpg-robosuite-Lift": LEARNING_KEYS,
    "inference": {"bench", "machine", "env", "actors", "envs_per_actor", "inference_workers", "networks"},
    "atari-ppo": ATARI_KEYS,
    "atari-ppo-bf16": ATARI_KEYS,
}


def gpu_sh(*args: str, tmp_path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "WORK": str(tmp_path / "work"), "TMPDIR": str(tmp_path)}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow  # about 3 minutes of CPU: fifteen toy steps, ten of them whole `surreal run`s (four in part11)
def test_the_dry_run_writes_every_result_file_of_every_part(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = gpu_sh("--dry", str(out), tmp_path=tmp_path, timeout=1800)  # the limit only catches a hang
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    written = {p.name for p in out.glob("*.json")}
    assert written == {f"{name}.dry.json" for name in EXPECTED}
    assert {p.name for p in out.glob("*.log")} == {f"gpu-part{n}.dry.log" for n in range(1, 13)}
    results = {name: json.loads((out / f"{name}.dry.json").read_text()) for name in EXPECTED}
    for name, keys in EXPECTED.items():
        assert keys <= results[name].keys(), f"{name}: missing {keys - results[name].keys()}"

    tests = results["pytest-cuda"]
    assert tests["tests"] > 0 and tests["failed"] == tests["error"] == 0, tests
    # Without CUDA the capture tests skip; the rest of the selection (fallback, shapes, device=auto) runs.
    assert any("cuda_graph" in case["test"] for case in tests["cases"])
    assert any(case["outcome"] == "passed" for case in tests["cases"])
    rows = results["learner"]["rows"] + results["learner-cpu"]["rows"]
    assert {row["algo"] for row in rows} == {"ppo", "ddpg", "td3", "sac", "crossq"}
    assert all({"current", "reference", "ratio_current", "core"} <= row.keys() for row in rows)
    auto = results["learner-cpu"]["device_auto"]
    assert auto["ppo"]["chosen"] == auto["ddpg"]["chosen"] == "cpu" and auto["ppo"]["update_s"]["cpu"] > 0
    assert results["throughput-robosuite-Lift"]["env"] == "robosuite:Lift"
    timed = results["capacity-learner"]["raw"]  # the capacity model's learner, as part3 measures a GPU's
    assert all(t > 0 for t in timed["ppo_update_s"].values()) and timed["ddpg_step_ms"] > 0, timed
    assert {"step_s", "sample_s", "ddpg_step_s"} == results["capacity-learner"]["learner"].keys()
    for name in EXPECTED:
        if name.startswith("throughput"):
            assert [p["actors"] for p in results[name]["points"]] == [1]
            point = results[name]["points"][0]
            assert point["raw_env_steps_per_s"] > 0
            assert {"learner_update_s", "learner_wait_share"} <= point.keys()  # NaN when a toy window held no rows
        if name.startswith("learning"):
            assert [run["status"] for run in results[name]["runs"]] == ["completed"], results[name]["runs"]
    assert "algo.twin_critics=true" in results["learning-td3-HalfCheetah-v5"]["overrides"]
    assert "preset=crossq" in results["learning-crossq-HalfCheetah-v5"]["overrides"]
    assert results["learning-sac-HalfCheetah-v5"]["algo"] == "sac"
    # part11: both networks, each mode measured on its own run, and the ratio of the two.
    networks = results["inference"]["networks"]
    assert networks.keys() == {"64-64", "3x1024"} and results["inference"]["inference_workers"] == 1
    for row in networks.values():
        assert row["per_actor"]["env_steps_per_s"] > 0 and row["central"]["env_steps_per_s"] > 0, row
        assert row["central_over_per_actor"] == row["central"]["env_steps_per_s"] / row["per_actor"]["env_steps_per_s"]
    # part12: raw ale-py and the CNN learner alone measured (a toy window may hold too few updates for a system rate).
    for name in ("atari-ppo", "atari-ppo-bf16"):
        atari = results[name]
        assert atari["raw_frames_per_s"]["mean"] > 0 and atari["learner_alone"]["samples_per_s"] > 0, atari
    assert results["atari-ppo-bf16"]["learner_alone"]["autocast"] == "bf16"


def test_a_real_run_names_its_parts_and_needs_the_kit(tmp_path: Path) -> None:
    """Without --dry a part must be named (each fills one device call), and the kit must be there."""
    no_part = gpu_sh(str(tmp_path / "out"), tmp_path=tmp_path, timeout=60)
    assert no_part.returncode == 2 and "name the part" in no_part.stderr
    bad = gpu_sh("part13", str(tmp_path / "out"), tmp_path=tmp_path, timeout=60)
    assert bad.returncode == 2 and "unknown part part13" in bad.stderr
    env = {**os.environ, "KIT": str(tmp_path / "no-kit"), "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    no_kit = subprocess.run(
        ["bash", str(SCRIPT), "part1", str(tmp_path / "out")], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert no_kit.returncode == 1 and "make gpu-kit" in no_kit.stderr


def test_the_gpu_kit_page_names_every_result_file() -> None:
    page = (REPO / "docs" / "gpu.md").read_text()
    assert all(f"`{name}`" in page for name in EXPECTED), "docs/gpu.md misses a result file"


def test_the_kit_folder_is_ignored_by_git() -> None:
    ignored = subprocess.run(["git", "check-ignore", "-q", ".gpu-kit/x.whl"], cwd=REPO, check=False)
    assert ignored.returncode == 0


def fake_wheel(folder: Path, name: str, version: str, requires: list[str], tag: str = "py3-none-any") -> Path:
    path = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        wheel.writestr(
            f"{name}-{version}.dist-info/METADATA", "\n".join(lines + [f"Requires-Dist: {r}" for r in requires])
        )
    return path


def test_the_kit_check_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Requirements are followed through extras and markers (for CPython 3.12 on Linux); what the GPU image has
    or LEFT_OUT explains counts as met; a wrong version, a missing package or a wheel for another Python does not."""
    monkeypatch.setattr(gpu_kit, "KIT", {"alpha": "", "beta": ""})
    monkeypatch.setattr(gpu_kit, "project_requirements", lambda: [gpu_kit.Requirement("alpha[extra]>=1")])
    fake_wheel(
        tmp_path, "alpha", "1.0", ["numpy", "mink", "beta>=2; extra == 'extra'", "ghost; python_version < '3.9'"]
    )
    fake_wheel(tmp_path, "beta", "2.1", ["gamma", "delta; sys_platform == 'win32'"])
    assert gpu_kit.check(tmp_path) == ["beta needs gamma: neither in the kit nor in the GPU image"]
    fake_wheel(tmp_path, "gamma", "0.1", [], tag="cp311-cp311-manylinux_2_17_x86_64")
    assert gpu_kit.check(tmp_path) == [
        "gamma-0.1-cp311-cp311-manylinux_2_17_x86_64.whl does not install on CPython 3.12, manylinux x86_64"
    ]
    (tmp_path / "gamma-0.1-cp311-cp311-manylinux_2_17_x86_64.whl").unlink()
    fake_wheel(tmp_path, "gamma", "0.1", [], tag="cp312-abi3-manylinux_2_28_x86_64")
    (tmp_path / "beta-2.1-py3-none-any.whl").unlink()
    fake_wheel(tmp_path, "beta", "1.5", ["gamma"])
    assert gpu_kit.check(tmp_path) == ["alpha needs beta>=2, the kit has 1.5"]
