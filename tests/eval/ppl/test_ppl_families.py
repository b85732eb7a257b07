"""eval-ppl method switching beyond Llama: each cell equals the method patched on disk and loaded from scratch.

Mixtral (config head_dim null), Gemma 4 text (p-RoPE global layers, default sliding ones), DeepSeek-V3 (MLA:
RoPE only on qk_rope_head_dim, interleaved) and Qwen2-VL's text model (mrope sections).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ropectl.eval.tasks.ppl import build_spec, run_eval
from tests.helpers import eval_data as fx
from tests.helpers.eval_reference import doc_tokens, naive_nll_sum, patched_model
from tests.helpers.family_checkpoints import tiny_deepseek_v3, tiny_gemma4_text, tiny_mixtral, tiny_qwen2_vl_text

BIG = {"initializer_range": 0.2}  # so that RoPE visibly drives the logits
CASES = {
    "mixtral": (tiny_mixtral, ["none", "yarn:2", "linear:2"]),
    "gemma4": (tiny_gemma4_text, ["none", "proportional:2", "ntk:2"]),
    "deepseek_v3": (tiny_deepseek_v3, ["none", "yarn:2", "dynamic:2"]),
    "qwen2_vl": (tiny_qwen2_vl_text, ["none", "yarn:2"]),
}


def _patched(kind: str, model: Path, method: str, folder: Path):
    if kind != "qwen2_vl":
        return patched_model(model, method, folder)
    import json

    import torch
    from transformers import AutoModelForImageTextToText

    from ropectl.patch import apply_to_config
    from ropectl.rope.methods import parse_spec

    folder.mkdir()
    for item in model.iterdir():
        (folder / item.name).symlink_to(item)
    (folder / "config.json").unlink()
    new, _ = apply_to_config(json.loads((model / "config.json").read_text()), parse_spec(method))
    (folder / "config.json").write_text(json.dumps(new))
    return AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()


@pytest.mark.parametrize("kind", list(CASES))
def test_switching_equals_patched_checkpoint(kind: str, tiny_corpus: Path, tmp_path: Path) -> None:  # noqa: F811
    factory, methods = CASES[kind]
    model = fx.add_char_tokenizer(factory(tmp_path / kind, **({} if kind == "qwen2_vl" else BIG)))
    spec = build_spec(dtype="fp32", model=str(model), dataset=str(tiny_corpus), methods=methods, lengths="100,400",
                      out=tmp_path / "out", cache_dir=tmp_path / "cache")
    result = run_eval(spec)
    for method in methods[1:]:
        patched = _patched(kind, model, method, tmp_path / f"patched-{method}")
        cells = [c for c in result.cells if c.method == method]
        assert cells
        for cell in cells:
            ids = doc_tokens(result, cell.doc, spec)[: cell.length]
            assert cell.nll_sum == pytest.approx(naive_nll_sum(patched, ids), rel=1e-4), (method, cell.length)
        assert result.cell(method, 400).nll_sum != pytest.approx(result.cell("none", 400).nll_sum, rel=1e-6)
