"""vLLM engine tier: `ropectl search`, run in the cached vLLM venv (from this checkout), checks its winner on vLLM.

The tiny seeded Llama of test_vllm_engine.py (trained 256, head_dim 32, weights std 0.1), a yarn search for 512 (2
trials, fp32): the written folder, scored by vLLM as configured on the held-out documents, agrees with the
transformers measurement the decision used (in-window and at the target, per document), and the report says so.
The check's negative control (a difference it must flag) is tests/search/test_engine_check.py.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest

from tests.compat.vllm_engine_support import VENV, VLLM_PYTHON, ropectl
from tests.helpers.checkpoints import tiny_llama
from tests.helpers.eval_data import add_char_tokenizer, write_corpus

pytestmark = pytest.mark.skipif(not (VENV / "bin" / "python").exists(),
                                reason=f"no vLLM venv at {VENV}: run tests/compat/engine_venvs.sh vllm")


def test_search_winner_scored_by_vllm_agrees_with_transformers() -> None:
    base = Path(tempfile.mkdtemp(prefix="ropectl-search-vllm-"))
    model = add_char_tokenizer(tiny_llama(base / "model", seed=7, hidden_size=128, num_attention_heads=4,
                                          num_key_value_heads=2, head_dim=32, intermediate_size=128,
                                          max_position_embeddings=256, initializer_range=0.1))
    corpus = write_corpus(base / "corpus", [700] * 4)
    proc = ropectl(VLLM_PYTHON, "search", str(model), "-t", "512", "--space", "yarn", "--trials", "2", "-o",
                   str(base / "out"), "--dataset", str(corpus), "--docs", "1", "--held-out", "2", "--samples", "0",
                   "--no-answer-loss", "--grid", "1", "--dtype", "fp32", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    (check,) = summary["engine_checks"]
    print("vLLM check:", check)
    assert check["engine"] == "vllm" and check["scored"] == "the written folder" and check["docs"] == 2
    assert check["status"] == "agrees" and check["max_nll_diff"] <= 1e-4, check
    # transformers' side of the check is the held-out measurement the decision used, of what ships
    shipped = summary["report"]["found_held_out"] if summary["best"]["spec"] == summary["best"]["found"] and \
        summary["report"]["found_held_out"] else summary["report"]["closed_form_held_out"]
    assert math.isclose(check["ppl_target"]["transformers"], shipped["ppl_target"], rel_tol=1e-12)
    assert math.isclose(check["ppl_target"]["vllm"], shipped["ppl_target"], rel_tol=1e-4)
    assert Path(summary["output"]["path"]) == base / "out" / "model"
