"""The documentation lives in the repository: what the code cites exists, nothing cites outside."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
#: Where code, tests and prose live (folders are read recursively).
SOURCES = ("smoothclient", "tests", "benchmarks", "examples", "docs")
TOP_FILES = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")
#: Documents kept outside the repository, which nothing in it may cite (spelled out at run
#: time, so that this file does not mention them itself).
OUTSIDE = (
    *(f"{name.upper()}.md" for name in ("seeds", "headers", "design", "style")),
    "../" + "shared",
)
#: A docs page cited by path, as ``docs/headers.md``.
CITED_PAGE = re.compile(r"docs/([A-Za-z0-9_-]+\.md)")
#: A reading rule cited by label, as ``docs/headers.md R3``.
CITED_RULE = re.compile(r"docs/headers\.md,? R([0-9]{1,2})")
#: A numbered section cited, as ``docs/window-math.md section 3`` or ``sections 2-4``.
CITED_SECTION = re.compile(r"docs/([A-Za-z0-9_-]+\.md),? sections? ([0-9]+)(?:-([0-9]+))?")


def _text_files() -> list[Path]:
    files = [ROOT / name for name in TOP_FILES]
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*")):
            # (not what a tool installed there: a benchmark's npm packages cite their own docs)
            if path.is_file() and not {"__pycache__", "node_modules"} & set(path.parts):
                files.append(path)
    return files


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def _citing_files() -> list[tuple[Path, str]]:
    """Every text file of the repository that may cite a docs page, with its text."""
    found = []
    for path in _text_files():
        text = _read(path)
        if text is not None:
            found.append((path, text))
    return found


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_nothing_cites_documents_outside_the_repository() -> None:
    """No file of the package, tests, benchmarks, examples, docs or top-level prose cites them."""
    offenders = [
        f"{_rel(path)}:{number}: {line.strip()}"
        for path, text in _citing_files()
        for number, line in enumerate(text.splitlines(), 1)
        if any(name in line for name in OUTSIDE)
    ]
    assert offenders == []


def test_every_docs_page_cited_by_the_package_exists() -> None:
    """Each ``docs/<name>.md`` named in smoothclient/ (and elsewhere) is a file in docs/."""
    cited = {
        (name, _rel(path)) for path, text in _citing_files() for name in CITED_PAGE.findall(text)
    }
    assert any(source.startswith("smoothclient/") for _, source in cited)
    missing = sorted(
        f"docs/{name} (cited in {source})" for name, source in cited if not (DOCS / name).is_file()
    )
    assert missing == []


def test_every_rule_and_section_cited_exists() -> None:
    """A cited rule (``docs/headers.md R3``) or section number is a heading of that page."""
    rules = set(re.findall(r"^### R([0-9]{1,2})\. ", (DOCS / "headers.md").read_text(), re.M))
    assert rules == {str(n) for n in range(1, 17)}
    missing = []
    for path, text in _citing_files():
        missing += [
            f"docs/headers.md R{n} (in {_rel(path)})"
            for n in CITED_RULE.findall(text)
            if n not in rules
        ]
        for page, first, last in CITED_SECTION.findall(text):
            target = DOCS / page
            headings = (
                set(re.findall(r"^## ([0-9]+)\. ", target.read_text(), re.M))
                if target.is_file()
                else set()
            )
            for n in range(int(first), int(last or first) + 1):
                if str(n) not in headings:
                    missing.append(f"docs/{page} section {n} (in {_rel(path)})")
    assert missing == []


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    seen: Counter[str] = Counter()
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = _slug(heading)
        anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return anchors


PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_links_between_pages_resolve(page: Path) -> None:
    """Every relative link of the README, CONTRIBUTING.md and docs/ reaches a file and heading."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        file_part, _, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in _anchors(linked)
        ):
            broken.append(target)
    assert broken == []


def test_readme_is_the_front_door() -> None:
    """The README stays short, and its first two commands are ``make demo`` and ``make test``."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert first_block is not None
    commands = [line.split("#", 1)[0].strip() for line in first_block.group(1).splitlines()]
    assert commands[:2] == ["make demo", "make test"]
    assert "docs/README.md" in readme
