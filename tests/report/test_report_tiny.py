"""``ropectl report`` end to end on tiny seeded Llamas, one test per branch, with answers known by construction.

The base claims 2k; extensions are written by ``ropectl patch`` (ntk:2 claims 4k, ntk:1.5 claims 3k). The tasks
run on the ``claims`` engine (tests/helpers/report_engine.py): a trial is answered exactly when it fits the claimed
context, so the scores are known; PPL is the transformers engine's own forward on the retention text.
- reached: ntk:2 at 4k, 25 samples per length (25 / (25 + z^2) = 0.867 >= 0.85), retention passing;
- not reached: ntk:1.5 scores 0 at 4k: the ratio's upper bound is far below 0.85;
- not determined: 2 samples per length, which cannot count (22 is the least, test_rules);
- each bad input: one line, a non-zero exit, no card folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ropectl.cli.app import app
from tests.helpers.cli import one_line, runner
from tests.helpers.eval_data import add_char_tokenizer, write_corpus
from tests.helpers.report_engine import MODULE, claims_env, tiny_base

KEYS = {"schema", "verdict", "models", "target", "trained_context", "reference_length", "lengths", "confidence",
        "samples", "reference_samples", "seed", "tasks", "effective_length", "ruler_absolute", "retention",
        "ppl_at_target", "plots"}
RUN = ["-t", "4k", "--engine", "claims", "-T", "niah_single_1,passkey", "--docs", "3"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    with claims_env(tmp_path_factory.mktemp("report")) as root:
        yield root


@pytest.fixture(scope="module")
def models(env: Path) -> dict[str, Path]:
    base = tiny_base(env / "base", 2048)
    out = {"base": base}
    for name, factor in (("four", "2"), ("three", "1.5")):
        result = runner.invoke(app, ["patch", str(base), "-m", "ntk", "-f", factor, "-o", str(env / name)])
        assert result.exit_code == 0, result.output
        out[name] = env / name
    return out


def report(models: dict[str, Path], ext: str, out: Path, *extra: str) -> dict:
    result = runner.invoke(app, ["report", str(models["base"]), str(models[ext]), *RUN, "-o", str(out), *extra,
                                 "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_reached(models: dict[str, Path], env: Path) -> None:
    card = report(models, "four", env / "reached", "-n", "25")
    assert card["verdict"]["status"] == "reached", card["verdict"]
    assert set(card) - {"out"} == KEYS
    eff = card["effective_length"]
    assert (eff["length"], eff["determined"]) == (4096, True)
    assert [r["status"] for r in eff["by_length"]] == ["counts"] * 3 and card["lengths"] == [2048, 3072, 4096]
    assert card["tasks"]["kept"] == ["niah_single_1", "passkey"] and card["reference_length"] == 512
    assert eff["by_length"][-1]["lo"] == pytest.approx(25 / (25 + 1.959963984540054 ** 2), abs=1e-9)
    assert [r["base"] for r in eff["by_length"]] == [None] * 3  # the base runs at the reference length only
    assert card["retention"]["retained"] is True and card["retention"]["dataset"] == "python-docs"
    assert card["ppl_at_target"]["length"] == 4096 and card["ruler_absolute"]["length"] == 4096
    for name in ("EXTENSION.md", "extension.json", "score-ratio.png", "ppl.png"):
        assert (env / "reached" / name).is_file(), name
    assert json.loads((env / "reached" / "extension.json").read_text())["verdict"] == card["verdict"]
    assert "**Verdict: reached" in (env / "reached" / "EXTENSION.md").read_text()


def test_not_reached_names_the_criterion(models: dict[str, Path], env: Path) -> None:
    card = report(models, "three", env / "broken", "-n", "6")
    v = card["verdict"]
    assert v["status"] == "not reached" and v["failed"] == ["effective length"], v
    assert "at 4k the score ratio's upper bound" in v["line"] and "below 0.85" in v["line"]
    assert card["effective_length"]["by_length"][-1]["status"] == "fails"


def test_not_determined_says_how_many_samples(models: dict[str, Path], env: Path) -> None:
    card = report(models, "four", env / "few", "-n", "2")
    v = card["verdict"]
    assert v["status"] == "not determined" and v["samples_to_decide"] == 22, v  # 0.85 z^2 / 0.15 = 21.77
    assert "about 22 samples per length would decide it" in v["line"]
    assert card["effective_length"]["by_length"][0]["status"] == "undecided"


def test_different_tokenizers_are_refused(models: dict[str, Path], env: Path) -> None:
    other = Path(shutil.copytree(models["four"], env / "other-tok"))
    add_char_tokenizer(other, bos=False)
    one_line(["report", str(models["base"]), str(other), *RUN, "-o", str(env / "x1")], "different tokenizers")
    assert not (env / "x1").exists()


def test_target_within_the_trained_context_is_refused(models: dict[str, Path], env: Path) -> None:
    one_line(["report", str(models["base"]), str(models["four"]), *RUN, "-t", "2k", "-o", str(env / "x2")],
             "at or below BASE's trained context 2k")
    assert not (env / "x2").exists()


def test_retention_on_the_finetune_data_is_refused(models: dict[str, Path], env: Path) -> None:
    corpus = write_corpus(env / "plays", [3000, 3000, 3000])
    tuned = Path(shutil.copytree(models["four"], env / "tuned"))
    config = json.loads((tuned / "config.json").read_text())
    config.setdefault("ropectl", {})["finetune"] = {"data": str(corpus), "held_out": ["doc02.txt"], "train_docs": 2}
    (tuned / "config.json").write_text(json.dumps(config))
    one_line(["report", str(models["base"]), str(tuned), *RUN, "--retention-dataset", str(corpus), "-o",
              str(env / "x3")], "is the data EXTENDED was fine-tuned on", "2 of the 3 retention documents")
    assert not (env / "x3").exists()


def test_budget_below_one_sample_is_refused(models: dict[str, Path], env: Path) -> None:
    line = one_line(["report", str(models["base"]), str(models["four"]), *RUN, "--budget", "0.0001", "-o",
                     str(env / "x4")], "too small for one sample per length", "needs at least")
    assert "min" in line
    assert not (env / "x4").exists()


def test_sigterm_then_resume_equals_an_uninterrupted_report(models: dict[str, Path], env: Path) -> None:
    """SIGTERM inside the base's sweep keeps its trials and prints the command that resumes the whole report; that
    command, run as printed, gives the card an uninterrupted report gives (the same trials, so exactly equal)."""
    import os

    from tests.helpers.sweeps import paused_run, resume_argv, terminate

    args = ["report", str(models["base"]), str(models["four"]), *RUN, "-n", "3"]
    whole = report(models, "four", env / "whole", "-n", "3")
    out = env / "stopped"
    penv = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "ROPECTL_EVAL_ENGINES": MODULE,
            "XDG_CACHE_HOME": str(env / "cache")}
    proc = paused_run([*args, "-o", str(out)], out / "base" / "tasks" / "tasks.jsonl", penv)
    argv = resume_argv(proc, terminate(proc), out, "report")
    refused = runner.invoke(app, [*args, "-o", str(out)])  # without --resume the folder is not reused silently
    assert refused.exit_code != 0 and "pass --resume" in refused.output
    resumed = runner.invoke(app, [*argv[1:], "--json"])
    assert resumed.exit_code == 0, resumed.output
    card = json.loads(resumed.stdout)
    for key in ("verdict", "effective_length", "retention", "tasks", "lengths", "ppl_at_target"):
        assert card[key] == whole[key], key
