"""The README and the documentation hold only claims the repository backs: every results file, figure and test they
cite exists (and every results file and figure is cited somewhere), every link into the docs lands on a page and a
heading that exist, and the README stays a front door: short, the newcomer's path first, headline results that
link to their pages."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
RESULTS = REPO / "bench" / "results"
TEXTS = {path.relative_to(REPO).as_posix(): path.read_text() for path in [README, *PAGES]}
ALL_TEXT = "\n".join(TEXTS.values())


def expand_braces(path: str) -> list[str]:
    """`a.{x,y}.json` -> [`a.x.json`, `a.y.json`] (how the docs name a pair of files)."""
    parts = re.split(r"\{([^}]*)\}", path)
    choices = [[part] if i % 2 == 0 else part.split(",") for i, part in enumerate(parts)]
    return ["".join(combo) for combo in itertools.product(*choices)]


def cited_results() -> set[str]:
    names = set()
    for match in re.finditer(r"bench/results/([\w.{},-]+\.(?:json|png))", ALL_TEXT):
        names.update(expand_braces(match.group(1)))
    return names


def test_every_results_file_cited_exists_and_every_results_file_is_cited() -> None:
    cited = cited_results()
    missing = sorted(name for name in cited if not (RESULTS / name).exists())
    assert not missing, f"cited but not in bench/results/: {missing}"
    on_disk = {path.name for path in RESULTS.iterdir() if path.suffix in (".json", ".png")}
    uncited = sorted(on_disk - cited)
    assert not uncited, f"results no page cites (move their claims into the docs or remove them): {uncited}"


def test_every_figure_is_shown_and_every_figure_shown_exists() -> None:
    shown = set(re.findall(r"\]\((?:\.\./)?img/([\w.-]+\.png)\)", "\n".join(p.read_text() for p in PAGES)))
    on_disk = {path.name for path in (DOCS / "img").glob("*.png")}
    assert shown <= on_disk, f"pages show missing figures: {sorted(shown - on_disk)}"
    assert on_disk <= shown, f"figures no page shows: {sorted(on_disk - shown)}"


def test_every_test_cited_exists() -> None:
    for module, name in set(re.findall(r"tests/(test_\w+\.py)::(\w+)", ALL_TEXT)):
        source = (REPO / "tests" / module).read_text()
        assert re.search(rf"^def {name}\(", source, re.M), f"tests/{module}::{name} does not exist"
    for module in set(re.findall(r"tests/(test_\w+\.py)", ALL_TEXT)):
        assert (REPO / "tests" / module).exists(), f"tests/{module} does not exist"


def headings(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)  # no comments in code blocks
    return {slugify(re.sub(r"[`*]", "", h).strip(), "-") for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_link_from_the_readme_lands_on_a_file_and_heading_that_exist() -> None:
    targets = [t for t in links(README.read_text()) if not re.match(r"[a-z]+://", t)]
    assert targets
    for target in targets:
        path, _, anchor = target.partition("#")
        assert (REPO / path).exists(), f"README links to {path}, which does not exist"
        if anchor:
            assert anchor in headings(REPO / path), f"README links to {target}: no such heading"


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 250 and len(text.encode()) <= 20_000, (len(lines), len(text.encode()))
    sections = re.findall(r"^## (.+)$", text, re.M)
    order = ["Install", "Quickstart", "Algorithms", "Environments", "Scaling out", "Results", "Citation", "License"]
    assert [s for s in sections if s in order] == order, sections
    first_100 = "\n".join(lines[:100])
    for step in ("pip install '.[", "surreal run env=", "tensorboard --logdir", "surreal eval", "helm install"):
        assert step in first_100, f"the newcomer's path misses {step!r} in the README's first 100 lines"
    intro = text.split("## Install", 1)[0]
    for reason in ("preemption-safe fleet", "Bit-exact resume", "laptop to a cluster"):
        assert reason in intro, reason
    for action_space in ("Box", "Discrete"):
        assert action_space in text.split("## Algorithms", 1)[1].split("\n## ", 1)[0]
    assert "module:" in text.split("## Environments", 1)[1].split("\n## ", 1)[0] or "my_envs:" in text


def test_headline_results_are_at_most_eight_rows_each_linking_its_page() -> None:
    section = README.read_text().split("## Results", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| what |")]
    assert 1 <= len(rows) <= 8
    for row in rows:
        (target,) = re.findall(r"\]\((docs/[^)]+)\)", row)
        path, _, anchor = target.partition("#")
        assert anchor in headings(REPO / path), f"{target}: no such heading"


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_no_page_cites_a_file_the_repository_lacks(name: str) -> None:
    """DESIGN.md lives outside the repository; a page that cites it sends a reader nowhere."""
    assert "DESIGN.md" not in TEXTS[name]


def test_every_docs_link_to_another_page_lands_on_a_heading() -> None:
    """mkdocs --strict checks these too (make docs); this names the page and the anchor without a build."""
    for page in PAGES:
        for target in links(page.read_text()):
            if re.match(r"[a-z]+://", target) or target.startswith("img/"):
                continue
            path, _, anchor = target.partition("#")
            destination = DOCS / path if path else page
            assert destination.exists(), f"{page.name} links to {target}"
            if anchor:
                assert anchor in headings(destination), f"{page.name} links to {target}: no such heading"
