"""eval-ppl end to end on a tiny Llama: numbers equal naive transformers, switching equals patching, resume."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import test_ppl_fixtures as fx
from test_ppl_loss import naive_nll_sum

from ropectl.ppl import EvalSpec, build_spec, run_eval
from ropectl.ppl.results import Cell, aggregate_cells

tiny_model, tiny_corpus = fx.tiny_model, fx.tiny_corpus  # fixtures
METHODS = ["none", "yarn:2", "ntk:2", "dynamic:2", "linear:2"]
LENGTHS = "64,200,256,400"  # the tiny model's trained context is 256


@pytest.fixture(scope="module")
def sweep(tiny_model: Path, tiny_corpus: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("ppl-sweep") / "out"
    spec = build_spec(model=str(tiny_model), dataset=str(tiny_corpus), methods=METHODS, lengths=LENGTHS, out=out,
                      cache_dir=out.parent / "cache", chunk_size=48)
    return spec, run_eval(spec)


def patched_model(model: Path, method: str, folder: Path):
    """The method applied by writing a patched config and loading it from scratch (no switching)."""
    import torch
    from transformers import AutoModelForCausalLM

    from ropectl.patch import apply_to_config
    from ropectl.rope.methods import parse_spec

    shutil.copytree(model, folder)
    config = json.loads((model / "config.json").read_text())
    new, _ = apply_to_config(config, parse_spec(method))
    (folder / "config.json").write_text(json.dumps(new))
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def doc_tokens(result, doc: str, cache_spec: EvalSpec):
    import torch
    from transformers import AutoTokenizer

    from ropectl.ppl.data import load_corpus, make_source

    tok = AutoTokenizer.from_pretrained(cache_spec.model)
    corpus = load_corpus(make_source(cache_spec.dataset), tok, cache_spec.docs, cache_spec.cache_dir)
    return torch.as_tensor(next(d.tokens for d in corpus.documents if d.doc_id == doc))


@pytest.mark.parametrize("method", ["none", "yarn:2", "ntk:2", "dynamic:2"])
def test_switched_method_equals_patched_checkpoint_and_naive_loss(sweep, tiny_model, tmp_path, method) -> None:
    spec, result = sweep
    model = patched_model(tiny_model, method, tmp_path / "patched")
    checked = 0
    for cell in result.cells:
        if cell.method != method:
            continue
        ids = doc_tokens(result, cell.doc, spec)[: cell.length]
        assert cell.tokens == cell.length - 1
        assert cell.nll_sum == pytest.approx(naive_nll_sum(model, ids), rel=1e-4)
        checked += 1
    assert checked == 4 + 3 + 3 + 2  # documents long enough at 64, 200, 256, 400


def test_methods_differ_and_dynamic_equals_none_within_trained_context(sweep) -> None:
    _, result = sweep
    for n in (64, 200, 256):
        assert result.cell("dynamic:2", n).nll_sum == pytest.approx(result.cell("none", n).nll_sum, rel=1e-9)
    assert result.cell("dynamic:2", 400).nll_sum != pytest.approx(result.cell("none", 400).nll_sum, rel=1e-6)
    assert result.cell("yarn:2", 64).nll_sum != pytest.approx(result.cell("none", 64).nll_sum, rel=1e-6)


def test_docs_used_per_length_and_token_weighting(sweep) -> None:
    spec, result = sweep
    # 5 documents: 700, 600, 300 and 151 tokens, plus an empty one that is dropped.
    assert result.meta["docs_total"] == 4
    assert result.meta["docs_used"] == {"64": 4, "200": 3, "256": 3, "400": 2}
    for agg in result.aggregates:
        cells = [c for c in result.cells if c.method == agg.method and c.length == agg.length]
        assert agg.docs == len(cells)
        assert agg.tokens == sum(c.tokens for c in cells)
        assert agg.ppl == pytest.approx(math.exp(sum(c.nll_sum for c in cells) / agg.tokens))


def test_files_are_long_form_and_agree(sweep) -> None:
    import csv

    spec, result = sweep
    out = result.out
    rows = json.loads((out / "results.json").read_text())["results"]
    assert len(rows) == len(result.cells) == 5 * (4 + 3 + 3 + 2)
    assert set(rows[0]) >= {"model", "method", "params", "length", "doc", "tokens", "nll_sum", "ppl"}
    with (out / "results.csv").open() as fh:
        csv_rows = list(csv.DictReader(fh))
    assert [(r["method"], int(r["length"]), r["doc"]) for r in csv_rows] == [
        (r["method"], r["length"], r["doc"]) for r in rows]
    log = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(log) == len(rows)
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["table"]) == 5 * 4 and summary["meta"]["trained_context"] == 256
    assert (out / "ppl.png").read_bytes()[:4] == b"\x89PNG"
    assert rows[0]["params"]["rope_type"] == "default"


def test_shared_prefix_forward_equals_separate_forwards(sweep, tiny_model, tmp_path) -> None:
    """One forward at 400 tokens scores 64/200/256 too; a run of only 200 must give the same numbers."""
    spec, result = sweep
    alone = run_eval(spec.with_(lengths=(200,), methods=spec.methods[:2], out=tmp_path / "alone"))
    for cell in alone.cells:
        shared = next(c for c in result.cells if c.key == cell.key)
        assert cell.nll_sum == pytest.approx(shared.nll_sum, rel=1e-5)


def test_resume_skips_finished_cells(sweep, tmp_path) -> None:
    spec, result = sweep
    out = tmp_path / "resume"
    first = spec.with_(out=out, lengths=(64, 200), methods=spec.methods[:2])
    run_eval(first)
    lines = (out / "results.jsonl").read_text().splitlines()
    kept = [ln for ln in lines if json.loads(ln)["length"] == 64]
    (out / "results.jsonl").write_text("\n".join(kept) + "\n" + lines[-1][:20])  # a torn last line
    (out / "results.json").unlink()
    seen: list[str] = []
    again = run_eval(first.with_(resume=True), progress=lambda p: seen.append(p.current))
    assert all("@ 200" in s for s in seen)  # nothing at 64 ran again
    assert again.meta["new_cells"] == 6  # the 200-token cells of both methods (3 documents each)
    assert sorted(c.key for c in again.cells) == sorted(
        c.key for c in result.cells if c.length in (64, 200) and c.method in ("none", "yarn:2"))


def test_interrupt_keeps_finished_cells(sweep, tmp_path) -> None:
    from ropectl.ppl import SweepInterrupted

    spec, _ = sweep
    out = tmp_path / "interrupted"
    calls = {"n": 0}

    def stop_after_two_jobs(p) -> None:
        calls["n"] += 1
        if p.done_jobs == 2:
            raise KeyboardInterrupt

    with pytest.raises(SweepInterrupted) as err:
        run_eval(spec.with_(out=out), progress=stop_after_two_jobs)
    assert err.value.exit_code == 130 and "--resume" in str(err.value)
    kept = (out / "results.jsonl").read_text().splitlines()
    assert err.value.kept == len(kept) > 0


def test_sliding_mode_scores_every_token_once(tiny_model, tiny_corpus, tmp_path) -> None:
    spec = build_spec(model=str(tiny_model), dataset=str(tiny_corpus), methods=["none"], lengths="128",
                      mode="sliding", stride=50, out=tmp_path / "s", cache_dir=tmp_path / "c")
    result = run_eval(spec)
    import torch

    from ropectl.ppl.loss import sequence_nll
    from ropectl.ppl.plan import windows

    model = patched_model(tiny_model, "none", tmp_path / "m")
    for cell in result.cells:
        ids = doc_tokens(result, cell.doc, spec)
        assert cell.tokens == len(ids) - 1  # every prediction of the document, once
        want = 0.0
        with torch.inference_mode():
            for start, first in windows(len(ids), 128, 50):
                window = ids[start:start + 128]
                want += float(sequence_nll(model, window).double()[first - start - 1:].sum())
        assert cell.nll_sum == pytest.approx(want, rel=1e-5)
    assert result.cell("none", 128).tokens == sum(c.tokens for c in result.cells)


def test_standard_error_is_delta_method() -> None:
    cells = [Cell("m", "x", 10, f"d{i}", n, y) for i, (n, y) in enumerate([(9, 18.0), (9, 27.0), (9, 9.0)])]
    agg = aggregate_cells(cells)
    per_doc = [2.0, 3.0, 1.0]  # equal sizes: the s.e. of the mean of per-document mean NLLs
    mean = sum(per_doc) / 3
    se = math.sqrt(sum((x - mean) ** 2 for x in per_doc) / (3 * 2))
    assert agg.nll_se == pytest.approx(se)
    assert agg.ppl == pytest.approx(math.exp(2.0))
    assert agg.ppl_se == pytest.approx(math.exp(2.0) * se)
    assert aggregate_cells(cells[:1]).ppl_se is None


@pytest.mark.parametrize("kind", ["qwen2", "gemma3"])
def test_switching_on_other_architectures_equals_patched(kind, tiny_corpus, tmp_path) -> None:  # noqa: F811
    """Qwen2 (q/k/v biases) and Gemma3 (one rotary module per layer type, sliding layers keep their base)."""
    model = fx.build(kind, tmp_path / kind, max_position_embeddings=256)
    spec = build_spec(model=str(model), dataset=str(tiny_corpus), methods=["none", "yarn:2", "ntk:2"],
                      lengths="100,400", out=tmp_path / "out", cache_dir=tmp_path / "cache")
    result = run_eval(spec)
    for method in ("yarn:2", "ntk:2"):
        patched = patched_model(model, method, tmp_path / f"patched-{method}")
        for cell in (c for c in result.cells if c.method == method):
            ids = doc_tokens(result, cell.doc, spec)[: cell.length]
            assert cell.nll_sum == pytest.approx(naive_nll_sum(patched, ids), rel=1e-4)
    assert result.cell("yarn:2", 400).nll_sum != pytest.approx(result.cell("none", 400).nll_sum, rel=1e-6)
