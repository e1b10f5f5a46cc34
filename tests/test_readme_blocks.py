"""Every line of the README and of docs/getting-started.md works for a newcomer.

The slow test runs every shell and Python code block of both pages verbatim, in order, in one fresh venv made from a
copy of the checkout as the pages say (their install blocks make it), with two allowed changes: `steps=` where the
page says the run takes more than 2 minutes, and a temporary runs root (the copy's own folder). The blocks it cannot
run here are listed in UNRUNNABLE, each with why. The fast tests keep every block parsing and naming only commands,
flags, make targets, extras and config keys that exist, and hold the pages' prose to what their commands do: the
roles a run starts, the extras its commands need, and which install lines wait for the first release.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import surreal
from conftest import REPO
from surreal.cli import build_parser
from surreal.config import load_config
from surreal.config.loading import preset_names
from surreal.config.schema import ALGORITHMS

PAGES = ("README.md", "docs/getting-started.md")
# Blocks this test cannot run here: (page, the block's first line) -> why.
UNRUNNABLE = {
    ("README.md", "pip install 'surreal-rl[export,video]'     # after the first release"): (
        "nothing is published before the first release (.github/workflows/release.yml publishes surreal-rl)"
    ),
    ("docs/getting-started.md", "pip install 'surreal-rl[export,video]'     # after the first release"): (
        "nothing is published before the first release (.github/workflows/release.yml publishes surreal-rl)"
    ),
    ("README.md", "make test    # the whole suite, docs and packaging checks included: what CI runs"): (
        "the whole suite, this test included: it would run itself (CI runs `make test` as .ci/run)"
    ),
    ("README.md", "helm install exp1 infra/helm/surreal-chart -f infra/helm/values/ppo.yaml \\"): (
        "a Kubernetes cluster and a registry holding the images (tests/test_chart_wiring.py runs the chart's pods as "
        "processes; make local-kind-test installs it on kind)"
    ),
}
# Blocks that say their run takes more than 2 minutes: (page, first line) -> the steps= this test gives the run.
SHORTENED = {
    (
        "README.md",
        "make run     # PPO on HalfCheetah-v5 with 2 local actors: 1M env steps, about 3 minutes on 2 cores",
    ): 20_000,
    (
        "docs/getting-started.md",
        "surreal run env=HalfCheetah-v5 actors=2 topology.envs_per_actor=4 learner.compile=true",
    ): 20_000,
}


@dataclass(frozen=True)
class Block:
    page: str
    language: str  # bash | python
    text: str
    before: str  # the prose paragraph just above it

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0]

    @property
    def key(self) -> tuple[str, str]:
        return self.page, self.first_line


def blocks(page: str) -> list[Block]:
    text = (REPO / page).read_text()
    out = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S):
        language = match.group(1)
        if language in ("bash", "python"):
            above = text[: match.start()].rstrip("\n").split("\n\n")[-1]
            out.append(Block(page, language, match.group(2), above))
    return out


ALL = [b for page in PAGES for b in blocks(page)]


def commands(block: Block) -> Iterator[list[str]]:
    """Each shell command of a block as words (continuation lines joined, comments dropped, `&&` splitting)."""
    joined = block.text.replace("\\\n", " ")
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = next((i for i, w in enumerate(words) if w in ("&&", "||", ";", "|")), len(words))
            yield words[:cut]
            words = words[cut + 1 :]


def test_the_pages_have_runnable_blocks_and_every_exception_is_a_block_with_a_reason() -> None:
    keys = {b.key for b in ALL}
    assert set(UNRUNNABLE) <= keys, f"UNRUNNABLE names blocks the pages no longer have: {set(UNRUNNABLE) - keys}"
    assert set(SHORTENED) <= keys, f"SHORTENED names blocks the pages no longer have: {set(SHORTENED) - keys}"
    assert all(len(why) > 20 for why in UNRUNNABLE.values())
    for key in SHORTENED:
        block = next(b for b in ALL if b.key == key)
        assert re.search(r"about [3-9] minutes|\d{2,} minutes", block.text + block.before), f"{key}: says > 2 min?"
    runnable = [b for b in ALL if b.key not in UNRUNNABLE]
    assert {b.page for b in runnable} == set(PAGES) and any(b.language == "python" for b in runnable)


@pytest.mark.parametrize("block", ALL, ids=lambda b: f"{b.page}:{b.first_line[:40]}")
def test_every_block_parses(block: Block) -> None:
    if block.language == "python":
        ast.parse(block.text)
    else:
        done = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))


def extras() -> set[str]:
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def check_surreal_command(argv: list[str]) -> None:
    """The subcommand and its flags parse as `surreal` parses them, and its overrides compose."""
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"surreal {' '.join(argv)}: the CLI refuses it") from exc
    assert not [r for r in rest if r.startswith("-")], f"surreal {' '.join(argv)}: unknown flags {rest}"
    overrides = [*getattr(args, "overrides", []), *[r for r in rest if "=" in r]]
    if args.command == "config":
        overrides = [a for a in args.args if "=" in a]
    if args.command in ("run", "config") and not getattr(args, "resume", None):
        if getattr(args, "multirun", False):
            from surreal.commands.sweep import expand

            members, _ = expand(overrides)
        else:
            members = [overrides]
        for member in members:
            load_config(member)  # ConfigError: a key or value that does not exist


@pytest.mark.parametrize(
    "block", [b for b in ALL if b.language == "bash"], ids=lambda b: f"{b.page}:{b.first_line[:40]}"
)
def test_every_shell_block_names_commands_flags_targets_extras_and_keys_that_exist(block: Block) -> None:
    for words in commands(block):
        if words[:1] == ["surreal"]:
            check_surreal_command(words[1:])
        elif words[:1] == ["make"]:
            targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
            assert set(targets) <= makefile_targets(), targets
        elif words[:2] == ["pip", "install"]:
            for spec in words[2:]:
                found = re.fullmatch(r"(?:\.|surreal-rl)\[([\w,-]+)\]", spec)
                if found:
                    assert set(found.group(1).split(",")) <= extras(), spec


@pytest.mark.parametrize("block", [b for b in ALL if b.language == "python"], ids=lambda b: b.page)
def test_every_python_block_calls_only_what_the_package_has(block: Block) -> None:
    for node in ast.walk(ast.parse(block.text)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == "surreal":
                function = getattr(surreal, node.func.attr)
                parameters = inspect.signature(function).parameters
                assert {k.arg for k in node.keywords} <= set(parameters), (node.func.attr, parameters)


def test_no_page_names_an_algorithm_or_a_preset_that_does_not_exist() -> None:
    """docs/api.md once showed `preset=td3`; TD3 is algo=ddpg with its switches."""
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = re.sub(r"## Config errors\n.*?(?=\n## )", "", path.read_text(), flags=re.S)  # cli.md shows refusals
        for name in re.findall(r"\bpreset=([a-z][\w-]*)", text):
            assert name in preset_names(), f"{path.name}: preset={name}"
        for name in re.findall(r"\balgo=([a-z]\w*)", text):
            assert name in ALGORITHMS, f"{path.name}: algo={name}"


def roles_said(sentence: str) -> int:
    found = re.search(r"(an|\d+|two|three) actors?\b", sentence)
    assert found, sentence
    return {"an": 1, "two": 2, "three": 3}.get(found.group(1)) or int(found.group(1))


@pytest.mark.parametrize(("page", "lead"), [("README.md", r"Train\s+\("), ("docs/getting-started.md", r"This starts")])
def test_the_first_run_says_how_many_actors_it_starts(page: str, lead: str) -> None:
    """The Quickstart said "an actor" while 2 started: the count in the prose is the composed config's."""
    (run,) = [b for b in blocks(page) if b.first_line.startswith("surreal run env=Pendulum-v1")]
    text = (REPO / page).read_text()
    near = text.index(run.text)
    found = re.compile(lead).search(text, max(0, near - 1500))
    assert found is not None and found.start() < near + 1500, f"{page}: no sentence says which roles start"
    sentence = text[found.start() :].split(")", 1)[0]
    cfg = load_config(next(commands(run))[2:])
    assert roles_said(sentence) == cfg.topology.actors, (sentence, cfg.topology.actors)


