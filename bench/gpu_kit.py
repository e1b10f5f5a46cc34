"""The GPU kit: the wheels a lent GPU machine's Python lacks for the actor, learner, replay, robosuite and Atari paths.

    python -m bench.gpu_kit [--kit .gpu-kit] [--limit-mib 64] [--pip-args "..."] [--no-smoke]   (make gpu-kit)

The GPU machine (the device tool's nvidia-h100-x1 / nvidia-h200, /work/.library/device/KINDS.md) runs Python 3.12
with its own CUDA PyTorch and many packages, reaches no package index, and takes at most 64 MiB of working tree
and carried folders per call. This builds, on a machine with pip and an index, the folder that travels with
`bench/gpu.sh` (carry [".gpu-kit"]):

1. downloads, with pip's own configuration (`--pip-args` adds options, e.g. another index), each package in
   KIT at the version this environment runs (the dev venv the suite passes on): binary wheels for CPython 3.12
   on manylinux x86_64, `--no-deps`; antlr4-python3-runtime 4.9.3, which exists only as a source release, is
   built here into its pure-Python wheel;
2. repacks robosuite's wheel (157 MB, mostly meshes of a dozen robots) with the assets of the Panda arm, its
   gripper and mount and every arena, object and texture, and nothing of the other robots, grippers, bases or
   bullet_data (`robosuite-<version>-0panda-py3-none-any.whl`): every task with `robots: Panda` (our default)
   loads; another robot does not;
3. checks the kit is complete: every requirement of the project (its dependencies, `rl`, `robosuite` and `atari`
   extras) and of every kit wheel, followed through extras, is in the kit at a matching version, in the GPU
   image's package list (GPU_IMAGE, KINDS.md of 2026-11-17; its own versions) or in LEFT_OUT with the reason;
   every wheel's tags fit CPython 3.12 on manylinux x86_64; one version per package;
4. installs the kit into a scratch target as pip on the GPU machine would (`--python-version 3.12
   --only-binary :all: --no-index --no-deps`), and (unless `--no-smoke`) makes robosuite's Lift with the
   repacked robosuite on this interpreter and steps it; where this machine has a CPython 3.12 (`--python312`,
   python3.12 on the PATH, or pyenv's), installs the kit there into a target beside a virtualenv standing in for
   the GPU image (IMAGE_STAND_INS, from the index) and runs pyzmq, MuJoCo's HalfCheetah-v5, omegaconf and the
   project's torch-free config, replay and ps on it;
5. fails unless the kit and the tracked working tree together stay under `--limit-mib`.
"""

from __future__ import annotations

import argparse
import base64
import glob
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path
from typing import cast

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

REPO = Path(__file__).resolve().parents[1]
KIT_DIR = REPO / ".gpu-kit"
DOWNLOADS = REPO / "build" / "gpu-kit-downloads"  # full wheels, kept between runs (build/ is ignored)
MIB = 1 << 20

# What the GPU machine's Python lacks, by what needs it. Versions: those of the environment running this.
KIT = {
    "pyzmq": "every role's sockets",
    "omegaconf": "the experiment config",
    "hydra-core": "the experiment config",
    "antlr4-python3-runtime": "omegaconf's interpolation grammar (a source release only: built here)",
    "gymnasium": "the actors' envs (rl extra)",
    "farama-notifications": "gymnasium",
    "mujoco": "the MuJoCo tasks (rl extra; 3.3.7 for robosuite)",
    "glfw": "mujoco",
    "pyopengl": "mujoco",
    "robosuite": "the Robotics Suite tasks (robosuite extra), repacked with the Panda's assets only",
    "termcolor": "robosuite's logging",
    "ale-py": "the Atari games (atari extra; its wheel ships the ROMs)",
}
SOURCE_ONLY = {"antlr4-python3-runtime"}  # built into a pure-Python wheel here
SLIM = {"robosuite"}
# A CPython 3.12 here, when there is one, checks the kit on the GPU machine's Python for real (smoke_python312).
PYENV_312 = Path.home() / ".pyenv" / "versions" / "3.12*" / "bin" / "python3.12"
PY312_ENV = REPO / "build" / "gpu-kit-py312"  # the stand-in for the GPU image's environment (build/ is ignored)
IMAGE_STAND_INS = [
    *("numpy", "pyyaml", "packaging", "typing-extensions", "cloudpickle", "absl-py", "etils[epath]", "imageio"),
    *("msgpack", "prometheus-client"),
]

