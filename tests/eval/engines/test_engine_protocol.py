"""Tasks, trials and recommend call the engine protocol only: outside ropectl/eval/engines/ no code compares an
evaluation engine's name (what a caller needs to know is a capability on the engine class). Read from the source
with ast; the detector is checked on the eight comparisons the package once had (negative control)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "ropectl"
# The engines' own package may name them; the readers' package (how each serving engine reads a config) is keyed
# by serving engine by design, and its callers compare a reader's engine, not the one that runs the evaluation.
OWN = (PACKAGE / "eval" / "engines", PACKAGE / "readers")
NAMES = {"transformers", "hf", "vllm", "llama.cpp"}


def _about_engine(node: ast.AST) -> bool:
    text = ast.unparse(node).lower()
    return "engine" in text and "reader" not in text


def name_comparisons(source: str) -> list[int]:
    """Lines comparing an evaluation engine's name: against DEFAULT_ENGINE or engine_name(...), an engine's
    ``.name``, or an engine's name spelled as a string."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        texts = [ast.unparse(s) for s in sides]
        named = any("DEFAULT_ENGINE" in t or "engine_name(" in t for t in texts)
        dotted = any(isinstance(s, ast.Attribute) and s.attr == "name" and _about_engine(s.value) for s in sides)
        literal = (ast.Constant, ast.Tuple, ast.List, ast.Set)
        spelled = any(isinstance(c, ast.Constant) and c.value in NAMES for s in sides for c in ast.walk(s)) and any(
            _about_engine(s) for s in sides if not isinstance(s, literal))
        if named or dotted or spelled:
            hits.append(node.lineno)
    return hits


def test_no_engine_name_comparisons_outside_the_engines() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(path.is_relative_to(own) for own in OWN):
            continue
        found += [f"{path.relative_to(PACKAGE)}:{line}" for line in name_comparisons(path.read_text())]
    assert found == []


@pytest.mark.parametrize("source", [
    "if engine.name != DEFAULT_ENGINE:\n    pass",  # eval/forward.py, ppl/runner.py, ruler/runner.py
    "x = ident if engine.name == DEFAULT_ENGINE else {}",  # eval/trials.py
    "if sweep.engine is not None and sweep.engine.name != DEFAULT_ENGINE:\n    pass",  # ppl/runner.py
    "screens = engine_name(req.engine_options.get('engine', DEFAULT_ENGINE)) == DEFAULT_ENGINE",  # recommend_run.py
    "if sweep.engine.name == 'vllm':\n    pass",  # the same under another spelling
    "if spec.engine in ('vllm',):\n    pass",
])
def test_the_detector_sees_name_comparisons(source: str) -> None:
    assert name_comparisons(source) == [1]


@pytest.mark.parametrize("source", [
    "if not engine.cheap_method_switch:\n    pass",
    "if v.reader.engine == 'transformers':\n    pass",  # a reader's engine (patch's serving hints)
    "if task.name == 'ppl':\n    pass",
])
def test_the_detector_leaves_capabilities_alone(source: str) -> None:
    assert name_comparisons(source) == []
