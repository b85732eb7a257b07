"""At 80 columns nothing ropectl prints is cut with an ellipsis and no word is broken across lines: the model path
in `inspect` (once ``…/llm_smo…``), the option names in its scaling row and in patch's table title (once
``high_fre/q_factor``, ``tru/ncate=False``, ``embeddi/ngs``).

The oracle: each token the user must be able to read or copy (a path, a ``key=value``) appears whole on one line.
The negative control renders a title the old way (rich's table title, wrapped to the table's width) and must be
caught by the same check.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import tiny_llama

runner = CliRunner()
NARROW = {"COLUMNS": "80"}
LLAMA3 = ["high_freq_factor=4", "low_freq_factor=1", "original_max_position_embeddings=256", "factor=8"]
YARN = ["truncate=False", "beta_fast=16", "mscale_all_dim=1", "original_max_position_embeddings=256"]


def unbroken(output: str, tokens: list[str]) -> list[str]:
    """The tokens that are not whole on some line of ``output``, plus any ellipsis: [] when all is well."""
    lines = output.splitlines()
    bad = [t for t in tokens if not any(t in line for line in lines)]
    return bad + (["…"] if "…" in output else [])


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("narrow") / "llama")


def run(args: list[str]) -> str:
    result = runner.invoke(app, args, env=NARROW)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_inspect_keeps_the_real_model_path_whole(smollm2: Path) -> None:
    out = run(["inspect", str(smollm2)])
    assert len(str(smollm2)) > 62  # longer than the value column: the case that was cut
    assert unbroken(out, [str(smollm2), "(gguf, llama)", "interleaved"]) == []
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith("model"))


@pytest.mark.parametrize(("spec", "tokens"), [
    ("llama3:8,low_freq_factor=1,high_freq_factor=4,original_max_position_embeddings=256", LLAMA3),
    ("yarn:4,truncate=false,beta_fast=16,mscale_all_dim=1,original_max_position_embeddings=256", YARN),
])
def test_patch_title_and_inspect_scaling_row_wrap_between_options(llama: Path, tmp_path: Path, spec: str,
                                                                  tokens: list[str]) -> None:
    out = run(["patch", str(llama), "-m", spec, "-o", str(tmp_path / "out")])
    assert unbroken(out, [t for t in tokens if not t.startswith("factor=")]) == []  # the title says llama3:8
    assert unbroken(run(["inspect", str(tmp_path / "out")]), [*tokens, str(tmp_path / "out")]) == []


def test_the_check_catches_a_title_wrapped_to_its_table() -> None:
    """Negative control: rich's own table title, as patch printed it before, breaks an option name at 80 columns."""
    from rich.console import Console
    from rich.table import Table

    title = "llama3:8,low_freq_factor=1,high_freq_factor=4,original_max_position_embeddings=256  (dry-run)"
    table = Table(title=title, box=None)
    for col in ("", "before", "after"):
        table.add_column(col)
    table.add_row("rope type", "default", "llama3")
    buffer = io.StringIO()
    Console(file=buffer, width=80).print(table)
    assert unbroken(buffer.getvalue(), LLAMA3) != []
