"""eval-passkey on a tiny Llama: the prompt, teacher forcing against real greedy generation, the sweep, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.eval.tasks.passkey import build_passkey_spec, run_passkey
from tests.helpers.eval_reference import greedy_generate, load
from tests.helpers.sweeps import assert_busy, default_sigint, paused_run, resume_argv, strict, terminate

runner = CliRunner()
# The YaRN / LongLoRA passkey wording, typed here from their scripts (not imported from ropectl).
TASK = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
        "I will quiz you about the important information there.")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = "What is the pass key? The pass key is"


def chars(tok, ids) -> str:
    """Text of the character tokenizer's ids (its decoder would put spaces between tokens)."""
    return "".join(tok.convert_ids_to_tokens(list(ids), skip_special_tokens=True))


@pytest.fixture(scope="module")
def tok(tiny_model: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def test_prompt_has_the_exact_length_wording_and_depth(tok) -> None:
    from ropectl.eval.tasks.passkey.prompt import PromptBuilder

    builder = PromptBuilder(tok, 600)
    for length in (300, 451, 600):
        for depth in (0.0, 0.5, 1.0):
            trial = builder.trial(length, depth, 0, seed=1, digits=5)
            assert len(trial.ids) == length
            text = chars(tok, trial.ids)
            assert text.startswith(TASK + "\n") and (length < 451 or FILLER[:40] in text)
            assert text.endswith(f"\n{QUESTION} {trial.key}")
            assert f"The pass key is {trial.key}. Remember it. {trial.key} is the pass key." in text
            assert len(trial.key) == 5 and trial.key.isdigit()
            assert chars(tok, trial.ids[-trial.answer_len:]) == f" {trial.key}"
            at = text.index("The pass key is")
            if depth == 0.0:  # no filler before the key line
                assert at == len(TASK) + 2
            if depth == 1.0:  # no filler after it
                assert text[at:].startswith(f"The pass key is {trial.key}. Remember it. {trial.key} is the pass "
                                            f"key.\n\n{QUESTION}")
            if depth == 0.5:
                assert 0.3 < at / len(text) < 0.7
    keys = {builder.trial(400, 0.5, i, seed=1, digits=5).key for i in range(20)}
    assert len(keys) > 15 and keys == {builder.trial(400, 0.5, i, seed=1, digits=5).key for i in range(20)}


def test_teacher_forcing_equals_greedy_generate(tiny_model: Path, tok) -> None:
    import torch

    from ropectl.eval.tasks.passkey.prompt import PromptBuilder, Trial

    model = load(tiny_model)
    builder = PromptBuilder(tok, 400)
    trials = [builder.trial(n, d, i, seed=3, digits=5) for n in (300, 400) for d in (0.2, 0.8) for i in range(2)]
    checked_success = 0
    for trial in trials:
        generated = greedy_generate(model, trial.ids[:-trial.answer_len], trial.answer_len)
        [outcome] = score_trials(model, [trial], torch.device("cpu"))
        assert outcome.success == (generated == trial.ids[-trial.answer_len:])
        assert outcome.predicted[0] == generated[0]  # the first step is the same argmax either way
        # With the model's own greedy output as the answer, teacher forcing must call it a success ...
        forced = Trial(trial.length, trial.depth, 0, "", trial.ids[:-trial.answer_len] + generated,
                       trial.answer_len, trial.key_at)
        [mine] = score_trials(model, [forced], torch.device("cpu"))
        assert mine.success and mine.predicted == generated
        checked_success += 1
        # ... and a one-token change at the last answer position must be a failure (negative control).
        wrong = (generated[-1] + 1) % model.config.vocab_size
        changed = Trial(trial.length, trial.depth, 0, "", forced.ids[:-1] + (wrong,), trial.answer_len, trial.key_at)
        [bad] = score_trials(model, [changed], torch.device("cpu"))
        assert not bad.success and bad.predicted == generated
    assert checked_success == len(trials)


def test_batched_trials_equal_batch_1(tiny_model: Path, tok) -> None:
    import torch

    from ropectl.eval.tasks.passkey.prompt import PromptBuilder

    model = load(tiny_model)
    builder = PromptBuilder(tok, 350)
    trials = [builder.trial(350, d, i, seed=5, digits=5) for d in (0.0, 0.5, 1.0) for i in range(2)]
    together = score_trials(model, trials, torch.device("cpu"))
    alone = [score_trials(model, [t], torch.device("cpu"))[0] for t in trials]
    for a, b in zip(together, alone):
        assert a.success == b.success and a.predicted == b.predicted
        assert a.answer_nll == pytest.approx(b.answer_nll, rel=1e-5)


@pytest.fixture(scope="module")
def sweep(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("passkey") / "out"
    spec = build_passkey_spec(model=str(tiny_model), methods=["none", "dynamic:2", "yarn:2"], lengths="280,400",
                              depths="0,0.5,1", trials=2, out=out, batch_tokens=900, dtype="fp32")
    return spec, run_passkey(spec)


def test_sweep_rows_outputs_and_sharing(sweep) -> None:
    spec, result = sweep
    assert len(result.rows) == 3 * 2 * 3 * 2
    by = {r.ident: r for r in result.rows}
    # Keys are paired across methods: the same (length, depth, trial) has the same key.
    for r in result.rows:
        assert by[("none", r.length, r.depth, r.trial)].key == r.key
    out = Path(spec.out)
    for name in ("passkey.json", "passkey.csv", "passkey-summary.json", "passkey.png", "passkey.jsonl"):
        assert (out / name).is_file()
    summary = json.loads((out / "passkey-summary.json").read_text())
    assert len(summary["table"]) == 3 * 2 * 3 and summary["meta"]["dtype_choice"] == "asked for"
    for a in result.by_length:
        hits = [r for r in result.rows if r.method == a.method and r.length == a.length]
        assert a.trials == 6 and a.correct == sum(r.success for r in hits)


def test_equal_signatures_share_forwards(tiny_model: Path, tmp_path: Path) -> None:
    from ropectl.eval.tasks.trials import plan_batches
    from ropectl.rope.methods import parse_spec
    from ropectl.runtime.model import method_states

    config = json.loads((tiny_model / "config.json").read_text())
    states = method_states(config, tuple(parse_spec(m) for m in ("none", "dynamic:2", "yarn:2")))
    units = [(n, d, i) for n in (200, 400) for d in (0.5,) for i in range(3)]
    batches = plan_batches(states, units, set(), 10_000)
    shared = [(s.label, tuple(labels), len(todo)) for s, labels, todo in batches]
    assert ("none", ("none", "dynamic:2"), 3) in shared  # dynamic equals none within the trained context (256)
    assert sum(len(todo) for _, _, todo in batches) == 3 * (2 + 3)  # 200: 2 groups, 400: 3


def test_resume_runs_nothing_new(sweep) -> None:
    spec, result = sweep
    again = run_passkey(spec.with_(resume=True))
    assert again.meta["new_trials"] == 0 and [r.to_dict() for r in again.rows] == [r.to_dict() for r in result.rows]
    with pytest.raises(Exception, match="different run"):
        run_passkey(spec.with_(resume=True, seed=7))


@pytest.mark.parametrize(("args", "words"), [
    (["--depths", "0.5,1.5"], "depth 1.5 is outside [0, 1]"),
    (["--depths", "-0.1"], "outside [0, 1]"),
    (["--samples", "0"], "--samples must be at least 1"),
    (["--trials", "2"], "--trials is now --samples"),  # the old spelling
    (["-l", "64"], "length 64 is too short for a passkey prompt"),
    (["-l", "300", "--key-digits", "30"], "too short for a passkey prompt with a 30-digit key"),
])
def test_bad_input_is_one_line(isolated, tiny_model: Path, args: list[str], words: str) -> None:
    result = runner.invoke(app, ["eval-passkey", str(tiny_model), "-m", "none", "-o", "out", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Fix:" in lines[0]
    assert not Path("out").exists()  # nothing written


def test_cli_table_and_json(isolated, tiny_model: Path) -> None:
    result = runner.invoke(app, ["eval-passkey", str(tiny_model), "-m", "none", "-m", "ntk:2", "-l", "300",
                                 "--depths", "0.5", "--json", "-o", "out"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert {(a["method"], a["length"]) for a in data["by_length"]} == {("none", 300), ("ntk:2", 300)}
    table = runner.invoke(app, ["eval-passkey", str(tiny_model), "-m", "none", "-l", "300", "--depths", "0.5",
                                "-o", "out2"])
    assert table.exit_code == 0 and "passkey retrieval" in table.stdout and "all" in table.stdout


@pytest.mark.slow
def test_the_printed_resume_line_runs(tiny_model: Path, tmp_path: Path) -> None:
    """Ctrl-C after the first logged trials: the "resume with" line, run as printed, finishes the sweep."""
    import shlex
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3]), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "ROPECTL_TEST_PAUSE_AFTER_CELLS": "1"}
    args = [sys.executable, "-m", "ropectl", "eval-passkey", str(tiny_model), "-m", "none", "-m", "ntk:2",
            "-l", "300,400", "-n", "2", "-o", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=default_sigint)
    log = out / "passkey.jsonl"
    while proc.poll() is None and not (log.is_file() and log.read_bytes().endswith(b"\n")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    line = next(ln for ln in err.splitlines() if "resume with: " in ln)
    argv = shlex.split(line.split("resume with: ", 1)[1])
    assert argv[:2] == ["ropectl", "eval-passkey"] and "--resume" in argv
    resumed = runner.invoke(app, [*argv[1:], "--json"], env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["meta"]["new_trials"] > 0


@pytest.mark.slow
def test_one_writer_per_out_and_sigterm_keeps_trials(tiny_model: Path, tmp_path: Path) -> None:
    """As eval-ppl: a second run into a busy --out gets one line; SIGTERM ends like Ctrl-C but exits 143."""
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3]), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    log = out / "passkey.jsonl"
    proc = paused_run(["eval-passkey", str(tiny_model), "-m", "none", "-m", "ntk:2", "-l", "300,400", "-n", "2", "-o",
                       str(out)], log, env)
    try:
        assert_busy(runner.invoke(app, ["eval-passkey", str(tiny_model), "-l", "300", "-o", str(out), "--resume"],
                                  env={"XDG_CACHE_HOME": str(tmp_path / "cache")}), proc.pid)
    finally:
        err = terminate(proc)
    argv = resume_argv(proc, err, out, "eval-passkey")
    assert len(log.read_text().splitlines()) >= 1
    resumed = runner.invoke(app, [*argv[1:], "--json"], env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["meta"]["new_trials"] > 0
    assert not (out / ".ropectl.lock").exists()


def test_non_finite_answer_nll_is_written_as_strict_json(tmp_path: Path) -> None:
    import math

    from ropectl.eval.tasks.passkey.results import JSON, LOG, Row, append_rows, read_rows, write_outputs

    bad = Row("m", "none", 300, 0.5, 0, "12345", False, float("inf"), "9", 120)
    good = Row("m", "none", 300, 0.5, 1, "67890", True, 0.25, "67890", 140)  # control: a finite loss stays a number
    append_rows(tmp_path, [bad, good])
    lines = [strict(line) for line in (tmp_path / LOG).read_text(encoding="utf-8").splitlines()]
    assert [line["answer_nll"] for line in lines] == [None, 0.25]
    back = sorted(read_rows(tmp_path), key=lambda r: r.trial)
    assert len(back) == 2 and math.isnan(back[0].answer_nll) and back[1] == good
    write_outputs(tmp_path, back, {"meta": {}})
    assert [r["answer_nll"] for r in strict((tmp_path / JSON).read_text(encoding="utf-8"))["results"]] == [None, 0.25]


def score_trials(model, trials, device):
    """Passkey outcomes from the transformers engine's batched teacher forcing on ``model``."""
    from ropectl.eval.engines.hf.forward import teacher_forced
    from ropectl.eval.tasks.passkey.score import outcomes

    got = teacher_forced(model, [list(t.ids) for t in trials], [t.answer_len for t in trials], device)
    return outcomes(trials, [(g.argmax, g.nll) for g in got])
