"""The layers of the package: rope <- families/schema/io <- readers <- patch/layout/inspection/runtime <- eval <-
verify <- recommend/finetune/search/report <- extend <- cli.

Every import of a ropectl module counts, at module level, inside functions (lazy) and under TYPE_CHECKING alike:
a lower layer never imports a higher one, and no two parts of the package import each other, even indirectly. The
same holds at every depth: inside each package, no two of its modules or subpackages import each other, even
indirectly (so no two files do either).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ropectl"
# Each top-level module or subpackage of ropectl, by layer (lower numbers are imported by higher ones).
LAYERS: dict[str, int] = {
    "errors": 0, "limits": 0, "output": 0, "__init__": 0,  # __init__: the version
    "rope": 1, "presets": 1,
    "families": 2, "schema": 2, "io": 2,
    "readers": 3,
    "patch": 4, "layout": 4, "inspection": 4, "runtime": 4,  # runtime: what every command shares
    "eval": 5,
    "verify": 6,  # below the commands that print "reads the same" claims (search's winner check calls it)
    "recommend": 7, "finetune": 7, "search": 7, "report": 7,  # the commands' homes (docs/contributing/index.md)
    "extend": 8,  # composes the commands' homes (recommend, search, finetune, report, patch, verify)
    "cli": 9, "__main__": 10,
}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    """{dotted module name: file}; a package is its ``__init__.py``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(node: ast.AST) -> list[str]:
    """The ropectl names one import statement names: ``from P import x`` names P and P.x (a submodule or not)."""
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return []


def file_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """{module: modules it imports}, every import statement included; ``from P import x`` is an arrow to the
    submodule P.x where there is one, else to P."""
    files = module_files(root)
    graph: dict[str, set[str]] = {name: set() for name in files}
    for here, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [n for n in _imported(node) if n == "ropectl" or n.startswith("ropectl.")]
            if names and isinstance(node, ast.ImportFrom):  # P.x where it is a module, else P itself
                subs = [n for n in names[1:] if n in files]
                names = subs if len(subs) == len(names) - 1 else [names[0], *subs]
            graph[here] |= {n for n in names if n in files and n != here}
    return graph


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """{part: parts it imports}: the file graph seen from the top-level parts."""
    return collapse(file_graph(root), "ropectl", name=_part)


def _child(module: str, package: str) -> str | None:
    """The module or subpackage of ``package`` that holds ``module`` (``__init__`` for the package itself)."""
    if module == package:
        return "__init__"
    prefix = package + "."
    return module[len(prefix):].split(".")[0] if module.startswith(prefix) else None


def collapse(graph: Mapping[str, set[str]], package: str, name: object = None) -> dict[str, set[str]]:
    """The arrows between the children of ``package`` (``name``: how a child is named, by default its own name)."""
    label = name if callable(name) else (lambda m: _child(m, package))
    out: dict[str, set[str]] = {}
    for source, targets in graph.items():
        a = label(source)
        for target in targets:
            b = label(target)
            if a is not None and b is not None and a != b:
                out.setdefault(a, set()).add(b)
    return out


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while not members or members[-1] != node:
                members.append(stack.pop())
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def circles(graph: Mapping[str, set[str]]) -> list[str]:
    """Every import cycle, at every depth: between the children of each package, and so between files."""
    packages = {m.rsplit(".", 1)[0] for m in graph if "." in m} | {m for m in graph if "." not in m}
    return [f"import cycle in {package}: {' <-> '.join(members)}" for package in sorted(packages)
            for members in cycles(collapse(graph, package))]


def violations(graph: Mapping[str, set[str]], layers: Mapping[str, int]) -> list[str]:
    """Imports that go up a layer, parts with no layer, and import cycles between parts."""
    out = [f"{a} (layer {layers[a]}) imports {b} (layer {layers[b]})"
           for a, targets in graph.items() for b in targets
           if a in layers and b in layers and layers[b] > layers[a]]
    out += [f"{p} has no layer in tests/cli/test_layers.py" for p in set(graph) | {b for t in graph.values() for b in t}
            if p not in layers]
    out += [f"import cycle through {' and '.join(members)}" for members in cycles(graph)]
    return out


def test_layers_and_no_cycles() -> None:
    assert violations(import_graph(), LAYERS) == []


def test_no_import_cycle_at_any_depth() -> None:
    assert circles(file_graph()) == []


@pytest.mark.parametrize(("graph", "expected"), [
    ({"schema": {"readers"}}, "schema (layer 2) imports readers (layer 3)"),
    ({"patch": {"layout"}, "layout": {"patch"}}, "import cycle through layout and patch"),
    ({"patch": {"newpart"}}, "newpart has no layer in tests/cli/test_layers.py"),
    ({"runtime": {"eval"}}, "runtime (layer 4) imports eval (layer 5)"),
])
def test_the_check_catches_what_it_guards(graph: dict[str, set[str]], expected: str) -> None:
    assert expected in violations(graph, LAYERS)


@pytest.mark.parametrize(("graph", "expected"), [
    # two files of one package, one importing the other lazily: still a circle
    ({"ropectl.schema.read": {"ropectl.schema.validate"}, "ropectl.schema.validate": {"ropectl.schema.read"}},
     "import cycle in ropectl.schema: read <-> validate"),
    # a module and a sibling subpackage through two of its files: a circle one level up
    ({"ropectl.eval.sweep": {"ropectl.eval.tasks"}, "ropectl.eval.tasks": set(),
      "ropectl.eval.tasks.ppl.runner": {"ropectl.eval.sweep"}}, "import cycle in ropectl.eval: sweep <-> tasks"),
    # three files in a ring
    ({"ropectl.a.x": {"ropectl.a.y"}, "ropectl.a.y": {"ropectl.a.z"}, "ropectl.a.z": {"ropectl.a.x"}},
     "import cycle in ropectl.a: x <-> y <-> z"),
])
def test_a_file_cycle_is_reported(graph: dict[str, set[str]], expected: str) -> None:
    assert expected in circles(graph)


def test_a_graph_without_cycles_passes() -> None:
    """Control: arrows one way only, at every depth."""
    graph = {"ropectl.eval.sweep": {"ropectl.eval.tasks"}, "ropectl.eval.tasks": {"ropectl.eval.tasks.contract"},
             "ropectl.eval.tasks.contract": set(), "ropectl.eval.tasks.ppl.runner": {"ropectl.eval.tasks.contract"}}
    assert circles(graph) == []


def test_lazy_and_type_only_imports_count(tmp_path: Path) -> None:
    package = tmp_path / "ropectl"
    for part in ("rope", "schema", "readers"):
        (package / part).mkdir(parents=True)
        (package / part / "__init__.py").write_text("")
    (package / "schema" / "read.py").write_text("")
    (package / "readers" / "base.py").write_text("")
    (package / "rope" / "x.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                           "    from ropectl.schema import read\n"
                                           "def f():\n    import ropectl.readers.base\n")
    assert file_graph(package)["ropectl.rope.x"] == {"ropectl.schema.read", "ropectl.readers.base"}
    assert import_graph(package) == {"rope": {"schema", "readers"}}