@pytest.mark.parametrize("page", PAGES)
def test_each_pages_install_brings_the_extras_its_commands_need(page: str) -> None:
    """getting-started's install once omitted the extras its own eval section needs."""
    page_blocks = blocks(page)
    installed: set[str] = set()
    for block in page_blocks:
        if block.key in UNRUNNABLE:
            continue
        for words in commands(block):
            if words[:2] == ["pip", "install"]:
                for spec in words[2:]:
                    found = re.fullmatch(r"\.\[([\w,-]+)\]", spec)
                    installed |= set(found.group(1).split(",")) if found else set()
    text = "\n".join(b.text for b in page_blocks)
    needed = {"video": "--video" in text, "export": "surreal export" in text, "robosuite": "robosuite:" in text}
    assert {extra for extra, used in needed.items() if used} <= installed, installed


def test_published_installs_are_labelled_as_waiting_for_the_first_release() -> None:
    """Nothing is on PyPI or GHCR before release.yml's first run: every `pip install surreal-rl...` and every `oci://`
    chart in the README and the docs sits in a passage that says so, and the README's first install is a checkout's."""
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text()
        for match in re.finditer(r"pip install '?surreal-rl|oci://", text):
            passage = text[max(0, match.start() - 600) : match.end() + 200]
            assert "first release" in passage or "release.yml" in passage, f"{path.name}: {text[match.start() :][:80]}"
    readme = (REPO / "README.md").read_text()
    first_install = re.search(r"^pip install (\S+)", readme.split("## Install", 1)[1], re.M)
    assert first_install and first_install.group(1) == "torch==2.13.0"
    packages = re.findall(r"^pip install ('[^']+'|\S+)", readme.split("## Install", 1)[1], re.M)
    assert packages[1].startswith("'.["), f"the first install of the package is not a checkout's: {packages}"


