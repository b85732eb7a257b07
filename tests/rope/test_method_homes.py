"""One home per method: outside the readers' package (``ropectl/readers/``), a method is named in at most 3 files.

The rule, as the scan below applies it to every ``.py`` file under ``ropectl/`` except ``ropectl/readers/``:
- a *mention* is a string constant in the code (``ast.Constant``) whose whole value is a built-in method's name,
  the rope type it writes, or a spelling of that type it accepts (``Method.aliases``: "su", "ntk_aware"). That is
  what ``if name == "yarn"``, ``in ("linear", "dynamic")``, ``{"yarn": ...}`` and ``else "longrope"`` all contain;
- docstrings are not code and are skipped; comments never reach the AST. Prose (error text, help) holds a name
  among other words, so it is no whole-value match; nor is a spec with a factor ("yarn:2" in a task's defaults):
  that is a choice as a user types it, the same text as the help's examples;
- ``default`` is not counted: it is transformers' name for unscaled RoPE, the rope type of every unscaled config,
  which the config reader, writer and every engine must know whatever methods exist;
- ``none`` is also an English word and llama.cpp's scaling type: ``NOT_THE_METHOD`` lists, with their counts, the
  few places where the string means something else (torch's reduction, the schema of a config without RoPE keys, a
  missing model type, ntk's GGUF type).

The allowed files for a method are its module, the registry (``BUILTIN`` fixes the order of the lists) and
``ropectl/families/config.py``: the model-family facts, data as the cards' TOML is (which rope types a config class
refuses or accepts, what gpt-oss ships, Gemma 3's linear scaling). Every behaviour a method changes elsewhere is
a field of its ``Method`` record (docs/contributing/add-a-method.md).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from ropectl.rope.methods import METHODS
from ropectl.rope.methods.registry import BUILTIN, module_of

PACKAGE = Path(__file__).resolve().parents[2] / "ropectl"
READERS = "ropectl/readers/"
REGISTRY = "ropectl/rope/methods/registry.py"
FAMILY_DATA = "ropectl/families/config.py"
UNSCALED_TYPE = "default"
NOT_THE_METHOD = {
    ("ropectl/eval/engines/hf/loss.py", "none"): 1,  # F.cross_entropy(reduction="none")
    ("ropectl/schema/read.py", "none"): 2,  # ModelRope.schema: v4, v5, both or none
    ("ropectl/families/layouts.py", "none"): 1,  # shown for a config without model_type
    ("ropectl/rope/methods/ntk.py", "none"): 1,  # gguf_type: llama.cpp's rope.scaling.type for a theta change
}


def spellings() -> dict[str, str]:
    """{string: the built-in method it names}."""
    out = {}
    for name in BUILTIN:
        method = METHODS[name]
        for text in (name, method.rope_type, *method.aliases):
            if text and text != UNSCALED_TYPE:  # as-is writes no rope type of its own ("")
                out.setdefault(text, name)
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def mentions(source: str, names: dict[str, str]) -> list[tuple[str, int]]:
    """(string, line) for each string constant of ``source`` that is a whole method name, docstrings skipped."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [(node.value, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
            and id(node) not in docs]


def homes(root: Path = PACKAGE) -> dict[str, set[str]]:
    """{method: the files outside the readers' package that name it}."""
    names = spellings()
    out: dict[str, set[str]] = {name: set() for name in BUILTIN}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel.startswith(READERS):
            continue
        found = Counter(text for text, _ in mentions(path.read_text(encoding="utf-8"), names))
        for text, count in found.items():
            if count > NOT_THE_METHOD.get((rel, text), 0):
                out[names[text]].add(rel)
    return out


def allowed(name: str) -> set[str]:
    return {f"ropectl/rope/methods/{module_of(name)}.py", REGISTRY, FAMILY_DATA}


@pytest.mark.parametrize("name", BUILTIN)
def test_a_method_is_named_in_its_module_the_registry_and_the_family_data_only(name: str) -> None:
    files = homes()[name]
    assert files <= allowed(name), f"{name} is also named in {sorted(files - allowed(name))}: make it a Method field"
    assert len(files) <= 3


def test_the_scan_finds_what_is_there() -> None:
    """Not vacuous: every method's own module and the registry's BUILTIN are found."""
    found = homes()
    for name in BUILTIN:
        assert {f"ropectl/rope/methods/{module_of(name)}.py", REGISTRY} <= found[name], name


def test_a_name_comparison_is_detected() -> None:
    """Negative control: the special cases this test exists to catch are counted; prose and docstrings are not."""
    names = spellings()
    source = '''"""yarn is named in this docstring."""
REEXTENDABLE = ("yarn", "llama3")


def f(name, rope):
    """dynamic, in a docstring."""
    if name == "yarn":
        return {"longrope": 1}.get(rope.rope_type, "su")
    raise ValueError(f"method '{name}' is not yarn:2")
'''
    assert sorted(mentions(source, names)) == [("llama3", 2), ("longrope", 8), ("su", 8), ("yarn", 2), ("yarn", 7)]


def test_an_added_comparison_fails_the_check(tmp_path: Path) -> None:
    """A copy of a caller with one ``rope_type == "yarn"`` added makes yarn's files exceed what is allowed."""
    package = tmp_path / "ropectl"
    (package / "patch").mkdir(parents=True)
    (package / "patch" / "extra.py").write_text('def g(rope):\n    return rope.rope_type == "yarn"\n')
    assert homes(package)["yarn"] == {"ropectl/patch/extra.py"}
    assert not homes(package)["yarn"] <= allowed("yarn")