# Requirements deliberately not carried, with why the runs do not need them.
LEFT_OUT = {
    "mink": "robosuite's whole-body IK helper: never imported by a single-arm task with the default OSC controller",
    "qpsolvers": "robosuite lists it for mink's IK only; never imported by the tasks",
    "opencv-python": "the GPU image has opencv-python-headless, the same cv2 (robosuite renders, Atari resizes)",
    "pynput": "robosuite's keyboard teleoperation device only",
}

# The GPU image's Python packages (/work/.library/device/KINDS.md, "Python packages already there", 2026-11-17).
_GPU_IMAGE_NAMES = """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
    charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
    jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
    llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
    multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
    nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
    nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
    nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
    opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec
    patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
    py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
    pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
    scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
    shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server
    tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
    torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3
    uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
"""
GPU_IMAGE = frozenset(canonicalize_name(name) for name in _GPU_IMAGE_NAMES.split())

# The GPU machine: CPython 3.12 on x86-64 Linux (glibc 2.28 or newer is all these wheels ask).
PYTHON = (3, 12)
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(28, 16, -1)] + ["manylinux2014_x86_64", "linux_x86_64"]
PIP_TARGET = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"]
PIP_TARGET += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
MARKERS: dict[str, str] = {
    **cast(dict[str, str], default_environment()),  # a TypedDict of str values
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}

# robosuite assets kept in the repacked wheel: every arena, object and texture, and the Panda (arm, gripper, mount).
ROBOSUITE_ASSETS = "robosuite/models/assets/"
ROBOSUITE_KEEP = tuple(
    ROBOSUITE_ASSETS + folder
    for folder in (
        "arenas/",
        "objects/",
        "textures/",
        "robots/panda/",
        "grippers/meshes/panda_gripper/",
        "bases/meshes/rethink_mount/",
    )
)


class KitError(Exception):
    pass


def pip(*args: str, extra: list[str]) -> None:
    command = [sys.executable, "-m", "pip", *args, *extra]
    print("+", shlex.join(command), flush=True)
    subprocess.run(command, check=True)


def pins() -> dict[str, str]:
    """Each KIT package at the version this environment runs."""
    versions = {}
    for name in KIT:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError as missing:
            raise KitError(
                f"{name} is not installed here: run make venv first (the kit takes its versions)"
            ) from missing
    return versions


def name_and_version(wheel: Path) -> tuple[str, str]:
    name, version, _, _ = parse_wheel_filename(wheel.name)
    return canonicalize_name(name), str(version)


def wheel_of(folder: Path, name: str) -> Path | None:
    found = [p for p in folder.glob("*.whl") if name_and_version(p)[0] == name]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def download(versions: dict[str, str], pip_args: list[str]) -> None:
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    binary = [f"{name}=={v}" for name, v in versions.items() if name not in SOURCE_ONLY]
    missing = [spec for spec in binary if not has_wheel(DOWNLOADS, spec)]
    if missing:
        pip("download", "-q", "--no-deps", *PIP_TARGET, "-d", str(DOWNLOADS), *missing, extra=pip_args)
    for name in SOURCE_ONLY:
        spec = f"{name}=={versions[name]}"
        if not has_wheel(DOWNLOADS, spec):
            pip("wheel", "-q", "--no-deps", "--no-binary", name, "-w", str(DOWNLOADS), spec, extra=pip_args)


