"""The code and the user-facing docs say what is, not what happened.

History (which issue asked for what, which pass measured what) belongs in ``docs/decisions/``;
module docstrings and the pages a user or an operator reads describe today's behaviour. This scan
keeps issue numbers out of both, ``docs/benchmarks.md`` short enough to read in ten minutes, and
every module of the four packages and of ``benchmarks/`` at most 400 lines, so each says one
thing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("server", "rehearsal", "clients", "twin", "benchmarks")
# "issue 14", "Issue #3", "issues 12 and 13": a reference to the tracker, not the word "issue".
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
BENCHMARKS_PAGE_LINES = 400
MODULE_LINES = 400


def _code_files() -> list[Path]:
    return sorted(p for folder in CODE_FOLDERS for p in (ROOT / folder).rglob("*.py"))


def _doc_pages() -> list[Path]:
    # Decision records keep their history on purpose; every other page describes today.
    return sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def _hits(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for n, line in enumerate(lines, 1)
        if ISSUE_NUMBER.search(line)
    ]


def test_the_scan_sees_the_tree() -> None:
    assert len(_code_files()) > 100
    assert len(_doc_pages()) > 10


@pytest.mark.parametrize("kind", ["code", "docs"])
def test_no_issue_numbers(kind: str) -> None:
    files = _code_files() if kind == "code" else _doc_pages()
    hits = [hit for path in files for hit in _hits(path)]
    assert hits == [], "history belongs in docs/decisions/:\n" + "\n".join(hits)


def test_the_pattern_catches_what_it_means_to() -> None:
    for text in ("Issue 16 asks", "see issue #3", "issues 12 and 13"):
        assert ISSUE_NUMBER.search(text), text
    for text in ("an issue with 3 engines", "issue_id", "tissue 4"):
        assert not ISSUE_NUMBER.search(text), text


def test_the_benchmarks_page_is_short() -> None:
    lines = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").count("\n")
    assert lines < BENCHMARKS_PAGE_LINES, f"docs/benchmarks.md has {lines} lines"


def test_modules_are_at_most_400_lines() -> None:
    modules = sorted(p for folder in CODE_FOLDERS for p in (ROOT / folder).rglob("*.py"))
    long = [
        f"{path.relative_to(ROOT)}: {lines}"
        for path in modules
        if (lines := path.read_text(encoding="utf-8").count("\n")) > MODULE_LINES
    ]
    assert len(modules) > 100
    assert long == [], "split these by concept:\n" + "\n".join(long)
