"""``ropectl search`` on the tiny char-tokenizer Llama (trained 256 tokens, searched for 512): the files it leaves,
reproducibility with a seed, resume, the refusals (one line, nothing written), and the written config as
transformers builds it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ropectl.rope.methods import parse_spec
from ropectl.search.output import run_search
from ropectl.search.run import SearchRequest
from tests.helpers.cli import one_line, runner
from tests.helpers.eval_data import write_corpus

pytest.importorskip("optuna")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("search-corpus"), [700] * 8)


def request(model: Path, corpus: Path, out: Path, **kw: object) -> SearchRequest:
    base = SearchRequest(model=str(model), target=512, space="yarn", out=out, trials=3, docs=2, held_out=2, samples=1,
                         dataset=str(corpus), dtype="fp32", device="cpu", grid=(1.0,))
    return replace(base, **kw)


def params(out: Path) -> list[tuple[str, dict, float | None]]:
    return [(t["state"], t["params"], t["fitness"]) for t in json.loads((out / "trials.json").read_text())]


def test_search_leaves_its_study_trials_report_and_model(tiny_model: Path, corpus: Path, isolated: Path) -> None:
    result = run_search(request(tiny_model, corpus, isolated / "out"))
    out, summary = result.out, result.summary
    assert {"study.db", "trials.json", "trials.csv", "reference.json", "search.json", "model"} <= {
        p.name for p in out.iterdir()}
    trials = json.loads((out / "trials.json").read_text())
    assert len(trials) == 3 and trials[0]["spec"] == "yarn:2,beta_fast=32,beta_slow=1,attention_factor=1.07"
    assert len((out / "trials.csv").read_text().splitlines()) == 4
    assert not set(summary["search_docs"]) & set(summary["held_out_docs"])  # held-out text is never searched
    assert summary["seed"] == 0 and len(summary["held_out_docs"]) == 2
    parse_spec(result.spec)  # best.spec is a method spec every command accepts
    # recommend's grid at target / trained; dynamic is out: vLLM, which serves a folder by default, runs it static
    assert set(summary["reference"]) == {"none", "yarn:2", "ntk:2", "linear:2"}
    written = json.loads((out / "model" / "config.json").read_text())
    assert written["rope_parameters"]["rope_type"] == parse_spec(result.spec).name


def test_same_seed_same_trials_and_resume_continues_the_study(tiny_model: Path, corpus: Path, isolated: Path) -> None:
    first = run_search(request(tiny_model, corpus, isolated / "a", trials=2, emit="vllm"))
    again = run_search(request(tiny_model, corpus, isolated / "b", trials=2, emit="vllm"))
    assert params(first.out) == params(again.out)  # the sampler, the split and the needles all follow --seed
    resumed = run_search(request(tiny_model, corpus, isolated / "a", trials=4, resume=True, emit="vllm"))
    rows = params(resumed.out)
    assert len(rows) == 4 and rows[:2] == params(again.out)  # the same study, two more trials
    assert "model" not in {p.name for p in first.out.iterdir()}  # --emit prints, writes no folder
    one_line(["search", str(tiny_model), "-t", "512", "--space", "ntk", "--resume", "-o", str(isolated / "a"),
              "--dataset", str(corpus), "--docs", "2", "--held-out", "2", "--dtype", "fp32"],
             "another search", "space")
    assert len(params(isolated / "a")) == 4  # the refused search added nothing


@pytest.mark.parametrize("stop", [0, 1])
def test_a_box_search_stopped_in_a_trial_resumes_to_the_uninterrupted_trials(tiny_model: Path, corpus: Path,
                                                                          isolated: Path, stop: int,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C inside trial ``stop`` (0: the closed form, queued first; 1: the sampler's first point), then --resume:
    the measured trials equal an uninterrupted search's with the same seed, the stopped one kept as failed. The
    control: the closed form is in the uninterrupted trials, so a resume that lost it (a stop in trial 0, not
    queued again) fails here."""
    import ropectl.search.optimize as optimize

    whole = run_search(request(tiny_model, corpus, isolated / "whole"))
    real, calls = optimize.measure, []

    def measure(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        calls.append(args[1])
        if len(calls) == stop + 1:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(optimize, "measure", measure)
    stopped = request(tiny_model, corpus, isolated / "part")
    with pytest.raises(KeyboardInterrupt):
        run_search(stopped)
    resumed = run_search(replace(stopped, resume=True))
    measured = [row for row in params(resumed.out) if row[0] != "fail"]
    assert measured == params(whole.out)
    assert [row[0] for row in params(resumed.out)].index("fail") == stop
    assert resumed.spec == whole.spec


@pytest.mark.parametrize(("args", "needle"), [
    (["--trials", "0"], "--trials"),
    (["--budget", "0"], "--budget"),
    (["--time", "30"], "--time is now --budget"),
    (["-t", "200"], "inside the trained context 256"),
    (["-t", "4k"], "documents of at least 4096 tokens"),
    (["--space", "longrope2"], "unknown search space"),
    (["--prune-at", "128"], "--prune-at 128"),
    (["--grid", "0.5"], "--grid"),
    (["--space", "longrope", "--sampler", "cmaes"], "--sampler has no meaning for --space longrope"),
    (["--space", "longrope", "--trials", "3"], "--trials has no meaning for --space longrope"),
    (["--space", "ntk", "--population", "4"], "--population has no meaning for --space ntk"),
    (["--space", "yarn", "--iterations", "2"], "--iterations has no meaning for --space yarn"),
])
def test_bad_input_one_line_nothing_written(tiny_model: Path, corpus: Path, isolated: Path, args: list[str],
                                            needle: str) -> None:
    base = ["search", str(tiny_model), "-t", "512", "-o", str(isolated / "out"), "--dataset", str(corpus), "--docs",
            "2", "--held-out", "2", "--dtype", "fp32"]
    one_line(base + args, needle)
    assert not (isolated / "out").exists()


def test_a_storage_that_cannot_open_is_one_line(tiny_model: Path, corpus: Path, isolated: Path) -> None:
    """sqlite in a folder that does not exist: what the database said, in one line (was 'unexpected
    OperationalError ... report it'); nothing written."""
    one_line(["search", str(tiny_model), "-t", "512", "-o", str(isolated / "out"), "--dataset", str(corpus), "--docs",
              "2", "--held-out", "2", "--dtype", "fp32", "--storage", f"sqlite:///{isolated}/missing/x.db"],
             "cannot open the study storage", "unable to open database file")
    assert not (isolated / "out").exists() and not (isolated / "missing").exists()


def test_force_takes_its_own_folder_and_refuses_files_it_did_not_write(tiny_model: Path, corpus: Path,
                                                                       isolated: Path) -> None:
    """As finetune and patch: --force writes into a folder only while everything in it is ropectl's."""
    out = isolated / "out"
    run_search(request(tiny_model, corpus, out, trials=1))
    run_search(request(tiny_model, corpus, out, trials=2, force=True))  # the control: its own earlier search
    (out / "notes.txt").write_text("mine")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    one_line(["search", str(tiny_model), "-t", "512", "-o", str(out), "--force", "--dataset", str(corpus), "--docs",
              "2", "--held-out", "2", "--dtype", "fp32", "--trials", "3"], "did not write", "notes.txt")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before and len(params(out)) == 2


def test_held_out_documents_by_name(tiny_model: Path, corpus: Path, isolated: Path) -> None:
    """--held-out takes a count or the documents by name, as finetune's does: the named ones are held out, and the
    search's documents are drawn from the rest."""
    named = ("doc05.txt", "doc02.txt")
    result = run_search(request(tiny_model, corpus, isolated / "out", trials=1, held_out=2, held_out_docs=named))
    data = json.loads((result.out / "search.json").read_text())
    assert data["held_out_docs"] == list(named) and not set(named) & set(data["search_docs"])
    one_line(["search", str(tiny_model), "-t", "512", "-o", str(isolated / "bad"), "--dataset", str(corpus), "--docs",
              "2", "--held-out", "doc05.txt,nope.txt", "--dtype", "fp32"], "nope.txt")
    assert not (isolated / "bad").exists()


def test_a_space_the_gguf_engines_cannot_read_is_refused(smollm2: Path, isolated: Path) -> None:
    one_line(["search", str(smollm2), "-t", "16k", "--space", "llama3", "-o", str(isolated / "out")], "llama3",
             "rope_freqs")
    one_line(["search", str(smollm2), "-t", "16k", "--space", "longrope", "-o", str(isolated / "out")], "GGUF")
    assert not (isolated / "out").exists()


def test_the_written_searched_yarn_config_is_what_transformers_builds(single: Path, isolated: Path) -> None:
    """A searched point (not the closed form) through the search's write path; transformers builds the rotary
    embedding from the written file, ropectl computes the frequencies from the spec alone."""
    import torch
    from transformers import AutoConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from ropectl.rope.frequencies import compute_frequencies
    from ropectl.rope.methods import apply_method
    from ropectl.schema.read import read_model_rope
    from ropectl.search.output import write_winner
    from ropectl.search.spaces import build_space

    space = build_space("yarn", 2.0)
    spec = space.spec({"beta_fast": 12.5, "beta_slow": 1.85, "attention_factor": 1.105})
    req = SearchRequest(model=str(single), target=512, space="yarn", out=isolated)
    write_winner(req, spec, {"model": str(single)})
    config = AutoConfig.from_pretrained(isolated / "model")
    built = LlamaRotaryEmbedding(config)
    base = read_model_rope(json.loads((single / "config.json").read_text())).rope
    want = compute_frequencies(apply_method(base, parse_spec(spec.label)), seq_len=512)
    assert torch.allclose(built.inv_freq.double(), torch.tensor(want.inv_freq, dtype=torch.float64), rtol=1e-6, atol=0)
    assert built.attention_scaling == pytest.approx(1.105, rel=1e-6) == pytest.approx(want.attention_factor, rel=1e-6)


def test_cli_prints_the_spec_and_json(tiny_model: Path, corpus: Path, isolated: Path) -> None:
    args = ["search", str(tiny_model), "-t", "512", "--space", "ntk", "--trials", "2", "-o", str(isolated / "out"),
            "--dataset", str(corpus), "--docs", "2", "--held-out", "2", "--samples", "1", "--dtype", "fp32",
            "--no-answer-loss", "--json"]
    result = runner.invoke(__import__("ropectl.cli.app", fromlist=["app"]).app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    parse_spec(data["best"]["spec"])
    assert data["space"] == "ntk" and data["answer_loss"] is False
    assert "estimate: one trial is about" in result.stderr


def longrope(model: Path, corpus: Path, out: Path, **kw: object) -> SearchRequest:
    """A longrope search small enough for seconds: 4 candidates, then 2 generations of 2 children."""
    return request(model, corpus, out, space="longrope", trials=None, population=4, iterations=2, **kw)


def candidates(out: Path) -> list[tuple[str, list[float], float | None]]:
    """The measured candidates in order (a trial stopped by Ctrl-C, state fail, measured nothing)."""
    return [(t["state"], t["params"]["long_factor"], t["fitness"])
            for t in json.loads((out / "trials.json").read_text()) if t["state"] != "fail"]


def test_longrope_candidates_seeds_and_written_factors(tiny_model: Path, corpus: Path, isolated: Path) -> None:
    """--space longrope in the study: every candidate is per-pair factors in [1, s] on the 0.01 grid,
    non-decreasing; the first are the closed forms' (seeds); the best is written as longrope with short_factor all
    ones, in a file the spec names."""
    result = run_search(longrope(tiny_model, corpus, isolated / "out"))
    rows = json.loads((result.out / "trials.json").read_text())
    assert 4 < len(rows) <= 4 + 2 * 2 and (result.out / "study.db").is_file()  # the study holds them
    for row in rows:
        factors = row["params"]["long_factor"]
        assert len(factors) == 8 and factors == sorted(factors)  # head_dim 16: 8 rotary pairs
        assert all(1.0 <= x <= 2.0 and abs(x * 100 - round(x * 100)) < 1e-6 for x in factors)
    assert [r["origin"] for r in rows[:3]] == ["seed"] * 3  # yarn, ntk, linear at the target
    assert rows[0]["params"]["long_factor"] == [2.0] * 8  # linear 2x interpolates every pair by s
    found = parse_spec(result.summary["best"]["found"])  # longrope:2,file=OUT/longrope-factors.json
    assert found.name == "longrope" and Path(found.file) == result.out / "longrope-factors.json"
    written = json.loads(Path(found.file).read_text())
    best = min((r for r in rows if r["state"] == "complete"), key=lambda r: (r["fitness"], r["number"]))
    assert written == {"short_factor": [1.0] * 8, "long_factor": best["params"]["long_factor"]}
    assert result.summary["sampler"] == "evolution" and result.summary["trials"] == len(rows)


def test_longrope_stopped_in_its_second_generation_resumes_from_storage(tiny_model: Path, corpus: Path,
                                                                        isolated: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during the 6th candidate (the first population is 4), then --resume from the --storage journal: the
    same candidates, outcomes and best as an uninterrupted search with the same seed, and only the candidates not
    yet finished are measured again."""
    import ropectl.search.optimize as optimize

    whole = run_search(longrope(tiny_model, corpus, isolated / "whole", storage=str(isolated / "whole.log")))
    real, calls = optimize.measure, []

    def measure(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        calls.append(args[1])
        if len(calls) == 6:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(optimize, "measure", measure)
    stopped = longrope(tiny_model, corpus, isolated / "part", storage=str(isolated / "part.log"))
    with pytest.raises(KeyboardInterrupt):
        run_search(stopped)
    calls.clear()
    resumed = run_search(replace(stopped, resume=True))
    assert candidates(resumed.out) == candidates(whole.out)
    assert len(calls) == len(candidates(whole.out)) - 5  # the 5 finished before Ctrl-C are read from the study
    states = [t["state"] for t in json.loads((resumed.out / "trials.json").read_text())]
    assert states.count("fail") == 1 and states.index("fail") == 5  # the stopped one, kept as failed
    factors = [json.loads((r.out / "longrope-factors.json").read_text()) for r in (whole, resumed)]
    assert factors[0] == factors[1]
    for key in ("beats", "closed_form"):
        assert resumed.summary["best"][key] == whole.summary["best"][key]


def test_workers_share_one_study_through_storage(tiny_model: Path, corpus: Path, isolated: Path) -> None:
    """Two workers (each its own OUT) on one journal-file study: the second counts the first's trials."""
    journal = str(isolated / "study.log")
    run_search(request(tiny_model, corpus, isolated / "w1", trials=2, storage=journal, emit="vllm"))
    second = run_search(request(tiny_model, corpus, isolated / "w2", trials=3, storage=journal, emit="vllm"))
    assert len(params(second.out)) == 3  # one new trial: the budget is the study's
    assert not (isolated / "w1" / "study.db").exists()  # the study lives in --storage only


def test_budget_minutes_stop_after_the_running_trial(tiny_model: Path, corpus: Path, isolated: Path) -> None:
    """--budget (minutes) with no --trials: a limit shorter than one trial stops the study after that trial (which finishes,
    measured at the target), and the report says it stopped on time."""
    result = run_search(request(tiny_model, corpus, isolated / "out", trials=None, minutes=1e-4, emit="vllm"))
    trials = json.loads((result.out / "trials.json").read_text())
    assert len(trials) == 1 and trials[0]["state"] == "complete"  # not cut short: the trial ran to its end
    assert result.summary["stopped"]["reason"] == "time" and result.summary["stopped"]["seconds"] >= 1e-4 * 60
    assert any(line.startswith("stopped on time: --budget 0.0001 min") for line in result.lines)
    counted = run_search(request(tiny_model, corpus, isolated / "trials", trials=1, emit="vllm"))
    assert counted.summary["stopped"]["reason"] == "trials"  # the control: --trials 1 is not "on time"
    assert not any(line.startswith("stopped on time") for line in counted.lines)


def test_without_vllm_the_winner_is_reported_not_checked(tiny_model: Path, corpus: Path, isolated: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Where vLLM does not import, the check of the winner leaves one "not checked" line and its reason."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    result = run_search(request(tiny_model, corpus, isolated / "out", trials=1))
    (check,) = result.summary["engine_checks"]
    assert check["engine"] == "vllm" and check["status"] == "not checked" and "not importable" in check["why"]
    assert "vllm check: not checked (--engine vllm needs the vllm package" in "\n".join(result.lines)
