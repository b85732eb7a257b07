"""The real SmolLM2-135M (GGUF Q4_1, loaded and saved by transformers) converts to interleaved and back, bit-exact.

Its interleaved q/k equal the GGUF file's own dequantized ``attn_q``/``attn_k`` tensors, which llama.cpp stores in
the interleaved layout: this pins our layout against llama.cpp's, not only against our own inverse.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ropectl.layout.convert import ConvertSpec, convert_layout
from ropectl.layout.detect import HALF_SPLIT, INTERLEAVED
from ropectl.layout.weights import open_weights

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol_hf(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("smollm2") / "hf"
    folder.mkdir()
    model = AutoModelForCausalLM.from_pretrained(smollm2.parent, gguf_file=smollm2.name)
    # transformers 5 refuses save_pretrained on GGUF-loaded models; the weights are dequantized fp32 already.
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_model(model, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def smol_interleaved(smol_hf: Path) -> Path:
    out = smol_hf.parent / "interleaved"
    result = convert_layout(ConvertSpec(model=str(smol_hf), to=INTERLEAVED, output=out, verify=True))
    assert result.verify is not None and result.verify.max_rel_error < 1e-9
    assert result.geometry.n_kv_heads < result.geometry.n_heads  # GQA
    return out


def test_round_trip_bit_exact(smol_hf: Path, smol_interleaved: Path) -> None:
    back = smol_hf.parent / "back"
    convert_layout(ConvertSpec(model=str(smol_interleaved), to=HALF_SPLIT, output=back, verify=True))
    src, out = open_weights(smol_hf), open_weights(back)
    assert src.where.keys() == out.where.keys()
    for name in src.where:
        a, b = src.get(name), out.get(name)
        assert a.dtype == b.dtype and torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8)), name


def test_interleaved_matches_llama_cpp_tensors(smollm2: Path, smol_interleaved: Path) -> None:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(smollm2)
    ggml = {t.name: t for t in reader.tensors}
    store = open_weights(smol_interleaved)
    checked = 0
    for layer in (0, 14, 29):
        for ours, theirs in (("q_proj", "attn_q"), ("k_proj", "attn_k")):
            t = ggml[f"blk.{layer}.{theirs}.weight"]
            expected = torch.from_numpy(dequantize(t.data, t.tensor_type).copy())
            got = store.get(f"model.layers.{layer}.self_attn.{ours}.weight")
            assert torch.equal(got, expected.to(got.dtype).view(got.shape)), (layer, ours)
            checked += 1
    assert checked == 6
