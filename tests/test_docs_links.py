"""The Markdown guides hold together: every relative link in README.md and docs/**/*.md names a
file that exists and, with `#anchor`, a heading of that file (GitHub's heading slugs); the
README stays a short entry point (at most 300 lines, no table cell over 300 characters).
Absolute http(s) and mailto links are not checked."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
README_MAX_CELL = 300

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# inline code may wrap onto the next line of its paragraph, never across a blank line
_INLINE_CODE_WRAPPED = re.compile(r"(`+)(?:(?!\1)[^\n]|\n(?![ \t]*\n))+?\1")
# [text](target) and ![alt](target); the target ends at whitespace or ")"; an optional title
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def _prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the text of its inline markup, lowercased, punctuation
    other than '-' and '_' dropped, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links -> their text
    text = text.lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 ... for repeated ones."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _prose(text: str) -> str:
    """`text` with fenced code blocks and inline code blanked out (line breaks kept, so offsets
    still give line numbers); link text may then span lines, as in a wrapped paragraph."""
    lines = text.splitlines()
    kept = dict(_prose_lines(text))
    prose = "\n".join(kept.get(n, "") for n in range(1, len(lines) + 1))
    return _INLINE_CODE_WRAPPED.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link outside code blocks and inline code."""
    prose = _prose(path.read_text(encoding="utf-8"))
    return [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in _LINK.finditer(prose)]


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(path: Path) -> list[str]:
    """Why each relative link of `path` does not resolve ("file:line: target: reason")."""
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):   # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{_shown(path)}:{number}"
        if not dest.exists():
            problems.append(f"{where}: {target}: no such file {dest}")
        elif anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            problems.append(f"{where}: {target}: no heading with anchor #{anchor} in {dest.name}")
    return problems


def table_cells(text: str):
    """(line number, cell) of every cell of every Markdown table outside code blocks."""
    for number, line in _prose_lines(text):
        stripped = _INLINE_CODE.sub(lambda m: m.group(0).replace("|", "/"), line.strip())
        if stripped.startswith("|") and stripped.endswith("|"):
            for cell in re.split(r"(?<!\\)\|", stripped[1:-1]):
                yield number, cell.strip()


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert not broken_links(path), "\n".join(broken_links(path))


def test_the_guides_are_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for _, t in links(ROOT / "README.md")}
    unlinked = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked]
    assert not unlinked, f"guides the README does not link to: {unlinked}"


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, \
        f"README.md has {len(lines)} lines; move detail into docs/ (at most {README_MAX_LINES})"


def test_readme_table_cells_are_short():
    long = [f"line {n}: {len(c)} characters" for n, c in
            table_cells((ROOT / "README.md").read_text(encoding="utf-8"))
            if len(c) > README_MAX_CELL]
    assert not long, f"README table cells over {README_MAX_CELL} characters: {long}"


@pytest.mark.parametrize("heading, expected", [
    ("Migrating from round 2", "migrating-from-round-2"),
    ("Autotuning (`backend=\"auto\"`)", "autotuning-backendauto"),
    ("What is verified without a GPU — and what is not",
     "what-is-verified-without-a-gpu--and-what-is-not"),
    ("chute convert imagefolder and csv", "chute-convert-imagefolder-and-csv"),
    ("Order, partition and resume", "order-partition-and-resume"),
    ("snake_case and kebab-case", "snake_case-and-kebab-case"),
])
def test_slug_follows_github(heading, expected):
    assert slug(heading) == expected


@pytest.mark.parametrize("body, broken", [
    ("[ok](other.md) and [ok](other.md#a-heading) and [self](#top-title)", False),
    ("[web](https://example.com/missing.md) and `[code](missing.md)`", False),
    ("```\n[fenced](missing.md)\n```", False),
    ("[gone](missing.md)", True),
    ("[text wrapped over\ntwo lines](other.md#no-such-heading)", True),
    ("[text wrapped over\ntwo lines](other.md#a-heading)", False),
    ("[bad anchor](other.md#no-such-heading)", True),
    ("[bad self anchor](#nowhere)", True),
    ("![picture](img/missing.png)", True),
])
def test_a_broken_link_is_reported(tmp_path, body, broken):
    (tmp_path / "other.md").write_text("# Other\n\n## A heading\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(f"# Top title\n\n{body}\n", encoding="utf-8")
    assert bool(broken_links(page)) is broken, broken_links(page)


def test_long_table_cells_are_found():
    text = "| a | b |\n|---|---|\n| short | " + "x" * (README_MAX_CELL + 1) + " |\n"
    assert max(len(c) for _, c in table_cells(text)) > README_MAX_CELL
