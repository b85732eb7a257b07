"""The contributing map (docs/contributing/development.md, "Code layout") names every module under ropectl/, and
nothing that is gone: a new module arrives with its line there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "contributing" / "development.md"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:\.py|/)"
# An entry: names (comma-separated, a trailing comma continues on the next line) at an even indentation of at most
# MAX_INDENT, then the end of the line or two spaces and its description. Deeper lines continue a description.
_ENTRY = re.compile(rf"^(?P<indent> *)(?P<names>{_NAME}(?:, ?{_NAME})*,?)(?:\s{{2,}}\S.*)?$")
MAX_INDENT = 12


def map_block(text: str) -> list[str]:
    """The lines of the first code block after the "## Code layout" heading."""
    after = text.split("## Code layout", 1)[1]
    return after.split("```", 2)[1].strip("\n").splitlines()


def named_paths(lines: list[str]) -> set[str]:
    """Every path the tree names, relative to ropectl/: ``eval/``, ``eval/tasks/sweep.py`` ..."""
    if not lines or lines[0].strip() != "ropectl/":
        raise ValueError("the map must start with 'ropectl/'")
    folders = [""]  # folders[level]: the folder entries at that indentation level go into
    out: set[str] = set()
    for line in lines[1:]:
        match = _ENTRY.match(line)
        indent = len(line) - len(line.lstrip(" "))
        if not match or indent % 2 or indent > MAX_INDENT:
            continue  # a description's continuation
        level = indent // 2
        if level < 1 or level > len(folders):
            raise ValueError(f"'{line.strip()}' is indented below no folder")
        del folders[level:]
        for name in (n.strip() for n in match["names"].split(",") if n.strip()):
            out.add(folders[-1] + name)
            if name.endswith("/"):
                folders.append(folders[-1] + name)
    return out


def package_paths(package: Path) -> set[str]:
    """Every module and subpackage of ``package`` as the map names it (a package's __init__.py is its folder)."""
    out = set()
    for path in package.rglob("*.py"):
        rel = path.relative_to(package)
        parents = {"/".join(rel.parts[:i]) + "/" for i in range(1, len(rel.parts))}
        out |= parents if path.name == "__init__.py" else parents | {rel.as_posix()}
    return out


def differences(named: set[str], actual: set[str]) -> list[str]:
    return ([f"ropectl/{p} is not named in {MAP.relative_to(ROOT)}" for p in sorted(actual - named)]
            + [f"{MAP.relative_to(ROOT)} names ropectl/{p}, which does not exist" for p in sorted(named - actual)])


def test_the_map_names_every_module() -> None:
    named = named_paths(map_block(MAP.read_text(encoding="utf-8")))
    assert differences(named, package_paths(ROOT / "ropectl")) == []


SAMPLE = """## Code layout

```
ropectl/
  errors.py       what fails
  eval/           evaluation, with a description that
                  runs on over two lines
    sweep.py        the driver
    tasks/          tasks
      a.py, b.py    two at once
  cli/            the app
```
"""


def test_the_parser_reads_folders_groups_and_continuations() -> None:
    assert named_paths(map_block(SAMPLE)) == {"errors.py", "eval/", "eval/sweep.py", "eval/tasks/", "eval/tasks/a.py",
                                              "eval/tasks/b.py", "cli/"}


@pytest.mark.parametrize(("files", "expected"), [
    # a module the map does not name: the negative control
    (["errors.py", "eval/__init__.py", "eval/sweep.py", "eval/tasks/a.py", "eval/tasks/b.py", "eval/tasks/c.py",
      "cli/__init__.py"], "ropectl/eval/tasks/c.py is not named in docs/contributing/development.md"),
    # a name the map keeps after its module is gone
    (["errors.py", "eval/__init__.py", "eval/tasks/a.py", "eval/tasks/b.py", "cli/__init__.py"],
     "docs/contributing/development.md names ropectl/eval/sweep.py, which does not exist"),
])
def test_a_missing_or_stale_module_is_reported(tmp_path: Path, files: list[str], expected: str) -> None:
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert expected in differences(named_paths(map_block(SAMPLE)), package_paths(tmp_path))


def test_a_complete_map_passes() -> None:
    """Control: the sample's own package."""
    actual = {"errors.py", "eval/", "eval/sweep.py", "eval/tasks/", "eval/tasks/a.py", "eval/tasks/b.py", "cli/"}
    assert differences(named_paths(map_block(SAMPLE)), actual) == []
