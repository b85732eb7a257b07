"""Every relative link and image in README.md and docs/ resolves: to an existing file, and a `#anchor` to a heading.

Anchors follow GitHub's slug rules: the heading's text (inline markup removed) lower-cased, every character that is
not a letter, digit, space, hyphen or underscore dropped, spaces turned into hyphens, and a repeated slug numbered
`-1`, `-2` ... in order. Links inside code (fenced blocks and inline backticks) are not links.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s>]+(?:\([^()\s]*\))?)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
HTML = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"([^\"]+)\"", re.I)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto: ...


def prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks (a fence closes only with the same character)."""
    lines, fence = [], ""
    for line in text.splitlines():
        marker = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if marker:
            if not fence:
                fence = marker.group(1)
            elif marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = ""
            continue
        if not fence:
            lines.append(line)
    return lines


def _without_code_spans(line: str) -> str:
    return re.sub(r"(`+)(.+?)\1", "", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text, before numbering repeats."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_, not snake_case
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(page: Path) -> list[str]:
    found = []
    lines = prose(page.read_text(encoding="utf-8"))
    for line in lines:
        bare = _without_code_spans(line)
        found += LINK.findall(bare) + HTML.findall(bare)
    found += REFERENCE.findall("\n".join(lines))
    return found


def broken(page: Path) -> list[str]:
    """Every relative link of the page that does not resolve, with why."""
    out = []
    for target in links(page):
        if EXTERNAL.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = page if not path_part else (page.parent / path_part).resolve()
        if not dest.exists():
            out.append(f"{target}: no such file")
            continue
        if dest.is_dir():
            if anchor:
                out.append(f"{target}: an anchor into a folder")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            where = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else dest.name
            out.append(f"{target}: no heading '#{anchor}' in {where}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == [], broken(page)


def test_the_pages_link_to_each_other() -> None:
    """The README reaches the docs index, and the index lists every page under docs/."""
    assert "docs/index.md" in links(ROOT / "README.md")
    index = ROOT / "docs" / "index.md"
    listed = {(index.parent / target.partition("#")[0]).resolve() for target in links(index)}
    listed |= {p / "index.md" for p in listed if p.is_dir()}
    missing = [p.relative_to(ROOT).as_posix() for p in PAGES[1:] if p != index and p not in listed]
    assert missing == [], f"docs/index.md does not link to {missing}"


@pytest.mark.parametrize(("heading", "expected"), [
    ("`ropectl eval-passkey`: can the extended model still find something in its context?",
     "ropectl-eval-passkey-can-the-extended-model-still-find-something-in-its-context"),
    ("What `eval-ppl --resume` checks", "what-eval-ppl---resume-checks"),
    ("eval-ppl (`bench/bench_ppl.py`)", "eval-ppl-benchbench_pplpy"),
    ("GPU: NVIDIA H100 80GB HBM3", "gpu-nvidia-h100-80gb-hbm3"),
    ("bf16 changes no conclusion (`bench/bench_bf16_ppl.py`)", "bf16-changes-no-conclusion-benchbench_bf16_pplpy"),
    ("Two commands do all the set-up", "two-commands-do-all-the-set-up"),
    ("See [the docs](docs/index.md) & more", "see-the-docs--more"),
])
def test_slug_follows_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    """Negative control: a missing file, a missing anchor and a missing image are each reported."""
    (tmp_path / "other.md").write_text("# Title\n\n## A section\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-section-1) [bad](other.md#nope) [gone](missing.md) ![img](nope.png)\n"
                    "```\n[in code](not-checked.md)\n```\n`[span](not-checked.md)`\n[self](#here)\n\n# Here\n")
    assert sorted(broken(page)) == sorted([
        "other.md#nope: no heading '#nope' in other.md", "missing.md: no such file", "nope.png: no such file"])
