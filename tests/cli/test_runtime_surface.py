"""The runtime's public surface (``ropectl/runtime/__init__.py``), what finetune takes from it, and the one resume
line every command prints."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ropectl.runtime as runtime
from ropectl.runtime.interrupt import Interrupted, SweepInterrupted, resume_line

PACKAGE = Path(__file__).resolve().parents[2] / "ropectl"


def test_every_surface_name_resolves_from_its_module() -> None:
    assert runtime.__all__ == sorted(runtime.SURFACE)
    for name, module in runtime.SURFACE.items():
        assert getattr(runtime, name) is getattr(__import__(f"ropectl.runtime.{module}", fromlist=[name]), name)
    with pytest.raises(AttributeError):
        runtime.not_a_name  # noqa: B018


def runtime_imports(source: str) -> list[str]:
    """Every ropectl.runtime or ropectl.eval.engines.hf name a module imports, lazy imports included."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(("ropectl.runtime",
                                                                                          "ropectl.eval.engines.hf")):
            out += [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith(("ropectl.runtime", "ropectl.eval.engines.hf"))]
    return out


def off_surface(source: str) -> list[str]:
    return [n for n in runtime_imports(source) if n.rsplit(".", 1)[0] != "ropectl.runtime"
            or n.rsplit(".", 1)[1] not in runtime.SURFACE]


def test_finetune_uses_the_listed_surface_only() -> None:
    bad = {p.name: off_surface(p.read_text(encoding="utf-8")) for p in sorted((PACKAGE / "finetune").glob("*.py"))}
    assert {k: v for k, v in bad.items() if v} == {}


@pytest.mark.parametrize("source", ["from ropectl.eval.engines.hf.forward import decoder\n",
                                    "def f():\n    from ropectl.runtime.model import MethodState\n"])
def test_an_internal_import_is_caught(source: str) -> None:
    """The negative controls: an engine internal, and a runtime module reached past the surface."""
    assert off_surface(source) != []


@pytest.mark.parametrize(("argv", "out", "extra", "launcher", "expected"), [
    # an evaluation command: --resume and the --out it wrote are added
    (["ropectl", "eval-ppl", "M", "-l", "4k"], Path("runs/x"), (), ("ropectl",),
     "ropectl eval-ppl M -l 4k --resume --out runs/x"),
    # its own --out and --resume are kept where the user wrote them
    (["ropectl", "eval-ppl", "--resume", "-o", "mine"], Path("runs/x"), (), ("ropectl",),
     "ropectl eval-ppl --resume -o mine"),
    (["ropectl", "search", "--out=o"], Path("o"), (), ("ropectl",), "ropectl search --out=o --resume"),
    # finetune: no --out, its launcher and --fsdp
    (["ropectl", "finetune", "M", "-o", "OUT"], None, ("--fsdp",), ("torchrun", "--nproc_per_node", "2", "-m",
                                                                    "ropectl"),
     "torchrun --nproc_per_node 2 -m ropectl finetune M -o OUT --fsdp --resume"),
    (["ropectl", "finetune", "M", "-o", "OUT", "--resume"], None, (), ("ropectl",), "ropectl finetune M -o OUT --resume"),
    (["ropectl", "eval-ppl", "a b"], Path("r"), (), ("ropectl",), "ropectl eval-ppl 'a b' --resume --out r"),
])
def test_one_resume_line(argv: list[str], out: Path | None, extra: tuple[str, ...], launcher: tuple[str, ...],
                         expected: str) -> None:
    assert resume_line(out, extra=extra, launcher=launcher, argv=argv) == expected


def test_every_stop_is_an_interrupted_with_its_exit_code() -> None:
    stop = SweepInterrupted(Path("runs/x"), 3, terminated=True)
    assert isinstance(stop, Interrupted) and stop.exit_code == 143 and stop.what == "terminated"
    assert stop.line().startswith("terminated; 3 finished cells are kept in runs/x/results.jsonl; resume with: ")
    told = stop.retold("terminated: 3 finished cells kept in runs/x", "ropectl recommend --resume")
    assert told.line() == "terminated: 3 finished cells kept in runs/x; resume with: ropectl recommend --resume"
    assert Interrupted("stopped", None, terminated=False, resume="r").exit_code == 130
