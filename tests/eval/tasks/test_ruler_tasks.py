"""eval-tasks' RULER-style generators: exact lengths, seeded, and answers checked by parsing the prompt text
independently (needles, variable chains, word counts). Scoring against transformers' generate: test_ruler_scoring."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from ropectl.eval.tasks.ruler.build import SLACK
from tests.helpers.ruler_trials import TASKS, trials_for

NEEDLE = re.compile(r"One of the special magic (\w+) for (\S+) is: (\S+)\.")
QUESTION = re.compile(r"What (?:are all|is) the special magic \w+ for (.+?) mentioned in the provided text\?")


def expected_answers(task: str, prompt: str) -> list[str]:
    """The answer as a reader of the prompt finds it, written apart from the generators."""
    if task.startswith("niah"):
        needles = NEEDLE.findall(prompt)
        query = QUESTION.findall(prompt)[-1]
        keys = re.split(r", and |, ", query)
        return [v for k in keys for _, key, v in needles if key == k]
    if task == "vt":
        value = re.search(r"assigned the value (\d+) in the text above", prompt).group(1)
        holds = {value}
        for a, b in re.findall(r"VAR (\w+) = (?:VAR )?(\w+)", prompt):  # chain statements come in order
            if b in holds:
                holds.add(a)
        return sorted(holds - {value})
    if task == "passkey":
        return re.findall(r"The pass key is (\d+)\. Remember it", prompt)
    if task == "cwe":
        listed = prompt.rsplit("Memorize the ones that appear most often.\n", 1)[1].split("\nQuestion")[0]
        counts = Counter(re.findall(r"\d+\. ([a-z]+)(?= \d|$)", listed))
        top = counts.most_common()
        assert top[9][1] > top[10][1], "the 10 common words are not strictly the most frequent"
        return sorted(w for w, _ in top[:10])
    assert task == "fwe"
    text = prompt.split("coded words. ", 1)[1].split("\nQuestion")[0]
    counts = Counter(w for w in text.split() if w != "...")
    top = counts.most_common()
    assert top[2][1] > top[3][1], "the 3 frequent words are not strictly the most frequent"
    return sorted(w for w, _ in top[:3])


@pytest.mark.slow
def test_generators_exact_seeded_and_answers_found_by_reading_the_prompt(smol_tok) -> None:
    trials = trials_for(smol_tok, TASKS, "1500,3000", samples=2)
    again = trials_for(smol_tok, TASKS, "1500,3000", samples=2)
    other = trials_for(smol_tok, TASKS, "1500", samples=1, seed=1)
    assert len(trials) == len(TASKS) * 2 * 2
    for (length, task, index), t in trials.items():
        assert len(t.ids) == length - SLACK and t.length == length and t.task == task and t.index == index
        assert again[(length, task, index)] == t  # seeded: the same trial every time
        prompt = smol_tok.decode(list(t.ids[:t.prompt_len]))
        answer = t.ids[t.prompt_len:]
        for ref, (start, end) in zip(t.references, t.spans):
            assert smol_tok.decode(list(answer[start:end])).strip() == ref
        wanted = expected_answers(task, prompt)
        got = list(t.references)
        assert sorted(got) == sorted(wanted), (task, got, wanted)
        if task.startswith("niah"):  # each needle once: the question has one answer
            assert all(prompt.count(f"is: {v}.") == 1 for v in got)
        if task in ("niah_single_1", "niah_single_2") or task == "niah_multikey_1":
            assert len(got) == 1 and got[0].isdigit() and len(got[0]) == 7
    assert any(other[(1500, task, 0)].ids != trials[(1500, task, 0)].ids for task in TASKS)


def test_groups_and_unknown_names() -> None:
    from ropectl.errors import UsageError
    from ropectl.eval.tasks.ruler import resolve_tasks

    assert resolve_tasks("ruler") == tuple(TASKS[:-1])
    assert resolve_tasks("niah_single,vt,niah_single_2") == ("niah_single_1", "niah_single_2", "niah_single_3", "vt")
    with pytest.raises(UsageError, match="unknown task 'needle'"):
        resolve_tasks("needle")


def test_sweep_outputs_statistics_and_resume(tiny_model: Path, tmp_path: Path) -> None:
    import json

    from ropectl.eval.tasks.ruler.runner import run_tasks
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec

    out = tmp_path / "out"
    spec = build_tasks_spec(model=str(tiny_model), tasks="niah_single_1,passkey", methods=["none", "yarn:2"],
                            lengths="700,900", samples=3, out=out, dtype="fp32", batch_tokens=2000)
    result = run_tasks(spec)
    assert len(result.rows) == 2 * 2 * 2 * 3
    for name in ("tasks.json", "tasks.csv", "tasks-summary.json", "tasks.jsonl", "tasks.png"):
        assert (out / name).is_file()
    summary = json.loads((out / "tasks-summary.json").read_text())
    for cell in summary["table"]:
        mine = [r.score for r in result.rows if (r.task, r.method, r.length) == (cell["task"], cell["method"],
                                                                                  cell["length"])]
        if cell["task"] != "average":
            assert cell["mean"] == pytest.approx(sum(mine) / len(mine)) and cell["trials"] == 3
        assert cell["lo"] <= cell["mean"] <= cell["hi"]
    assert {(c["task"], c["length"]) for c in summary["comparisons"]} == {
        (t, n) for t in ("niah_single_1", "passkey", "average") for n in (700, 900)}
    assert set(summary["effective_length"]) >= {"threshold", "none", "yarn:2"}
    again = run_tasks(spec.with_(resume=True))
    assert again.meta["new_trials"] == 0 and len(again.rows) == len(result.rows)


@pytest.mark.parametrize(("args", "words"), [
    (["--task", "niah_single_1", "-l", "64"], "too short for task niah_single_1"),
    (["--task", "needles"], "unknown task 'needles'"),
    (["--samples", "0"], "--samples must be at least 1"),
    (["--threshold", "2"], "--threshold must be in (0, 1]"),
])
def test_bad_input_is_one_line(isolated, tiny_model: Path, args: list[str], words: str) -> None:
    from tests.helpers.cli import one_line

    one_line(["eval-tasks", str(tiny_model), "-m", "none", "--dtype", "fp32", *args], words)


def test_a_haystack_with_too_few_words_for_cwe_is_one_line(isolated, tiny_model: Path) -> None:
    """RULER's solved cwe example alone takes 20 distinct words below 4k: a corpus of 5 words cannot hold it.
    Control: a haystack of 20 words builds the prompt (character tokens, so no model is needed)."""
    import random

    from ropectl.eval.tasks.ruler.cwe import make
    from ropectl.eval.tasks.ruler.haystack import Haystack
    from tests.helpers.cli import one_line

    corpus = isolated / "few-words"
    corpus.mkdir()
    (corpus / "doc.txt").write_text(". ".join(["alpha beta gamma delta omega"] * 400))
    one_line(["eval-tasks", str(tiny_model), "-m", "none", "--dtype", "fp32", "-l", "400", "-n", "1", "--task", "cwe",
              "--dataset", str(corpus)], "cwe needs at least 20 distinct words", "has 5", "--dataset")
    words = tuple(sorted(f"w{chr(97 + i)}x" for i in range(20)))
    assert make(random.Random(0), Haystack(("a sentence.",), words), 400, list).head


def test_cli_table_and_json(isolated, tiny_model: Path) -> None:
    import json

    from typer.testing import CliRunner

    from ropectl.cli.app import app

    args = ["eval-tasks", str(tiny_model), "--task", "passkey,vt", "-m", "none", "-m", "yarn:2", "-l", "700",
            "-n", "2", "--dtype", "fp32"]
    table = CliRunner().invoke(app, [*args, "-o", "a"])
    assert table.exit_code == 0, table.output
    assert "long-context tasks" in table.stdout and "effective length" in table.stdout
    assert "average" in table.stdout and "[" in table.stdout  # intervals shown
    # 2 trials never print a zero-width interval (the old "100% [100%, 100%]"): 0/2 is [0%, 66%], 2/2 [34%, 100%]
    assert not re.search(r"(\d+)% \[\1%, \1%\]", table.stdout), table.stdout
    data = json.loads(CliRunner().invoke(app, [*args, "-o", "b", "--json"]).stdout)
    assert data["meta"]["tasks"] == ["passkey", "vt"] and len(data["table"]) == 2 * 3
    assert all(c["hi"] - c["lo"] > 0.3 for c in data["table"])
    assert all(c["hi"] - c["lo"] > 0.3 for c in data["comparisons"])
    assert set(data["effective_length"]) == {"none", "yarn:2"}
