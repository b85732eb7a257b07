"""The evaluation package's seams: a task added as one module runs through the sweep driver (JSON output,
--resume reusing finished cells), the registries, and the layering (eval/ never imports the CLI)."""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from ropectl.eval.engines import ENGINES, Engine, get_engine
from ropectl.eval.settings import parse_methods
from ropectl.eval.tasks import TASKS, get_task, task_names
from ropectl.eval.tasks.sweep import run_sweep
from ropectl.runtime.lengths import parse_lengths

ROOT = Path(__file__).resolve().parents[3]
TESTS = ROOT / "tests"
EVAL = ROOT / "ropectl" / "eval"


def load_toy(tmp_path: Path):
    """The toy task as a module outside the package, imported the way a plugin would be."""
    path = tmp_path / "plugin" / "toy_task.py"
    path.parent.mkdir()
    shutil.copy(TESTS / "helpers" / "toy_task.py", path)
    spec = importlib.util.spec_from_file_location("toy_task_plugin", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_task_in_one_module_runs_resumes_and_reuses_cells(tiny_model: Path, tmp_path: Path) -> None:
    toy = load_toy(tmp_path)
    assert "toy" in TASKS and get_task("toy") is toy.ToyTask
    out = tmp_path / "out"
    spec = toy.ToySpec(model=str(tiny_model), methods=parse_methods(["none", "yarn:2"]), lengths=parse_lengths("32"),
                       out=out)
    first = run_sweep("toy", spec)
    assert first["meta"]["new_cells"] == 2 and first["meta"]["trained_context"] == 256
    written = json.loads((out / "toy.json").read_text())
    assert written == json.loads(json.dumps(first))
    assert [(r["method"], r["length"]) for r in written["table"]] == [("none", 32), ("yarn:2", 32)]
    assert not (out / ".ropectl.lock").exists()

    # --resume with one more length: the finished cells are reused, only the new length is scored
    more = run_sweep("toy", toy.ToySpec(**{**spec.__dict__, "lengths": parse_lengths("32,64"), "resume": True}))
    assert more["meta"]["new_cells"] == 2
    assert [(r["method"], r["length"]) for r in more["table"]] == [("none", 32), ("none", 64), ("yarn:2", 32),
                                                                     ("yarn:2", 64)]
    old = {(r["method"], r["length"]): r["loss"] for r in first["table"]}
    assert all(r["loss"] == old[(r["method"], r["length"])] for r in more["table"] if r["length"] == 32)
    assert len((out / "toy.jsonl").read_text().splitlines()) == 4
    again = run_sweep(toy.ToyTask(), toy.ToySpec(**{**spec.__dict__, "lengths": parse_lengths("32,64"),
                                                   "resume": True}))
    assert again["meta"]["new_cells"] == 0 and again["table"] == more["table"]
    # the scaled method really changed the forward: yarn:2 below the trained context differs from none
    assert old[("none", 32)] != old[("yarn:2", 32)]


def test_an_interrupted_toy_run_keeps_its_cells(tiny_model: Path, tmp_path: Path, monkeypatch) -> None:
    from ropectl.runtime.interrupt import SweepInterrupted

    toy = load_toy(tmp_path)
    out = tmp_path / "out"
    spec = toy.ToySpec(model=str(tiny_model), methods=parse_methods(["none", "ntk:2"]), lengths=parse_lengths("32"),
                       out=out)
    real = toy.ToyTask.score

    def stop_on_second(self, sweep, batch, on_tokens):
        if batch.state.label == "ntk:2":
            raise KeyboardInterrupt
        return real(self, sweep, batch, on_tokens)

    monkeypatch.setattr(toy.ToyTask, "score", stop_on_second)
    with pytest.raises(SweepInterrupted) as err:
        run_sweep("toy", spec)
    assert err.value.exit_code == 130 and err.value.kept == 1 and "toy.jsonl" in str(err.value)
    monkeypatch.setattr(toy.ToyTask, "score", real)
    done = run_sweep("toy", toy.ToySpec(**{**spec.__dict__, "resume": True}))
    assert done["meta"]["new_cells"] == 1 and len(done["table"]) == 2


def test_builtin_registries() -> None:
    assert {"ppl", "passkey"} <= set(task_names())
    assert get_task("ppl").command == "eval-ppl" and get_task("passkey").command == "eval-passkey"
    factory = get_engine()
    assert "transformers" in ENGINES and factory is ENGINES["transformers"]
    assert isinstance(factory(None, "cpu", "fp32", None, "eval-ppl"), Engine)
    from ropectl.errors import UsageError

    with pytest.raises(UsageError):
        get_task("no-such-task")
    with pytest.raises(UsageError):
        get_engine("no-such-engine")


def test_eval_never_imports_the_cli_typer_or_rich() -> None:
    """Layering: ropectl/eval may use rope, schema, readers and I/O helpers; the CLI sits on top of it."""
    bad = []
    for path in EVAL.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.relative_to(EVAL)}: {n}" for n in names
                    if n.split(".")[0] in ("typer", "rich", "click") or n.startswith("ropectl.cli")]
    assert not bad, bad


def test_no_module_imports_a_private_name_from_another() -> None:
    root = ROOT
    bad = []
    tests = [p for p in TESTS.rglob("*.py") if "compat" not in p.parts]
    for path in [*(root / "ropectl").rglob("*.py"), *tests, *(root / "bench").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("ropectl", "tests"):
                bad += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, bad
