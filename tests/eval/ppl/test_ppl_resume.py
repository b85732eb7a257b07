"""--resume trusts only cells of the same run: identity per cell, one writer per --out, corrupt logs skipped.

A run is the model (resolved path, config and weights), tokenizer, dataset, --docs, mode, stride and dtype.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers import eval_data as fx
from tests.helpers.sweeps import assert_busy, paused_run, resume_argv, strict, terminate

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[3]


def evaluate(model: str, corpus: Path, out: str, *extra: str) -> Any:
    result = runner.invoke(app, ["eval-ppl", model, "-d", str(corpus), "-l", "64,128", "-m", "none", "-m", "ntk:2",
                                 "-o", out, "--json", *extra])
    assert result.exit_code == 0, result.output
    return result, strict(result.stdout)


def table(data: dict[str, Any]) -> dict[tuple[str, int], float]:
    return {(r["method"], r["length"]): r["ppl"] for r in data["table"]}


@pytest.fixture()
def finished(isolated, tiny_model, tiny_corpus) -> tuple[Path, dict[str, Any]]:
    _, data = evaluate(str(tiny_model), tiny_corpus, "out")
    return Path("out"), data


def test_same_model_spelled_differently_is_the_same_run(finished, tiny_model, tiny_corpus) -> None:
    """E-50 / E-51: a trailing slash, a relative path and an absolute path name one model."""
    _, first = finished
    relative = os.path.relpath(tiny_model)
    for spelling in (str(tiny_model) + "/", relative, str(Path(tiny_model).resolve())):
        _, data = evaluate(spelling, tiny_corpus, "out", "--resume")
        assert data["meta"]["new_cells"] == 0, spelling
        assert table(data) == table(first)


def test_another_model_is_refused(finished, tiny_corpus, tmp_path) -> None:
    other = fx.build("llama", tmp_path / "other", seed=7)
    result = runner.invoke(app, ["eval-ppl", str(other), "-d", str(tiny_corpus), "-l", "64,128", "-m", "none",
                                 "-m", "ntk:2", "-o", "out", "--resume"])
    assert result.exit_code == 2
    assert "different run (model source:" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_same_path_with_changed_weights_is_another_run(isolated, tiny_corpus, tmp_path) -> None:
    """The identity is the model's content too, not only its path: a re-saved config is a new run."""
    model = fx.build("llama", tmp_path / "m")
    evaluate(str(model), tiny_corpus, "out")
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-5}))
    result = runner.invoke(app, ["eval-ppl", str(model), "-d", str(tiny_corpus), "-l", "64,128", "-m", "none",
                                 "-m", "ntk:2", "-o", "out", "--resume"])
    assert result.exit_code == 2 and "different run (model config:" in result.stderr


def _rewrite_log(out: Path, edit) -> None:
    lines = (out / "results.jsonl").read_bytes().splitlines()
    (out / "results.jsonl").write_bytes(b"\n".join(edit(lines)) + b"\n")


def test_cells_of_another_run_in_the_log_are_never_used(finished, tiny_model, tiny_corpus) -> None:
    """E-39b: rows another run appended to the same log carry its identity and stay out of our table."""
    out, first = finished
    (out / "results.json").unlink()  # the log is all that is left, as after an interrupted sweep
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    ours = rows[0]["run"]
    foreign = [{**r, "run": "0" * 16, "nll_sum": r["nll_sum"] * 3} for r in rows]
    _rewrite_log(out, lambda lines: [json.dumps(r).encode() for r in foreign] + lines)
    result, data = evaluate(str(tiny_model), tiny_corpus, "out", "--resume")
    assert data["meta"]["new_cells"] == 0 and table(data) == table(first)
    assert "log rows of another run" in result.stderr
    # Negative control: the same rows labelled as ours would change the table, so the run key is what filters.
    _rewrite_log(out, lambda lines: lines + [json.dumps({**r, "run": ours}).encode() for r in foreign])
    (out / "results.json").unlink()
    _, mixed = evaluate(str(tiny_model), tiny_corpus, "out", "--resume")
    assert table(mixed) != table(first)