# -- the slow test: the pages' blocks, run -----------------------------------------------------------------------


def script_for(page: str) -> str:
    """A page's runnable blocks as one bash script, in order: a venv activated by one block stays active for the
    next, as in the reader's shell. Python blocks run with the venv's python."""
    makefile_args = re.search(r"^ARGS \?= (.*)$", (REPO / "Makefile").read_text(), re.M).group(1)  # type: ignore[union-attr]
    parts = ["set -euo pipefail"]
    for i, block in enumerate(blocks(page)):
        parts.append(f"echo '=== {page} block {i}: {block.first_line[:60]}'")
        if block.key in UNRUNNABLE:
            parts.append("echo '(not run here)'")
            continue
        text = block.text
        steps = SHORTENED.get(block.key)
        if steps is not None and block.first_line.startswith("make run"):
            text = text.replace("make run", f'make run ARGS="{makefile_args} steps={steps}"', 1)
        elif steps is not None:
            text = re.sub(r"^(surreal run .*)$", rf"\1 steps={steps}", text, count=1, flags=re.M)
        if block.language == "python":
            parts.append(f"python - <<'PYTHON_BLOCK'\n{text}PYTHON_BLOCK")
        else:
            parts.append(text)
    return "\n".join(parts) + "\n"


def checkout_copy(dest: Path) -> None:
    """The checkout's files as git sees them (tracked, and new files it does not ignore): no venv, no runs."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file() and not source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


@pytest.mark.slow
def test_every_block_of_the_readme_and_getting_started_runs_in_one_fresh_venv(tmp_path: Path) -> None:
    work = tmp_path / "checkout"
    checkout_copy(work)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SURREAL_RUNS_ROOT")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["PIP_RETRIES"] = "0"  # no network here: the torch line's index fails fast, pip's find-links serve torch
    for page in PAGES:
        done = subprocess.run(
            ["bash", "-c", script_for(page)], cwd=work, env=env, capture_output=True, text=True, timeout=3600
        )
        assert done.returncode == 0, f"{page}:\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    assert (work / "runs" / "first" / "policy" / "policy.onnx").exists()
    assert (work / "runs" / "pendulum" / "learning_curve.png").exists()