def has_wheel(folder: Path, spec: str) -> bool:
    requirement = Requirement(spec)
    name = canonicalize_name(requirement.name)
    return any(n == name and v in requirement.specifier for n, v in map(name_and_version, folder.glob("*.whl")))


def slim_robosuite(full: Path, out_dir: Path) -> Path:
    """robosuite's wheel without the assets of robots other than the Panda (RECORD rewritten to match)."""
    name, version, _, _ = parse_wheel_filename(full.name)
    out = out_dir / f"{name}-{version}-0panda-py3-none-any.whl"
    with zipfile.ZipFile(full) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        records = []
        for info in src.infolist():
            path = info.filename
            if path == record_name:
                continue
            if path.startswith(ROBOSUITE_ASSETS) and not path.endswith(".xml") and not path.startswith(ROBOSUITE_KEEP):
                continue
            data = src.read(info)
            dst.writestr(info, data)
            digest = hashlib.sha256(data).digest()
            records.append(f"{path},sha256={_b64(digest)},{len(data)}")
        records.append(f"{record_name},,")
        dst.writestr(record_name, "\n".join(records) + "\n")
    return out


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def assemble(versions: dict[str, str], kit: Path) -> None:
    """The kit folder holds exactly one wheel per KIT package, nothing else."""
    kit.mkdir(parents=True, exist_ok=True)
    wanted = []
    for name, version in versions.items():
        wanted_wheel = (canonicalize_name(name), version)
        source = next((p for p in DOWNLOADS.glob("*.whl") if name_and_version(p) == wanted_wheel), None)
        if source is None:
            raise KitError(f"no {name} {version} wheel in {DOWNLOADS} after the download")
        if name in SLIM:
            target = kit / f"{source.name.split('-')[0]}-{version}-0panda-py3-none-any.whl"
            if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
                target = slim_robosuite(source, kit)
        else:
            target = kit / source.name
            if not target.exists() or target.stat().st_size != source.stat().st_size:
                shutil.copy2(source, target)
        wanted.append(target)
    for stale in set(kit.iterdir()) - set(wanted):
        print(f"removing {stale.name} (not in this kit)")
        stale.unlink() if stale.is_file() else shutil.rmtree(stale)


def supported_tags() -> set[Tag]:
    return set(cpython_tags(PYTHON, platforms=PLATFORMS)) | set(compatible_tags(PYTHON, "cp312", PLATFORMS))


def wheel_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(z.read(meta).decode())
    return [Requirement(line) for line in message.get_all("Requires-Dist") or []]


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in (*project["dependencies"], *extras["robosuite"], *extras["atari"])]


def check(kit: Path) -> list[str]:
    """What the kit lacks (an empty list: complete). Prints where each requirement is met."""
    wheels = sorted(kit.glob("*.whl"))
    problems = []
    by_name: dict[str, tuple[Path, str]] = {}
    tags = supported_tags()
    for wheel in wheels:
        wheel_name, version, _, wheel_tags = parse_wheel_filename(wheel.name)
        if wheel_name in by_name:
            problems.append(f"two versions of {wheel_name}: {by_name[wheel_name][0].name} and {wheel.name}")
        by_name[wheel_name] = (wheel, str(version))
        if not wheel_tags & tags:
            problems.append(f"{wheel.name} does not install on CPython 3.12, manylinux x86_64")
    for name in KIT:
        if canonicalize_name(name) not in by_name:
            problems.append(f"{name} is missing from the kit")
    seen: set[tuple[str, frozenset[str]]] = set()
    met: dict[str, str] = {}

    def need(requirement: Requirement, wanted_by: str) -> None:
        extras = frozenset(requirement.extras)
        if requirement.marker and not any(
            requirement.marker.evaluate({**MARKERS, "extra": extra}) for extra in ("", *extras)
        ):
            return
        name = canonicalize_name(requirement.name)
        if (name, extras) in seen:
            return
        seen.add((name, extras))
        if name in by_name:
            wheel, version = by_name[name]
            if version not in requirement.specifier:
                problems.append(f"{wanted_by} needs {requirement}, the kit has {version}")
            met.setdefault(name, f"kit {version}")
            for sub in wheel_requirements(wheel):
                if sub.marker is None or any(sub.marker.evaluate({**MARKERS, "extra": e}) for e in ("", *extras)):
                    need(Requirement(str(sub).split(";")[0]), name)
        elif name in GPU_IMAGE:
            met.setdefault(name, "GPU image")
        elif name in LEFT_OUT:
            met.setdefault(name, f"left out: {LEFT_OUT[name]}")
        else:
            problems.append(f"{wanted_by} needs {requirement}: neither in the kit nor in the GPU image")

    for requirement in project_requirements():
        need(requirement, "surreal")
    for name in sorted(met):
        print(f"  {name:28} {met[name]}")
    return problems


