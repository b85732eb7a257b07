"""ropectl recommend: the rule on fixed results files, hand-checked, and the same answer every time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.recommend import load_ppl, load_tasks, recommend, screen
from tests.helpers.checkpoints import RECOMMEND_PPL, RECOMMEND_TARGET, RECOMMEND_TRAINED, write_recommend_results

runner = CliRunner()
TRAINED, TARGET = RECOMMEND_TRAINED, RECOMMEND_TARGET
write = write_recommend_results


def test_rule_by_hand(tmp_path: Path) -> None:
    ppl, tasks = write(tmp_path)
    result = recommend(load_ppl(ppl), load_tasks(tasks), TARGET)
    order = [e.method for e in result.evidence]
    # Eligible (<= 5% in window): none, yarn, ntk, dynamic. Tasks 20/20: yarn, dynamic -> lower PPL: dynamic.
    assert order == ["dynamic:2", "yarn:2", "ntk:2", "none", "linear:2"]
    linear = result.evidence[-1]
    assert not linear.eligible and "in-window regression +161.9% at 8192" in linear.note
    yarn = next(e for e in result.evidence if e.method == "yarn:2")
    assert yarn.regression == pytest.approx(20.9 / 20.0 - 1) and yarn.regression_at == 1024
    assert yarn.score == 1.0 and yarn.trials == 20
    # dynamic ties yarn on the tasks (20/20 each) but its PPL is lower on all 8 documents: separated, paired
    rivals = {r.method: r for r in result.rivals}
    assert not rivals["yarn:2"].score_p < 1 and rivals["yarn:2"].ppl_ratio == pytest.approx(22.4 / 22.5)
    assert rivals["yarn:2"].separated and rivals["yarn:2"].ppl_hi < 1 and rivals["yarn:2"].separated_by == ("ppl",)
    assert "tasks" in rivals["ntk:2"].separated_by
    # 10 discordant trials, all for dynamic: exact McNemar p = 2 / 2**10
    assert rivals["ntk:2"].score_p == pytest.approx(2 / 2**10) and rivals["ntk:2"].separated
    assert result.confident and result.leader == "dynamic:2"
    # A stricter limit drops yarn; without task results, the lowest PPL at the target leads (paired docs).
    strict = recommend(load_ppl(ppl), None, TARGET, max_regression=0.02)
    assert [e.method for e in strict.evidence][:3] == ["ntk:2", "dynamic:2", "none"] and strict.confident


def test_noise_is_not_crowned(tmp_path: Path) -> None:
    """Two trials and one document (the old demo's evidence): nothing separates, so the simplest ships."""
    ppl, tasks = write(tmp_path, trials=2, docs=1, passed={"none": 0, "yarn:2": 1, "dynamic:2": 1, "ntk:2": 0,
                                                           "linear:2": 2})
    result = recommend(load_ppl(ppl), load_tasks(tasks), TARGET)
    assert result.leader == "dynamic:2" and result.winner.method == "none" and not result.confident
    none = next(r for r in result.rivals if r.method == "none")
    assert not none.separated and none.score_p == 1.0 and none.docs == 1
    # Connor (1987) with p10 = 0.5, p01 = 0: (1.959964 sqrt(.5) + 0.841621 sqrt(.25))^2 / 0.25 = 13.06 -> 14
    assert none.trials_needed == 14


def test_cli_is_deterministic_and_prints_the_patch_commands(tmp_path: Path) -> None:
    ppl, tasks = write(tmp_path)
    args = ["recommend", "--target-length", "16k", "--ppl", str(ppl), "--tasks", str(tasks)]
    first, second = runner.invoke(app, args), runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    # a Hugging Face folder reaches every engine: dynamic (static in vLLM, absent in llama.cpp) is out, saying why
    assert "winner: yarn:2" in first.stdout and "not served as evaluated: vLLM: dynamic is static" in first.stdout
    assert "confidence: yarn:2 separates from every other eligible method" in first.stdout
    assert "ropectl patch ./my-llama -m yarn:2 -o my-llama-yarn2" in first.stdout
    assert "ropectl patch ./my-llama -m yarn:2 --emit vllm" in first.stdout
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert data["winner"] == "yarn:2" and len(data["commands"]) == 4 and data["confident"]
    # last, the line that measures what was written in those engines against transformers
    # (llama.cpp, which runs GGUF files, is left to a converted file: verify --gguf)
    assert data["commands"][-1] == ("# then check it in the serving engines: ropectl verify my-llama-yarn2 -t 16384 "
                                    "--engine transformers,vllm")
    assert data["serve_with"] == ["transformers", "vllm", "llama.cpp"]
    # served by transformers alone, dynamic wins, and no engine flags are offered for it
    only = runner.invoke(app, [*args, "--serve-with", "transformers", "--json"])
    data = json.loads(only.stdout)
    assert data["winner"] == "dynamic:2" and data["commands"] == ["ropectl patch ./my-llama -m dynamic:2 -o my-llama-dynamic2"]
    assert "dynamic:2 --emit llama.cpp" not in only.stdout


def test_cli_says_not_separable(tmp_path: Path) -> None:
    ppl, tasks = write(tmp_path, trials=2, docs=1, passed={"none": 0, "yarn:2": 1, "dynamic:2": 1, "ntk:2": 0,
                                                           "linear:2": 2})
    out = runner.invoke(app, ["recommend", "-t", "16k", "--ppl", str(ppl), "--tasks", str(tasks)]).stdout
    assert "confidence: not separable: yarn:2 (measured best)" in out and "winner: none" in out
    assert "about 14 trials to separate" in out


def _tied_tasks_ppl_apart(folder: Path, docs: int) -> tuple[Path, Path]:
    """none and yarn:2 tied on the tasks (2 trials, both pass) and equal in-window; at the target yarn:2's PPL is
    about 5 % lower on every document, by a per-token amount that differs a little from document to document."""
    import math

    ppl, tasks = folder / "ppl", folder / "tasks"
    ppl.mkdir(parents=True)
    tasks.mkdir(parents=True)
    lengths, methods = [4096, TARGET], ["none", "yarn:2"]
    meta = {"model": "./my-llama", "methods": methods, "lengths": lengths, "trained_context": TRAINED}
    cells = [{"method": m, "length": n, "doc": f"d{i}", "tokens": n,
              "nll_sum": n * (math.log(20.0) + 0.1 * i - (0.05 + 0.001 * (i % 3) if m == "yarn:2" and n == TARGET
                                                           else 0.0))}
             for m in methods for n in lengths for i in range(docs)]
    table = [{"method": m, "length": n, "ppl": math.exp(sum(c["nll_sum"] for c in cells if c["method"] == m
                                                            and c["length"] == n) / (n * docs))}
             for m in methods for n in lengths]
    (ppl / "summary.json").write_text(json.dumps({"meta": meta, "table": table}))
    (ppl / "results.json").write_text(json.dumps({"meta": meta, "results": cells}))
    rows = [{"task": "passkey", "method": m, "length": TARGET, "trial": i, "score": 1.0} for m in methods for i in (0, 1)]
    (tasks / "tasks.json").write_text(json.dumps({"meta": {}, "results": rows}))
    return ppl, tasks


def test_two_documents_do_not_separate_on_ppl_alone(tmp_path: Path) -> None:
    """The old demo: 2 trials that both pass and a PPL ratio from 2 documents (1 df) whose t interval excludes 1
    (p < 0.05) crowned a winner and printed "separated: tasks +0% [+0%, +0%]". Below MIN_DOCS = 6 documents the PPL
    ratio alone does not separate; the tied task trials get a real interval. Control: the same pattern on 8
    documents separates, and says it was the PPL ratio."""
    from ropectl.eval.stats import paired_log_ratio
    from ropectl.recommend import MIN_DOCS

    assert MIN_DOCS == 6
    ppl, tasks = _tied_tasks_ppl_apart(tmp_path / "two", docs=2)
    result = recommend(load_ppl(ppl), load_tasks(tasks), TARGET)
    rival = result.rivals[0]
    assert result.leader == "yarn:2" and result.winner.method == "none" and not result.confident
    assert rival.docs == 2 and rival.ppl_hi < 1 and rival.ppl_p < 0.05  # the interval alone would have crowned it
    assert not rival.separated and rival.separated_by == () and rival.docs_needed == MIN_DOCS
    # 2/2 against 2/2: Newcombe's interval, +-z^2 / (2 + z^2) = +-0.6576, never [+0%, +0%]
    assert (rival.score_lo, rival.score_hi) == (pytest.approx(-0.6576, abs=1e-4), pytest.approx(0.6576, abs=1e-4))
    out = runner.invoke(app, ["recommend", "-t", "16k", "--ppl", str(ppl), "--tasks", str(tasks)]).stdout
    assert "yarn:2 vs none: not separable: tasks +0% [-66%, +66%], p=1, n=2" in out
    assert "2 docs, fewer than 6: not separated on PPL (about 6 docs to separate)" in out and "winner: none" in out
    assert "+0% [+0%, +0%]" not in out

    ppl8, tasks8 = _tied_tasks_ppl_apart(tmp_path / "eight", docs=8)
    data = load_ppl(ppl8)
    control = recommend(data, load_tasks(tasks8), TARGET)
    assert control.winner.method == "yarn:2" and control.confident
    assert control.rivals[0].separated_by == ("ppl",) and control.rivals[0].docs == 8
    cells = {(c["method"], c["doc"]): c for c in data["cells"] if c["length"] == TARGET}
    docs = sorted({d for _, d in cells})
    direct = paired_log_ratio(*([cells[(m, d)]["nll_sum"] for d in docs] for m in ("yarn:2", "none")),
                              [cells[("none", d)]["tokens"] for d in docs])
    assert direct.separable and control.rivals[0].ppl_ratio == pytest.approx(direct.ratio)
    out = runner.invoke(app, ["recommend", "-t", "16k", "--ppl", str(ppl8), "--tasks", str(tasks8)]).stdout
    assert "yarn:2 vs none: separated by PPL ratio: tasks +0% [-66%, +66%]" in out and "winner: yarn:2" in out
    assert "fewer than 6" not in out


def test_help_states_the_minimum_documents() -> None:
    from ropectl.recommend import MIN_DOCS

    out = runner.invoke(app, ["recommend", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"}).stdout
    assert f"only on {MIN_DOCS} documents or more" in " ".join(out.replace("│", " ").split())


def test_a_gguf_never_ships_what_llama_cpp_lacks(tmp_path: Path) -> None:
    ppl, tasks = write(tmp_path)
    data = json.loads(runner.invoke(app, ["recommend", "model.gguf", "-t", "16k", "--ppl", str(ppl), "--tasks",
                                          str(tasks), "--json"]).stdout)
    assert data["serve_with"] == ["llama.cpp"] and data["winner"] == "yarn:2"
    dynamic = next(e for e in data["evidence"] if e["method"] == "dynamic:2")
    assert not dynamic["eligible"] and "llama.cpp has no dynamic NTK" in dynamic["note"]
    # written into the working folder, never beside the source
    assert data["commands"][0] == "ropectl patch model.gguf -m yarn:2 -o model-yarn2.gguf"
    bad = runner.invoke(app, ["recommend", "-t", "16k", "--ppl", str(ppl), "--serve-with", "tgi"])
    assert bad.exit_code != 0 and "unknown --serve-with engine 'tgi'" in bad.stderr and "Traceback" not in bad.stderr


def test_candidates_grid_skips_what_the_engines_lack() -> None:
    from ropectl.recommend.run import candidates

    methods, skipped = candidates(("yarn", "dynamic"), 1.25, (1.0, 1.5, 2.0), ("llama.cpp",))
    assert methods == ["none", "yarn:1.25", "yarn:1.875", "yarn:2.5"]
    assert set(skipped) == {"dynamic:1.25", "dynamic:1.875", "dynamic:2.5"}
    assert "llama.cpp has no dynamic NTK" in skipped["dynamic:2.5"]


def test_llama_cpp_command_printed_for_a_method_it_has() -> None:
    from ropectl.recommend import patch_commands

    assert patch_commands("m", "yarn:2")[-1] == "ropectl patch m -m yarn:2 --emit llama.cpp"


def test_none_wins_when_scaling_does_not_help(tmp_path: Path) -> None:
    ppl, _ = write(tmp_path)
    result = runner.invoke(app, ["recommend", "-t", "8k", "--ppl", str(ppl), "--json"])
    data = json.loads(result.stdout)
    assert data["winner"] == "none" and data["commands"] == []


@pytest.mark.parametrize(("args", "words"), [
    (["-t", "12k"], "no cell at --target-length 12288"),
    (["-t", "16k", "--tasks", "x"], "--tasks needs --ppl"),
    (["-t", "16k", "--max-regression", "-1"], "--max-regression must be 0 or more"),
    ([], "--target-length is required"),
])
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    ppl, _ = write(tmp_path)
    extra = ["--ppl", str(ppl)] if "--tasks" not in args else []
    result = runner.invoke(app, ["recommend", *extra, *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr


def test_missing_results_folder(tmp_path: Path) -> None:
    result = runner.invoke(app, ["recommend", "-t", "16k", "--ppl", str(tmp_path / "nope")])
    assert result.exit_code == 1 and "does not exist" in result.stderr and "eval-ppl" in result.stderr


def test_an_eval_passkey_folder_reads_as_the_task_passkey(tmp_path: Path) -> None:
    """--passkey (kept as an alias of --tasks) reads passkey.json: each (depth, trial) is one paired trial."""
    from ropectl.recommend import load_tasks

    rows = [{"method": m, "length": 16384, "depth": d, "trial": t, "success": m == "yarn:2" or d == 0.1}
            for m in ("none", "yarn:2") for d in (0.1, 0.9) for t in range(3)]
    (tmp_path / "passkey.json").write_text(json.dumps({"meta": {}, "results": rows}))
    data = load_tasks(tmp_path)
    none = sorted((r["trial"], r["score"]) for r in data["rows"] if r["method"] == "none")
    assert none == [(0, 1.0), (1, 1.0), (2, 1.0), (3, 0.0), (4, 0.0), (5, 0.0)]
    assert {r["task"] for r in data["rows"]} == {"passkey"}


def test_a_screened_method_is_reported_out_without_a_target_cell(tmp_path: Path) -> None:
    """recommend's own sweep skips the long forwards of a method its in-window screen ruled out: the results say so
    in meta["screened_out"], and the method is listed as out, with no PPL at the target. Control: a method missing
    its target cell for another reason (no such meta) is not invented."""
    ppl, tasks = write(tmp_path)
    data = load_ppl(ppl)
    data["table"] = [r for r in data["table"] if not (r["method"] == "linear:2" and r["length"] > 1024)]
    data["cells"] = [c for c in data["cells"] if not (c["method"] == "linear:2" and c["length"] > 1024)]
    unscreened = recommend(data, load_tasks(tasks), TARGET)
    assert "linear:2" not in [e.method for e in unscreened.evidence]
    data["meta"] = {**data["meta"], "screened_out": ["linear:2"]}
    result = recommend(data, load_tasks(tasks), TARGET)
    linear = result.evidence[-1]
    assert linear.method == "linear:2" and not linear.eligible and linear.ppl_target is None
    # RECOMMEND_PPL's 1k column, by hand: linear:2 / none - 1
    assert linear.regression == pytest.approx(RECOMMEND_PPL["linear:2"][0] / RECOMMEND_PPL["none"][0] - 1)
    assert linear.note.startswith("in-window regression") and linear.regression_at == 1024
    assert [e.method for e in result.evidence][:4] == [e.method for e in unscreened.evidence][:4]


def test_screen_by_hand() -> None:
    """The in-window screen on a hand-made table: 6 % worse is out, 4 % is not, none never, target cells ignored."""
    table = [{"method": m, "length": n, "ppl": v} for m, n, v in (
        ("none", 1024, 10.0), ("yarn:2", 1024, 10.4), ("linear:2", 1024, 10.6), ("ntk:2", 1024, 9.0),
        ("ntk:2", 16384, 99.0), ("none", 16384, 20.0))]
    ppl = {"meta": {"methods": ["none", "yarn:2", "linear:2", "ntk:2"], "trained_context": 8192}, "table": table}
    assert screen(ppl) == ("linear:2",)
    assert screen(ppl, max_regression=0.03) == ("yarn:2", "linear:2")
    assert screen(ppl, max_regression=0.10) == ()
