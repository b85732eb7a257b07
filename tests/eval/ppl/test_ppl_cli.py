"""The eval-ppl command: table and --json output, resume, and Ctrl-C keeping finished cells."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.sweeps import default_sigint

runner = CliRunner()


def test_json_output_is_one_object(isolated, tiny_model, tiny_corpus) -> None:
    result = runner.invoke(app, ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-m", "none", "-m", "yarn:2",
                                 "-l", "64,300", "--json", "-o", "out"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["meta"]["methods"] == ["none", "yarn:2"] and data["meta"]["docs_used"] == {"64": 4, "300": 3}
    want = {(m, n) for m in ("none", "yarn:2") for n in (64, 300)}
    assert {(r["method"], r["length"]) for r in data["table"]} == want
    assert Path("out/results.json").is_file() and Path("out/ppl.png").is_file()


def test_table_output_and_default_folder(isolated, tiny_model, tiny_corpus) -> None:
    result = runner.invoke(app, ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-m", "none", "-m", "ntk:2",
                                 "-l", "64,300"])
    assert result.exit_code == 0, result.stderr
    assert "ntk:2" in result.stdout and "(3 docs)" in result.stdout and "beyond the trained context" in result.stdout
    runs = list(Path("runs").glob("eval-ppl-*"))
    assert len(runs) == 1 and (runs[0] / "summary.json").is_file()
    again = runner.invoke(app, ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-m", "none", "-m", "ntk:2",
                                "-l", "64,300,400", "--resume", "--json"])  # resumes the latest run
    assert again.exit_code == 0, again.stderr
    data = json.loads(again.stdout)
    assert data["out"] == str(runs[0]) and data["meta"]["new_cells"] == 2 * 2  # only the 400-token cells ran


@pytest.mark.parametrize(("lengths", "starred"), [("64,128", False), ("64,256", False), ("64,300", True)])
def test_the_star_footnote_only_where_a_length_is_starred(isolated, tiny_model, tiny_corpus, lengths: str,
                                                           starred: bool) -> None:
    """The tiny model is trained at 256 tokens: 300 is beyond it, 256 is not (the negative controls)."""
    result = runner.invoke(app, ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-m", "none", "-l", lengths,
                                 "-n", "1"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    assert ("* beyond the trained context (256 tokens)" in result.stdout) is starred
    assert ("300 *" in result.stdout) is starred
    assert "PPL = exp(sum NLL / sum tokens)" in result.stdout  # the table's own note stays either way


def test_checkpoint_as_is_without_methods(isolated, tiny_model, tiny_corpus) -> None:
    result = runner.invoke(app, ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["meta"]["methods"] == ["as-is"]


@pytest.mark.slow
def test_ctrl_c_keeps_finished_cells_and_says_how_to_resume(tiny_model, tiny_corpus, tmp_path) -> None:
    """Deterministic: the run blocks after its first logged cell until the signal comes (a test hook), so the
    interrupt always lands mid-sweep, however loaded the machine is; no deadline decides the outcome."""
    out = tmp_path / "out"
    args = [sys.executable, "-m", "ropectl", "eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "--mode",
            "sliding", "--stride", "24", "-l", "32", "-n", "2", "-m", "none", "-m", "yarn:2", "-m", "ntk:2", "-o", str(out)]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "ROPECTL_TEST_PAUSE_AFTER_CELLS": "1"}, preexec_fn=default_sigint)
    log = out / "results.jsonl"
    while proc.poll() is None and not (log.is_file() and log.read_bytes().endswith(b"\n")):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()  # it must be paused mid-sweep, not finished or crashed
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("interrupted")]
    assert len(lines) == 1 and "--resume" in lines[0] and str(out) in lines[0]
    kept = len(log.read_text().splitlines())
    assert 0 < kept < 3 * 2
    done = subprocess.run([*args, "--resume", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["meta"]["new_cells"] == 3 * 2 - kept


def test_help_is_fast_and_lists_the_protocol_flags() -> None:
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "ropectl", "eval-ppl", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert time.time() - start < 10
    for flag in ("--method", "--lengths", "--dataset", "--docs", "--mode", "--stride", "--dtype", "--resume"):
        assert flag in proc.stdout
    heavy = subprocess.run([sys.executable, "-c", "import ropectl.cli.app, sys; "
                            "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'numpy', 'matplotlib') "
                            "if m in sys.modules))"], capture_output=True, text=True)
    assert heavy.stdout.strip() == "[]"


def test_standard_error_text_never_rounds_a_spread_to_zero() -> None:
    """eval-ppl's ± cell: two decimals, two significant digits below 0.005 (not "±0.00"), nothing without a spread
    (one document, or documents that all agree: a standard error of 0 would claim too much)."""
    from ropectl.cli.ppl_cmd import se_text

    assert (se_text(2.371), se_text(0.0042), se_text(0.0), se_text(None)) == ("±2.37", "±0.0042", "", "")