@pytest.mark.parametrize("damage", ["garbage", "invalid utf-8", "tokens 0", "NaN loss", "negative loss", "torn"])
def test_corrupt_log_rows_are_measured_again(finished, tiny_model, tiny_corpus, damage: str) -> None:
    """E-35 / E-36 / E-36b: a damaged row is skipped with a warning and measured again; JSON stays standard."""
    out, first = finished
    (out / "results.json").unlink()

    def edit(lines: list[bytes]) -> list[bytes]:
        row = json.loads(lines[0])
        bad = {"garbage": b"{this is not json", "invalid utf-8": b'{"model": "\xff\xfe"}',
               "tokens 0": json.dumps({**row, "tokens": 0}).encode(),
               "NaN loss": json.dumps({**row, "nll_sum": float("nan")}).encode(),
               "negative loss": json.dumps({**row, "nll_sum": -1.0}).encode(),
               "torn": lines[0][: len(lines[0]) // 2]}[damage]
        return [bad, *lines[1:]] if damage != "torn" else [*lines[1:], bad]

    _rewrite_log(out, edit)
    if damage == "torn":  # an interrupted write: the last line has no newline
        (out / "results.jsonl").write_bytes((out / "results.jsonl").read_bytes().rstrip(b"\n"))
    result, data = evaluate(str(tiny_model), tiny_corpus, "out", "--resume")
    assert data["meta"]["new_cells"] == 1
    assert table(data) == pytest.approx(table(first), rel=1e-9)
    assert ("not valid cells" in result.stderr) == (damage != "torn")
    for name in ("results.json", "summary.json"):
        strict((out / name).read_text())


def test_corrupt_run_file_is_a_warning(finished, tiny_model, tiny_corpus) -> None:
    """E-37: run.json is informative; cells are matched by their own identity, so a broken one only warns."""
    out, first = finished
    (out / "run.json").write_bytes(b"\xff{broken")
    result, data = evaluate(str(tiny_model), tiny_corpus, "out", "--resume")
    assert "run.json" in result.stderr and data["meta"]["new_cells"] == 0 and table(data) == table(first)
    assert strict((out / "run.json").read_text())["run"] == data["meta"]["run"]


@pytest.mark.slow
def test_one_writer_per_out_and_sigterm_keeps_cells(isolated, tiny_model, tiny_corpus) -> None:
    """E-39 and SIG-10: a second run into a busy --out gets one line; SIGTERM ends like Ctrl-C."""
    out = Path("out").resolve()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(Path("cache").resolve())}
    proc = paused_run(["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-l", "64,128", "-m", "none", "-m",
                       "ntk:2", "-o", str(out)], out / "results.jsonl", env)
    try:
        for extra in ([], ["--resume"]):
            assert_busy(runner.invoke(app, ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-l", "64", "-o",
                                            str(out), *extra]), proc.pid)
    finally:
        err = terminate(proc)
    argv = resume_argv(proc, err, out, "eval-ppl")
    kept = len((out / "results.jsonl").read_text().splitlines())
    assert kept >= 1
    # the printed resume line, run as printed (the lock went with the process)
    resumed = runner.invoke(app, [*argv[1:], "--json"])
    assert resumed.exit_code == 0, resumed.output
    data = strict(resumed.stdout)
    total = 2 * sum(data["meta"]["docs_used"].values())  # 2 methods x documents long enough at each length
    assert data["meta"]["new_cells"] == total - kept and total > kept


def test_stale_lock_of_a_dead_process_is_taken_over(isolated, tiny_model, tiny_corpus) -> None:
    out = Path("out")
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (out / ".ropectl.lock").write_text(dead.stdout)  # what a SIGKILLed run leaves
    _, data = evaluate(str(tiny_model), tiny_corpus, "out", "--resume")
    assert data["meta"]["new_cells"] == 2 * sum(data["meta"]["docs_used"].values())
    assert not (out / ".ropectl.lock").exists()


def test_a_fresh_non_finite_loss_is_reported_and_left_out(isolated, tiny_model, tiny_corpus, monkeypatch) -> None:
    """docs/reference/errors-and-guarantees.md: a cell whose forward gives a non-finite loss is reported and kept out of the
    table and the files."""
    import dataclasses

    import ropectl.eval.tasks.ppl.runner as run_mod

    real = run_mod.run_batch

    def diverge(jobs, *args, **kwargs):  # ntk:2 at 128 tokens diverges on every document
        scores = real(jobs, *args, **kwargs)
        return [{key: dataclasses.replace(sc, nll_sum=float("nan")) if key == ("ntk:2", 128) else sc
                 for key, sc in per_job.items()} for per_job in scores]

    monkeypatch.setattr(run_mod, "run_batch", diverge)
    result, data = evaluate(str(tiny_model), tiny_corpus, "out")  # strict JSON: no NaN reaches it
    assert ("ntk:2", 128) not in table(data) and ("ntk:2", 64) in table(data) and ("none", 128) in table(data)
    assert "gave a non-finite loss" in result.output
    logged = [json.loads(line) for line in Path("out/results.jsonl").read_text().splitlines()]
    assert not [c for c in logged if (c["method"], c["length"]) == ("ntk:2", 128)]
    strict(Path("out/summary.json").read_text())
