"""Bad input: one line naming the problem and the fix, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import one_line


@pytest.mark.parametrize(("extra", "needles"), [
    (["-m", "yarn:4", "--pose", "--full"], ["--pose and --full"]),
    (["-m", "dynamic:4"], ["inference-time"]),
    (["-m", "linear", "-t", "32"], ["not beyond the trained context"]),
    (["-m", "yarn:4", "--merge"], ["--merge", "--lora"]),
    (["-m", "yarn:4", "--lora-alpha", "8"], ["--lora-alpha"]),
    (["-m", "yarn:4", "--train-embeddings-norms"], ["--train-embeddings-norms"]),
    (["-m", "yarn:4", "--full", "--window", "32"], ["--window"]),
    (["-m", "yarn:4", "--window", "256"], ["not shorter than the target"]),
    (["-m", "yarn:4", "--context-parallel", "2"], ["context parallelism"]),
    (["-m", "yarn:4", "--batch-tokens", "100"], ["--batch-tokens"]),
    (["-m", "yarn:4", "--dataset", "no-such-corpus.txt"], ["no such file"]),
    (["-m", "yarn:4", "--dataset", "nobody/no-such-dataset"], ["--max-docs"]),
    (["-m", "yarn:4", "--dataset", "nobody/no-such-dataset", "--max-docs", "10"], ["unreachable dataset"]),
    (["-m", "yarn:4", "--held-out", "8"], ["--held-out"]),
    (["-m", "yarn:4", "--short-mix", "1"], ["--short-mix", "fraction"]),
    (["-m", "yarn:4", "--short-mix", "-0.2"], ["--short-mix", "fraction"]),
    (["-m", "yarn:4", "--data", "corpus/"], ["--data is now --dataset", "--dataset corpus/"]),  # the old spelling
])
def test_refused_in_one_line_with_nothing_written(ft_model: Path, ft_corpus: Path, isolated: Path, extra: list[str],
                                                  needles: list[str]) -> None:
    args = ["finetune", str(ft_model), "--dataset", str(ft_corpus), "-o", str(isolated / "out"), *extra]
    one_line(args, *needles)
    assert not (isolated / "out").exists() and not (isolated / "out.run").exists()


def test_too_little_data_for_the_window(ft_model: Path, isolated: Path) -> None:
    (isolated / "tiny").mkdir()
    for i in range(3):
        (isolated / "tiny" / f"d{i}.txt").write_text("the king " * 5)
    one_line(["finetune", str(ft_model), "-m", "yarn:4", "--full", "--dataset", str(isolated / "tiny"), "--held-out", "1",
              "-o", str(isolated / "out")], "fewer than one 256-token training span")
    assert not (isolated / "out").exists()


def test_existing_output_and_foreign_resume_folder(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    (isolated / "out").mkdir()
    (isolated / "out" / "mine.txt").write_text("user file")
    base = ["finetune", str(ft_model), "-m", "yarn:4", "--dataset", str(ft_corpus)]
    one_line([*base, "-o", str(isolated / "out")], "exists and is not empty")
    assert (isolated / "out" / "mine.txt").read_text() == "user file"
    one_line([*base, "-o", str(isolated / "new"), "--resume"], "not a finetune run folder")  # no new.run to resume
    assert not (isolated / "new").exists() and not (isolated / "new.run").exists()


def test_dry_run_prints_the_plan_and_writes_nothing(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    import json

    from typer.testing import CliRunner

    from ropectl.cli.app import app

    result = CliRunner().invoke(app, ["finetune", str(ft_model), "-m", "yarn:4", "--dataset", str(ft_corpus), "-o",
                                      str(isolated / "out"), "--dry-run", "--json", "--steps", "10"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["plan"]["tokens_per_step"] == 8 * 64 and plan["plan"]["total_tokens"] == 10 * 8 * 64
    assert plan["memory_bytes"]["pose"] < plan["memory_bytes"]["full"]
    assert not (isolated / "out").exists() and not (isolated / "out.run").exists()


def test_named_held_out_documents(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    import json

    from typer.testing import CliRunner

    from ropectl.cli.app import app

    base = ["finetune", str(ft_model), "-m", "yarn:4", "--dataset", str(ft_corpus), "-o", str(isolated / "out"),
            "--dry-run", "--json"]
    result = CliRunner().invoke(app, [*base, "--held-out", "doc05.txt,doc07.txt"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["held_out"] == ["doc05.txt", "doc07.txt"]
    one_line([*base, "--held-out", "doc05.txt,hamlet"], "no document 'hamlet'")


def test_lora_without_peft(ft_model: Path, ft_corpus: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    one_line(["finetune", str(ft_model), "-m", "yarn:4", "--dataset", str(ft_corpus), "-o", str(isolated / "out"),
              "--lora", "4"], "peft is not installed", "ropectl[finetune]")
    assert not (isolated / "out").exists()
