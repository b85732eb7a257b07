"""Running the CLI in-process and checking its one-line errors."""

from __future__ import annotations

from typer.testing import CliRunner

from ropectl.cli.app import app

runner = CliRunner()


def one_line(args: list[str], *needles: str, code: int | None = None) -> str:
    """The command fails with exactly one 'error: ... Fix: ...' line on stderr, naming ``needles``."""
    result = runner.invoke(app, args)
    assert result.exit_code != 0 and (code is None or result.exit_code == code), (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Fix:" in lines[0], result.stderr
    assert "unexpected" not in lines[0] and "report it" not in lines[0], lines[0]
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def run_printed(commands: list[str]) -> list[str]:
    """Run each command a ropectl command printed, as printed (``#`` lines are comments, not commands); each must
    succeed. Returns their stdout."""
    import shlex

    outputs = []
    for line in commands:
        if line.startswith("#"):
            continue
        argv = shlex.split(line)
        assert argv[0] == "ropectl", line
        result = runner.invoke(app, argv[1:])
        assert result.exit_code == 0, f"{line}\n{result.output}"
        outputs.append(result.stdout)
    return outputs