def scratch_install(kit: Path, target: Path) -> None:
    """Install as the GPU machine will (no index, no deps, CPython 3.12 wheels only) into a throwaway target."""
    wheels = [str(p) for p in sorted(kit.glob("*.whl"))]
    pip("install", "-q", "--no-index", "--no-deps", "--no-compile", "--target", str(target), *wheels, extra=PIP_TARGET)


def smoke_robosuite(kit: Path, scratch: Path) -> None:
    """Make Lift (Panda) with the repacked robosuite on this interpreter and step it: no asset it loads is missing."""
    wheel = wheel_of(kit, "robosuite")
    assert wheel is not None
    pip("install", "-q", "--no-index", "--no-deps", "--no-compile", "--target", str(scratch), str(wheel), extra=[])
    code = (
        "import robosuite, numpy as np\n"
        "from surreal.envs import make_vec_env\n"
        f"assert robosuite.__file__.startswith({str(scratch)!r}), robosuite.__file__\n"
        "envs = make_vec_env('robosuite:Lift', 1, 0)\n"
        "for _ in range(5): envs.step(envs.action_space.sample())\n"
        "print('robosuite Lift steps with the repacked robosuite')\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{scratch}:{REPO / 'src'}"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=600)


def find_python312(given: str | None) -> str | None:
    """A CPython 3.12 on this machine (PYTHON312, python3.12 on the PATH, or pyenv's), if one runs."""
    found = [given] if given else [shutil.which("python3.12"), *sorted(glob.glob(str(PYENV_312)))]
    for python in filter(None, found):
        try:
            probe = subprocess.run(
                [python, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"], capture_output=True
            )
        except OSError:
            continue
        if probe.returncode == 0:
            return python
    if given:
        raise KitError(f"{given} is not a CPython 3.12")
    return None


def smoke_python312(python: str, kit: Path, scratch: Path, pip_args: list[str]) -> None:
    """The GPU machine's setup on a real CPython 3.12: a virtualenv holding what the GPU image would (IMAGE_STAND_INS,
    from the index), the kit installed into a target on PYTHONPATH; then the binary wheels load and run (ZMQ over a
    socket pair, MuJoCo stepping HalfCheetah-v5 through gymnasium, omegaconf's antlr4 grammar), and the project's
    torch-free part (config, replay, ps, wire) imports and reads a config (torch is the GPU image's)."""
    venv_python = PY312_ENV / "bin" / "python"
    if not venv_python.exists():
        subprocess.run([python, "-m", "venv", str(PY312_ENV)], check=True)
    venv_pip = [str(venv_python), "-m", "pip", "install", "-q"]
    subprocess.run([*venv_pip, *IMAGE_STAND_INS, *pip_args], check=True)
    wheels = [str(p) for p in sorted(kit.glob("*.whl"))]
    subprocess.run(
        [*venv_pip, "--no-index", "--no-deps", "--no-compile", "--target", str(scratch), *wheels], check=True
    )
    code = (
        "import sys, gymnasium, hydra, mujoco, omegaconf, zmq\n"
        f"assert zmq.__file__.startswith({str(scratch)!r}) and sys.version_info[:2] == (3, 12)\n"
        "ctx = zmq.Context(); a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)\n"
        "port = a.bind_to_random_port('tcp://127.0.0.1'); b.connect(f'tcp://127.0.0.1:{port}')\n"
        "a.send(b'ping'); assert b.recv() == b'ping'\n"
        "assert omegaconf.OmegaConf.create({'a': '${b}', 'b': 2}).a == 2\n"
        "env = gymnasium.make('HalfCheetah-v5'); env.reset(seed=0)\n"
        "for _ in range(10): env.step(env.action_space.sample())\n"
        "import surreal.roles.replay, surreal.roles.ps, surreal.proto.channels\n"
        "from surreal.config import load_config\n"
        "assert load_config(['algo=ddpg', 'env=HalfCheetah-v5', 'actors=14']).topology.actors == 14\n"
        "assert 'torch' not in sys.modules\n"
        "print(f'CPython {sys.version.split()[0]}: pyzmq {zmq.__version__}, mujoco {mujoco.__version__}, '\n"
        "      f'gymnasium {gymnasium.__version__}, hydra {hydra.__version__}; surreal config, replay, ps: all run')\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{scratch}:{REPO / 'src'}"}
    subprocess.run([str(venv_python), "-c", code], check=True, env=env, timeout=600)


def tracked_bytes() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout.split(b"\0")
    return sum((REPO / f.decode()).stat().st_size for f in files if f and (REPO / f.decode()).is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kit", type=Path, default=KIT_DIR, help="the folder that travels (git-ignored)")
    parser.add_argument("--limit-mib", type=float, default=64.0, help="the kit plus the tracked tree stay under this")
    parser.add_argument("--pip-args", default="", help="extra pip options for the downloads (e.g. an index)")
    parser.add_argument("--no-download", action="store_true", help="check the kit as it is")
    parser.add_argument("--no-smoke", action="store_true", help="skip running the kit (Lift here, 3.12 if found)")
    parser.add_argument("--python312", help="a CPython 3.12 to run the kit on (default: python3.12, or pyenv's)")
    args = parser.parse_args()
    try:
        versions = pins()
        if not args.no_download:
            download(versions, shlex.split(args.pip_args))
            assemble(versions, args.kit)
        print(f"== {args.kit}: where each requirement is met (CPython 3.12, manylinux x86_64)")
        problems = check(args.kit)
        if problems:
            raise KitError("the kit is incomplete:\n  " + "\n  ".join(problems))
        with tempfile.TemporaryDirectory(prefix="gpu-kit-") as scratch:
            scratch_install(args.kit, Path(scratch) / "py312")
            print("== every wheel installs for CPython 3.12 (pip --target, --no-index, --no-deps)")
            if not args.no_smoke:
                smoke_robosuite(args.kit, Path(scratch) / "robosuite")
                python312 = find_python312(args.python312)
                if python312:
                    smoke_python312(python312, args.kit, Path(scratch) / "on312", shlex.split(args.pip_args))
                else:
                    print(
                        "== no CPython 3.12 here (PYTHON312=...): the kit was checked with pip's --python-version 3.12"
                    )
        kit_bytes = sum(p.stat().st_size for p in args.kit.rglob("*") if p.is_file())
        tree = tracked_bytes()
        total, limit = kit_bytes + tree, int(args.limit_mib * MIB)
        print(f"== size: kit {kit_bytes / MIB:.1f} MiB + tracked tree {tree / MIB:.1f} MiB = {total / MIB:.1f} MiB")
        for wheel in sorted(args.kit.glob("*.whl"), key=lambda p: -p.stat().st_size):
            print(f"  {wheel.stat().st_size / MIB:7.2f} MiB  {wheel.name}")
        if total >= limit:
            raise KitError(f"kit + tree {total / MIB:.1f} MiB is over the device's {args.limit_mib:g} MiB limit")
        print(f"OK: {args.kit} is complete, {(limit - total) / MIB:.1f} MiB under the limit")
    except (KitError, subprocess.CalledProcessError) as failed:
        print(f"error: {failed}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
