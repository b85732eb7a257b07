"""A fine-tuned GGUF source's weights back in a GGUF by llama.cpp's own converter (extend's gguf stage): the file
llama.cpp's converter writes carries the fine-tune's RoPE scaling, at F16 for a Q4_1 source (a type the converter
does not write), as the record says; with no converter, nothing is written and the record says so. The oracle is the
GGUF's own metadata, read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropectl.extend.gguf import convert, find_converter
from ropectl.io.gguf_kv import read_kv


def hf_folder(folder: Path, gguf: Path) -> Path:
    """A tiny seeded Llama with SmolLM2's tokenizer (the converter knows its pre-tokenizer) and a yarn x2 config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cfg = AutoConfig.for_model(model_type="llama", hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, head_dim=16,
                               vocab_size=len(tok), rope_scaling={"rope_type": "yarn", "factor": 2.0,
                                                                  "original_max_position_embeddings": 64})
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_the_converter_writes_f16_with_the_scaling(smollm2: Path, isolated: Path) -> None:
    if find_converter() is None:
        pytest.skip("llama.cpp's converter is not installed (sh tests/compat/engine_venvs.sh llamacpp-convert)")
    record = convert(str(hf_folder(isolated / "tuned", smollm2)), isolated / "model.gguf", str(smollm2))
    assert record["path"] == str(isolated / "model.gguf"), record
    assert record["outtype"] == "f16" and "F16" in record["why"]  # Q4_1 is not a type the converter writes
    kv = read_kv(isolated / "model.gguf")
    assert kv["general.file_type"] == 1  # llama_ftype MOSTLY_F16
    assert kv["llama.rope.scaling.type"] == "yarn" and kv["llama.rope.scaling.factor"] == 2.0


def test_no_converter_writes_nothing_and_says_so(smollm2: Path, isolated: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    monkeypatch.setattr("ropectl.extend.gguf.find_converter", lambda: None)
    record = convert(str(isolated / "tuned"), isolated / "model.gguf", str(smollm2))
    assert record["path"] is None and "not installed" in record["note"] and "convert_hf_to_gguf.py" in record["command"]
    assert not (isolated / "model.gguf").exists()


def test_the_transformers_line_of_a_scaled_gguf_loads_it_scaled(smollm2: Path, isolated: Path) -> None:
    """The card's transformers line for a yarn:2 GGUF, run through transformers' own config loader (what
    ``from_pretrained`` calls with its keyword arguments): yarn x2 from the trained 8k. The control: the same file
    with no overrides loads unscaled, so the overrides are what carries the scaling."""
    import ast

    from transformers import AutoConfig

    from ropectl.cli.app import app
    from ropectl.extend.card import transformers_line
    from tests.helpers.cli import runner

    shipped = isolated / "yarn2.gguf"
    result = runner.invoke(app, ["patch", str(smollm2), "-m", "yarn:2", "-o", str(shipped)])
    assert result.exit_code == 0, result.output
    call = ast.parse(transformers_line(str(shipped)).split("  #")[0], mode="eval").body
    assert isinstance(call, ast.Call)
    folder = ast.literal_eval(call.args[0])
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    config = AutoConfig.from_pretrained(folder, **kwargs)
    rope = config.rope_parameters
    assert (rope["rope_type"], rope["factor"], rope["original_max_position_embeddings"]) == ("yarn", 2.0, 8192)
    assert config.max_position_embeddings == 16384
    plain = AutoConfig.from_pretrained(folder, gguf_file=kwargs["gguf_file"]).rope_parameters
    assert plain.get("rope_type", "default") == "default"
