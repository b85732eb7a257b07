"""patch's own warning that vLLM serves dynamic as static names this run's model and factor (it printed a
``ropectl patch MODEL -m dynamic:F`` template), and the command it names runs as printed.

Oracle: the printed command, split as a shell would, run through the CLI, prints a `vllm serve` line for the
model and target the user asked for (trained 256 x 4 = 1024). Negative control: yarn, which vLLM serves as
transformers does, gets no such warning.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import tiny_llama

runner = CliRunner()
FIX = re.compile(r"fix: serve the static equivalent for one length: `([^`]*)`")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("dyn") / "llama")


def printed_fix(args: list[str]) -> str | None:
    result = runner.invoke(app, ["patch", *args])
    assert result.exit_code == 0, result.output
    found = FIX.findall(result.output)
    assert len(found) <= 1, found
    return found[0] if found else None


@pytest.mark.parametrize(("how", "factor"), [(["-f", "4"], "4"), (["-t", "1000"], "3.90625")])
@pytest.mark.parametrize("mode", ["dry-run", "output"])
def test_the_printed_command_is_concrete_and_runs(llama: Path, tmp_path: Path, how: list[str], factor: str,
                                                  mode: str) -> None:
    where = llama if mode == "dry-run" else tmp_path / "out"
    flags = ["--dry-run"] if mode == "dry-run" else ["-o", str(where)]
    command = printed_fix([str(llama), "-m", "dynamic", *how, *flags])
    assert command == f"ropectl patch {where} -m dynamic:{factor} --emit vllm"
    argv = shlex.split(command)
    served = runner.invoke(app, argv[1:])
    assert served.exit_code == 0, served.output
    target = round(256 * float(factor))
    assert served.stdout.startswith(f"vllm serve {where} ") and f"--max-model-len {target}" in served.stdout


def test_emit_vllm_points_at_its_own_command(llama: Path) -> None:
    result = runner.invoke(app, ["patch", str(llama), "-m", "dynamic:4", "--emit", "vllm"])
    assert result.exit_code == 0, result.output
    assert "MODEL" not in result.stderr and "dynamic:F" not in result.stderr
    assert "fix: the command printed is that static equivalent, for 1024 tokens" in result.stderr


def test_no_dynamic_warning_for_yarn(llama: Path) -> None:
    """Negative control: the pattern finds nothing where vLLM computes what transformers computes."""
    assert printed_fix([str(llama), "-m", "yarn:4", "--dry-run"]) is None
