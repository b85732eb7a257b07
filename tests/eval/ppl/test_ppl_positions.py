"""Loss by position and batched documents: checked against naive transformers on a tiny Llama.

The oracle is the model's own full logits (``model(ids).logits``) with per-token cross-entropy, bucketed
here by hand; the cell sums are checked against ``model(ids, labels=ids).loss``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropectl.eval.tasks.ppl import build_spec, run_eval
from tests.helpers.eval_reference import doc_tokens, load, naive_nll_sum

BUCKET = 64


@pytest.fixture(scope="module")
def runs(tiny_model: Path, tiny_corpus: Path, tmp_path_factory: pytest.TempPathFactory):
    """The same sweep twice: batch 1 (batch_tokens 1) and several documents per forward."""
    root = tmp_path_factory.mktemp("ppl-positions")
    common = dict(model=str(tiny_model), dataset=str(tiny_corpus), methods=["none", "yarn:2"], lengths="100,300",
                  cache_dir=root / "cache", chunk_size=40, bucket=BUCKET)
    single = build_spec(dtype="fp32", **common, out=root / "b1", batch_tokens=1)
    batched = build_spec(dtype="fp32", **common, out=root / "bn", batch_tokens=1200)
    return (single, run_eval(single)), (batched, run_eval(batched))


def hand_buckets(model, ids) -> tuple[list[float], list[int]]:
    """Per-token NLL from the full logits, summed by target position t // BUCKET in plain Python."""
    import torch
    import torch.nn.functional as F

    with torch.inference_mode():
        logits = model(input_ids=ids[None]).logits[0].float()
    per_token = F.cross_entropy(logits[:-1], ids[1:], reduction="none").tolist()
    sums: list[float] = []
    counts: list[int] = []
    for t, value in enumerate(per_token, start=1):  # target t is predicted from t tokens of context
        k = t // BUCKET
        while len(sums) <= k:
            sums.append(0.0)
            counts.append(0)
        sums[k] += value
        counts[k] += 1
    return sums, counts


def test_buckets_sum_to_the_cell_and_equal_naive_per_token_loss(runs, tiny_model: Path) -> None:
    (spec, result), _ = runs
    model = load(tiny_model)
    checked = 0
    for cell in (c for c in result.cells if c.method == "none"):
        ids = doc_tokens(result, cell.doc, spec)[: cell.length]
        assert cell.bucket == BUCKET
        assert sum(cell.bucket_tokens) == cell.tokens
        assert sum(cell.bucket_nll) == pytest.approx(cell.nll_sum, rel=1e-12)
        assert cell.nll_sum == pytest.approx(naive_nll_sum(model, ids), rel=1e-5)  # the PPL cell, independently
        sums, counts = hand_buckets(model, ids)
        assert list(cell.bucket_tokens) == counts
        assert list(cell.bucket_nll) == pytest.approx(sums, rel=1e-5)
        checked += 1
    assert checked == 4 + 3


def test_curves_are_token_weighted_across_documents(runs) -> None:
    (_, result), _ = runs
    curve = next(c for c in result.positions if c.method == "none" and c.length == 300)
    cells = [c for c in result.cells if c.method == "none" and c.length == 300]
    assert curve.docs == len(cells) == 3
    for k, mean in enumerate(curve.nll):
        want = sum(c.bucket_nll[k] for c in cells) / sum(c.bucket_tokens[k] for c in cells)
        assert mean == pytest.approx(want, rel=1e-12)
    # Pooled over buckets, the curve gives back the table's PPL.
    import math

    pooled = sum(m * n for m, n in zip(curve.nll, curve.tokens)) / sum(curve.tokens)
    assert math.exp(pooled) == pytest.approx(result.cell("none", 300).ppl, rel=1e-9)


def test_buckets_are_stored_in_every_output(runs) -> None:
    (spec, result), _ = runs
    out = Path(spec.out)
    row = json.loads((out / "results.json").read_text())["results"][0]
    assert row["bucket"] == BUCKET and sum(row["bucket_tokens"]) == row["tokens"]
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert {"bucket", "bucket_nll", "bucket_tokens"} <= set(header)
    summary = json.loads((out / "summary.json").read_text())
    assert {(p["method"], p["length"]) for p in summary["positions"]} == {(m, n) for m in ("none", "yarn:2")
                                                                          for n in (100, 300)}
    assert (out / "loss-by-position.png").stat().st_size > 10_000


def test_batched_nll_equals_batch_1(runs) -> None:
    (_, single), (_, batched) = runs
    assert len(single.cells) == len(batched.cells) == 2 * (4 + 3)
    ref = {c.key: c for c in single.cells}
    for cell in batched.cells:
        assert cell.nll_sum == pytest.approx(ref[cell.key].nll_sum, rel=1e-5)
        assert cell.bucket_nll == pytest.approx(ref[cell.key].bucket_nll, rel=1e-5)


def test_batches_group_one_method_and_length(runs) -> None:
    from ropectl.eval.tasks.ppl.plan import batch_jobs, plan_jobs

    (_, _), (spec, result) = runs
    from ropectl.runtime.corpus import Document
    from ropectl.runtime.model import method_states

    config = json.loads((Path(spec.model) / "config.json").read_text())
    states = method_states(config, spec.methods)
    docs = [Document(f"d{i}", list(range(n))) for i, n in enumerate([700, 600, 300, 150])]
    jobs = plan_jobs(states, [100, 300], docs, "truncate", set())
    batches = batch_jobs(jobs, "truncate", 1200)
    assert all(len({(j.state.label, j.length) for j in b}) == 1 for b in batches)
    assert all(len(b) * b[0].length <= 1200 or len(b) == 1 for b in batches)
    assert sorted(j.label for b in batches for j in b) == sorted(j.label for j in jobs)
    assert [len(b) for b in batch_jobs(jobs, "truncate", 1)] == [1] * len(jobs)
