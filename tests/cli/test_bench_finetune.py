"""The fine-tune benchmarks' arithmetic (bench/finetune_recover_lib.py, bench/bench_finetune_speed.py), against
hand-computed values and published figures; the benches are scripts, loaded from their files."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def cell(means: list[float], count: int) -> dict:
    return {"per_doc": [[m * count, count] for m in means]}


def test_ratio_is_target_over_trained_ppl_of_the_same_documents() -> None:
    lib = load("finetune_recover_lib")
    # Hand values: per-document mean NLL 3.0 and 2.5 at 512, 2.0 and 2.0 at 128 -> log ratios 1.0 and 0.5.
    p = lib.point(20, 81920, cell([2.0, 2.0], 127), cell([3.0, 2.5], 511))
    assert p.ratio == pytest.approx(math.exp(0.75), rel=1e-12)
    assert p.ppl_trained == pytest.approx(math.exp(2.0)) and p.ppl_target == pytest.approx(math.exp(2.75))
    # Paired t interval on 2 documents: mean 0.75, sd of the differences 0.3536, se 0.25, t(0.975, 1) = 12.706.
    assert math.log(p.hi) == pytest.approx(0.75 + 12.7062 * 0.25, rel=1e-4)
    assert p.lo < p.ratio < p.hi and p.docs == 2


def test_unequal_documents_at_the_two_lengths_are_refused() -> None:
    lib = load("finetune_recover_lib")
    with pytest.raises(ValueError, match="documents"):
        lib.point(0, 0, cell([2.0, 2.0], 127), cell([3.0], 511))


def _pt(lib, step: int, ratio: float, hi: float):
    return lib.Point(step, step * 10, 1.0, ratio, ratio, ratio * 0.9, hi, 30)


def test_recovery_is_the_first_step_that_stays_within() -> None:
    lib = load("finetune_recover_lib")
    pts = [_pt(lib, 0, 3.0, 3.5), _pt(lib, 20, 1.04, 1.2), _pt(lib, 40, 1.2, 1.3),  # a lucky dip at 20
           _pt(lib, 60, 1.05, 1.06), _pt(lib, 80, 1.01, 1.04), _pt(lib, 100, 1.0, 1.03)]
    assert lib.steps_to_recover(pts).step == 60  # 1.05 is "within 5 %"
    assert lib.steps_to_recover(pts, strict=True).step == 80
    assert lib.steps_to_recover(pts[:3]) is None


def test_log_rows_without_evaluation_or_cut_short_are_skipped() -> None:
    lib = load("finetune_recover_lib")
    ev = {"128": cell([2.0], 127)}
    lines = [json.dumps({"step": 20, "tokens": 1, "eval": ev}), json.dumps({"step": 5, "loss": 3.0}),
             json.dumps({"step": 0, "tokens": 0, "eval": ev}), '{"step": 40, "eva']
    assert [r["step"] for r in lib.eval_rows(lines)] == [0, 20]


def test_zero_shot_cells_pair_documents_in_one_order() -> None:
    lib = load("finetune_recover_lib")
    cells = [{"method": "yarn:4", "length": n, "doc": d, "nll_sum": v, "tokens": n - 1}
             for n, d, v in [(512, "b", 5.0), (128, "a", 1.0), (512, "a", 4.0), (128, "b", 2.0)]]
    cells.append({"method": "none", "length": 128, "doc": "a", "nll_sum": 9.0, "tokens": 127})
    row = lib.zero_shot_rows(cells, "yarn:4", (128, 512))
    assert row["step"] == 0
    assert row["eval"]["128"]["per_doc"] == [[1.0, 127], [2.0, 127]]
    assert row["eval"]["512"]["per_doc"] == [[4.0, 511], [5.0, 511]]


def test_model_flops_count_smollm2s_published_parameters() -> None:
    speed = load("bench_finetune_speed")
    # HuggingFaceTB/SmolLM2-135M: 134,515,008 parameters, of which 61 RMSNorm weight vectors of 576 are not matmuls.
    matmul = 134_515_008 - 61 * 576
    assert speed.matmul_flops_per_token(30, 0) == 6 * matmul
    assert speed.matmul_flops_per_token(30, 4096) - 6 * matmul == 12 * 30 * 4096 * 576


def test_byte_tokenizer_round_trips_any_text_with_bos() -> None:
    tok = load("bench_finetune_speed").byte_tokenizer()
    text = "Thou art — ünïcode\n\tand bytes"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id == 1 and max(ids) < 259
    assert len(ids) == 1 + len(text.encode("utf-8"))
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_against_the_control_pairs_each_step_with_the_controls_same_step() -> None:
    lib = load("finetune_recover_lib")
    run = [{"step": 0, "eval": {"128": cell([2.0], 127), "512": cell([3.0], 511)}},
           {"step": 20, "tokens": 40960, "eval": {"128": cell([2.5], 127), "512": cell([2.2], 511)}},
           {"step": 40, "eval": {"512": cell([2.1], 511)}}]  # the control has no step 40: no point
    control = [{"step": 0, "eval": {"128": cell([2.0], 127)}}, {"step": 20, "eval": {"128": cell([2.1], 127)}}]
    pts = lib.curve_against(run, control, 128, 512)
    assert [p.step for p in pts] == [0, 20]
    assert pts[0].ratio == pytest.approx(math.exp(1.0)) and pts[1].ratio == pytest.approx(math.exp(0.1))
    assert pts[1].tokens == 40960
