"""eval-ppl end to end on a tiny Llama: numbers equal naive transformers, switching equals patching, resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ropectl.errors import UsageError
from ropectl.eval.tasks.ppl import build_spec, run_eval
from ropectl.eval.tasks.ppl.results import Cell, aggregate_cells
from tests.helpers import eval_data as fx
from tests.helpers.eval_reference import doc_tokens, naive_nll_sum, patched_model

METHODS = ["none", "yarn:2", "ntk:2", "dynamic:2", "linear:2"]
LENGTHS = "64,200,256,400"  # the tiny model's trained context is 256


@pytest.fixture(scope="module")
def sweep(tiny_model: Path, tiny_corpus: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("ppl-sweep") / "out"
    spec = build_spec(dtype="fp32", model=str(tiny_model), dataset=str(tiny_corpus), methods=METHODS, lengths=LENGTHS, out=out,
                      cache_dir=out.parent / "cache", chunk_size=48)
    return spec, run_eval(spec)


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


def test_screened_out_methods_run_at_the_shortest_length_only(sweep, tmp_path) -> None:
    """recommend's screen: a screened method gets no forward past the shortest length, its shortest cells equal the
    full sweep's, and the others are untouched. Control: the same spec unscreened fills every cell."""
    spec, result = sweep
    seen: list[str] = []
    screened = run_eval(spec.with_(out=tmp_path / "screened", screened_out=("linear:2", "yarn:2")),
                        progress=lambda p: seen.append(p.current))
    assert screened.meta["screened_out"] == ["linear:2", "yarn:2"]
    assert {(c.method, c.length) for c in screened.cells if c.method in ("linear:2", "yarn:2")} == {
        ("linear:2", 64), ("yarn:2", 64)}
    assert not any(s.startswith(("linear:2 @ 400", "yarn:2 @ 400")) for s in seen)
    full = {c.key: c.nll_sum for c in result.cells}
    assert all(c.nll_sum == pytest.approx(full[c.key], rel=1e-5) for c in screened.cells)
    assert {c.key for c in screened.cells} == {c.key for c in result.cells
                                               if c.method not in ("linear:2", "yarn:2") or c.length == 64}
    assert screened.cell("yarn:2", 400) is None and screened.cell("none", 400) is not None
    assert len(result.cells) > len(screened.cells)  # control: unscreened, the long cells exist
    with pytest.raises(UsageError, match="screened-out method ntk:4 is not among the methods"):
        spec.with_(screened_out=("ntk:4",))


def test_interrupt_keeps_finished_cells(sweep, tmp_path) -> None:
    from ropectl.runtime.interrupt import SweepInterrupted

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


def hf_sliding_nll(model, ids, length: int, stride: int) -> float:
    """The HF "perplexity of fixed-length models" loop, written from its description: full windows every
    ``stride`` tokens plus one ending at the last token; each scores only targets no earlier window scored,
    the rest masked with -100; transformers' own loss over the unmasked labels."""
    import torch

    starts = list(range(0, len(ids) - length + 1, stride))
    if starts[-1] != len(ids) - length:
        starts.append(len(ids) - length)
    total, scored = 0.0, 1  # target 0 has no context: the first prediction is token 1
    with torch.inference_mode():
        for start in starts:
            window = ids[start:start + length]
            labels = window.clone()
            labels[: max(scored - start, 0)] = -100
            n = int((labels[1:] != -100).sum())
            total += float(model(input_ids=window[None], labels=labels[None]).loss.double()) * n
            scored = start + length
    return total


def test_sliding_mode_scores_every_token_once(tiny_model, tiny_corpus, tmp_path) -> None:
    spec = build_spec(dtype="fp32", model=str(tiny_model), dataset=str(tiny_corpus), methods=["none"], lengths="128",
                      mode="sliding", stride=50, out=tmp_path / "s", cache_dir=tmp_path / "c")
    result = run_eval(spec)
    model = patched_model(tiny_model, "none", tmp_path / "m")
    for cell in result.cells:
        ids = doc_tokens(result, cell.doc, spec)
        assert cell.tokens == len(ids) - 1  # every prediction of the document, once
        assert cell.nll_sum == pytest.approx(hf_sliding_nll(model, ids, 128, 50), rel=1e-5)
    assert result.cell("none", 128).tokens == sum(c.tokens for c in result.cells)


def test_standard_error_is_delta_method() -> None:
    """Unequal documents, where the ratio estimator's s.e. differs from the s.e. of per-document means."""
    # (tokens, nll_sum) of three documents; per-document mean NLLs 2, 3 and 1.
    cells = [Cell("m", "x", 10, f"d{i}", n, y) for i, (n, y) in enumerate([(10, 20.0), (30, 90.0), (20, 20.0)])]
    agg = aggregate_cells(cells)
    # By hand: R = 130/60 = 13/6; residuals y - R*n = -5/3, 25, -70/3; over mean size 20: -1/12, 5/4, -7/6;
    # squares sum to 1/144 + 225/144 + 196/144 = 211/72; divided by k(k-1) = 6 gives 211/432.
    se = math.sqrt(211 / 432)
    assert agg.ppl == pytest.approx(math.exp(13 / 6))
    assert agg.nll_se == pytest.approx(se, rel=1e-12)
    assert agg.ppl_se == pytest.approx(math.exp(13 / 6) * se, rel=1e-12)
    plain = math.sqrt(((2 - 2) ** 2 + (3 - 2) ** 2 + (1 - 2) ** 2) / 6)  # s.e. of per-document means: 1/sqrt(3)
    assert abs(agg.nll_se - plain) > 0.1  # negative control: the naive estimate would be caught
    assert aggregate_cells(cells[:1]).ppl_se is None


@pytest.mark.parametrize("kind", ["qwen2", "gemma3"])
def test_switching_on_other_architectures_equals_patched(kind, tiny_corpus, tmp_path) -> None:  # noqa: F811
    """Qwen2 (q/k/v biases) and Gemma3 (one rotary module per layer type, sliding layers keep their base)."""
    model = fx.build(kind, tmp_path / kind, max_position_embeddings=256)
    spec = build_spec(dtype="fp32", model=str(model), dataset=str(tiny_corpus), methods=["none", "yarn:2", "ntk:2"],
                      lengths="100,400", out=tmp_path / "out", cache_dir=tmp_path / "cache")
    result = run_eval(spec)
    for method in ("yarn:2", "ntk:2"):
        patched = patched_model(model, method, tmp_path / f"patched-{method}")
        for cell in (c for c in result.cells if c.method == method):
            ids = doc_tokens(result, cell.doc, spec)[: cell.length]
            assert cell.nll_sum == pytest.approx(naive_nll_sum(patched, ids), rel=1e-4)
    assert result.cell("yarn:2", 400).nll_sum != pytest.approx(result.cell("none", 400).nll_sum, rel=1e-6)
