"""The layers of the package: rope <- families/schema <- readers <- patch/layout/evaluation <- cli.

Every import of a ropectl module counts, at module level, inside functions (lazy) and under TYPE_CHECKING alike:
a lower layer never imports a higher one, and no two parts of the package import each other, even indirectly.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ropectl"
# Each top-level module or subpackage of ropectl, by layer (lower numbers are imported by higher ones).
LAYERS: dict[str, int] = {
    "errors": 0, "limits": 0, "output": 0, "__version__": 0,
    "rope": 1, "presets": 1,
    "families": 2, "schema": 2, "io": 2,
    "readers": 3,
    "patch": 4, "layout": 4, "eval": 4, "inspection": 4,
    "recommend": 5, "finetune": 5, "search": 5, "report": 5,  # the next commands' homes (docs/contributing/index.md)
    "cli": 6, "__main__": 7,
}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<package>"


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """{part: parts it imports}, every import statement included."""
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root.parent).with_suffix("")
        here = _part(".".join(rel.parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" if node.module == "ropectl" else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("ropectl.") and _part(name) != here:
                    graph.setdefault(here, set()).add(_part(name))
    return graph


def violations(graph: Mapping[str, set[str]], layers: Mapping[str, int]) -> list[str]:
    """Imports that go up a layer, parts with no layer, and import cycles between parts."""
    out = [f"{a} (layer {layers[a]}) imports {b} (layer {layers[b]})"
           for a, targets in graph.items() for b in targets
           if a in layers and b in layers and layers[b] > layers[a]]
    out += [f"{p} has no layer in tests/cli/test_layers.py" for p in set(graph) | {b for t in graph.values() for b in t}
            if p not in layers]

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and (seen.add(nxt) or reaches(nxt, goal, seen))):
                return True
        return False

    out += [f"import cycle through {a} and {b}" for a in graph for b in graph[a] if a < b and reaches(b, a, set())]
    return out


def test_layers_and_no_cycles() -> None:
    assert violations(import_graph(), LAYERS) == []


@pytest.mark.parametrize(("graph", "expected"), [
    ({"schema": {"readers"}}, "schema (layer 2) imports readers (layer 3)"),
    ({"patch": {"layout"}, "layout": {"patch"}}, "import cycle through layout and patch"),
    ({"patch": {"newpart"}}, "newpart has no layer in tests/cli/test_layers.py"),
])
def test_the_check_catches_what_it_guards(graph: dict[str, set[str]], expected: str) -> None:
    assert expected in violations(graph, LAYERS)


def test_lazy_and_type_only_imports_count(tmp_path: Path) -> None:
    package = tmp_path / "ropectl"
    (package / "rope").mkdir(parents=True)
    (package / "rope" / "x.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                           "    from ropectl.schema import read\n"
                                           "def f():\n    import ropectl.readers.base\n")
    assert import_graph(package) == {"rope": {"schema", "readers"}}
