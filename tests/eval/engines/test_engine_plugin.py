"""An evaluation engine registered by plugin reaches the CLI: tests/helpers/toy_engine.py (the walk-through of
docs/contributing/add-an-engine.md), named in ROPECTL_EVAL_ENGINES, runs eval-ppl, eval-tasks and recommend through
`--engine toy`. Its three scoring calls are an independent computation (the model's full logits, greedy decoding
without a cache), so its results are checked against the transformers engine's: the oracle is the other engine."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ropectl.cli.app import app
from ropectl.eval import engines
from ropectl.recommend import run as recommend_run
from tests.helpers.cli import one_line, runner

PLUGIN = "tests.helpers.toy_engine"
SIZES = {"candidates": ("yarn",), "grid": (1.0,), "inside": ["64"], "docs": 2, "tasks": "niah_single_1",
         "samples": 2, "task_at": None}


@pytest.fixture()
def plugin(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(engines.ENV_MODULES, PLUGIN)
    return isolated


def _json(args: list[str]) -> dict:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_unknown_until_registered(tiny_model: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: without the plugin named, --engine toy is refused like any unknown name."""
    monkeypatch.setattr(engines, "ENGINES", {k: v for k, v in engines.ENGINES.items() if k != "toy"})
    one_line(["eval-ppl", str(tiny_model), "-l", "64", "--engine", "toy"], "unknown engine 'toy'", code=2)


def test_plugin_is_listed_and_its_options_checked(tiny_model: Path, plugin: Path) -> None:
    assert "toy" in engines.engine_names()
    assert engines.get_engine("toy").cheap_method_switch  # inherited from transformers: recommend may screen
    one_line(["eval-ppl", str(tiny_model), "-l", "64", "--engine", "toy", "--tensor-parallel-size", "2"],
             "--tensor-parallel-size", "vllm", code=2)
    env = {**os.environ, "COLUMNS": "300", "PYTHONPATH": str(Path(__file__).parents[3])}
    shown = subprocess.run([sys.executable, "-m", "ropectl", "recommend", "--help"], capture_output=True, text=True,
                           env=env, check=True).stdout  # help is built at import: a fresh process with the plugin
    shown = " ".join(shown.split())  # where the help wraps is the terminal's business, not the plugin's
    assert "transformers or vllm or llama.cpp or toy" in shown and "llama.cpp, toy" in shown  # --engine, --serve-with


def test_eval_ppl_on_the_toy_engine(tiny_model: Path, tiny_corpus: Path, plugin: Path) -> None:
    args = ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-m", "none", "-m", "yarn:2", "-l", "64,256",
            "--dtype", "fp32", "--json"]
    toy = _json([*args, "--engine", "toy", "-o", "toy"])
    hf = _json([*args, "-o", "hf"])
    assert toy["meta"]["engine"]["name"] == "toy" and hf["meta"]["engine"]["name"] == "transformers"
    assert json.loads(Path("toy/run.json").read_text())["identity"]["engine"] == "toy"  # other numbers: another run
    assert "engine" not in json.loads(Path("hf/run.json").read_text())["identity"]  # transformers' ids unchanged
    mine = {(c["method"], c["length"], c["doc"]): c for c in map(json.loads, open("toy/results.jsonl"))}
    theirs = {(c["method"], c["length"], c["doc"]): c for c in map(json.loads, open("hf/results.jsonl"))}
    assert mine.keys() == theirs.keys() and len(mine) >= 4
    for key, cell in mine.items():
        assert cell["tokens"] == theirs[key]["tokens"]
        assert cell["nll_sum"] == pytest.approx(theirs[key]["nll_sum"], rel=1e-4)


def test_eval_tasks_on_the_toy_engine(tiny_model: Path, plugin: Path) -> None:
    args = ["eval-tasks", str(tiny_model), "--task", "niah_single_1", "-m", "none", "-m", "yarn:2", "-l", "400",
            "--samples", "2", "--dtype", "fp32", "--json"]
    _json([*args, "--engine", "toy", "-o", "toy"])
    _json([*args, "-o", "hf"])
    mine = [json.loads(line) for line in open("toy/tasks.jsonl")]
    theirs = {(r["task"], r["method"], r["length"], r["trial"]): r for r in map(json.loads, open("hf/tasks.jsonl"))}
    assert len(mine) == len(theirs) == 4
    for row in mine:
        other = theirs[(row["task"], row["method"], row["length"], row["trial"])]
        assert (row["predicted"], row["score"]) == (other["predicted"], other["score"])
        assert row["answer_nll"] == pytest.approx(other["answer_nll"], rel=1e-4)


def test_recommend_on_the_toy_engine(tiny_model: Path, plugin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """recommend runs its screen, PPL and task sweeps on the toy engine, and --serve-with takes it."""
    monkeypatch.setattr(recommend_run, "GENERIC", SIZES)
    args = ["recommend", str(tiny_model), "-t", "512", "--dtype", "fp32", "--device", "cpu", "--json"]
    toy = _json([*args, "--engine", "toy", "--serve-with", "transformers,toy", "-o", "toy"])
    hf = _json([*args, "--serve-with", "transformers", "-o", "hf"])
    assert toy["serve_with"] == ["transformers", "toy"]
    assert json.loads(Path("toy/ppl/summary.json").read_text())["meta"]["engine"]["name"] == "toy"
    assert Path("toy/ppl/results.jsonl").read_text().count('"length": 64') >= 4  # the screen ran at 64 tokens
    assert (toy["winner"], toy["leader"]) == (hf["winner"], hf["leader"])
    ours = {e["method"]: e for e in toy["evidence"]}
    for e in hf["evidence"]:
        for key in ("ppl_target", "score"):
            if e[key] is None or (isinstance(e[key], float) and math.isnan(e[key])):
                assert ours[e["method"]][key] == e[key]
            else:
                assert ours[e["method"]][key] == pytest.approx(e[key], rel=1e-4)
