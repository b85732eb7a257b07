"""Attention features beside the RoPE (ropectl/families/attention.py), read by every reader and explained by inspect,
on the published configs (tests/fixtures/configs): Dual Chunk Attention (Qwen2.5-7B-Instruct-1M), iRoPE (Llama 4
Scout: NoPE layers, chunked attention, query temperature), Ministral 3's query temperature, sliding windows.

The engines' sources are the oracle, read where named and run by the compat tiers (tests/compat/test_vllm_rope.py and
test_sglang.py call vLLM's and SGLang's own get_rope on the DCA config):
- vLLM 0.32 / 0.29 ``model_executor/layers/rotary_embedding/__init__.py`` get_rope: DualChunkRotaryEmbedding whenever
  ``dual_chunk_attention_config`` is passed, before any rope type; ``models/qwen2.py`` passes the config's key; the
  dual-chunk attention backend exists in 0.9 and 0.10 only (vllm-project/vllm#11844, #24048, #33470);
- SGLang 0.5.23 ``layers/rotary_embedding/factory.py`` get_rope: the same; its DCA backend is gone since 0.5.20;
- transformers 5.24: no module reads ``dual_chunk_attention_config``; ``Llama4TextConfig``: ``no_rope_layers`` 0
  marks a NoPE layer; ``Ministral3Attention``: 1 + beta ln(1 + floor(p / original)) on the queries;
- vLLM 0.32 ``models/mistral.py``: the query temperature comes only from a top-level ``llama_4_scaling``;
- SGLang 0.5.23 ``models/llama4.py``: NoPE on ``(layer_id + 1) % 4 == 0``, whatever the config says.
The hand-computed numbers below (chunk - local, 1 + 0.1 ln 2, the every-4th pattern) are written apart from the code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.families.attention import attention_features, length_bounds

FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"
runner = CliRunner()


def _config(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _folder(tmp_path: Path, config: dict[str, Any], name: str = "m") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _inspect(folder: Path) -> dict[str, Any]:
    result = runner.invoke(app, ["inspect", str(folder), "--engines", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _rows(data: dict[str, Any], engine: str) -> list[dict[str, Any]]:
    """The engine's rows as inspect prints them: consecutive releases that read the config alike, as one span."""
    from ropectl.readers.parity import merge_runs

    return [v for v in merge_runs(data["engines"]) if v["engine"] == engine]


def _says(view: dict[str, Any], text: str) -> bool:
    return any(text in s for s in [view["differs"] or "", view["error"] or "", *view["attention"]])


# --- Dual Chunk Attention -------------------------------------------------------------------------------------------

def test_dca_trained_context_is_its_own_not_the_served_one(tmp_path: Path) -> None:
    data = _inspect(_folder(tmp_path, _config("qwen2.5-7b-instruct-1m")))
    assert data["trained_context"] == 262_144 and data["max_position_embeddings"] == 1_010_000
    assert "dual_chunk_attention_config" in data["trained_context_source"]
    dca = data["attention"]["dual_chunk"]
    assert dca == {"chunk_size": 262_144, "local_size": 8_192, "original_max_position_embeddings": 262_144}
    assert any("Dual Chunk Attention" in line for line in data["attention"]["features"])
    # plain RoPE up to one intra chunk: chunk - local, by hand
    assert any(f"{262_144 - 8_192:,}" in line for line in data["attention"]["bounds"])


def test_every_engine_names_dca(tmp_path: Path) -> None:
    """No engine row is a silent "same": vLLM and SGLang build the dual-chunk rotary (and, in the releases that lack
    its backend, cannot load the model), transformers, lm-eval and llama.cpp say they run plain RoPE."""
    data = _inspect(_folder(tmp_path, _config("qwen2.5-7b-instruct-1m")))
    for view in data["engines"]:
        assert _says(view, "Dual Chunk Attention") or _says(view, "DualChunkRotaryEmbedding"), view["reader"]
    vllm = {v["reader"]: v for v in _rows(data, "vLLM")}
    assert vllm["vLLM before 0.9"]["agrees"] and _says(vllm["vLLM before 0.9"], "has no Dual Chunk Attention")
    assert "DualChunkRotaryEmbedding" in vllm["vLLM 0.9 to <0.11"]["differs"]
    assert vllm["vLLM 0.11+"]["error"] and "layer_idx" in vllm["vLLM 0.11+"]["error"]
    assert "without dual_chunk_attention_config" in vllm["vLLM 0.11+"]["fix"]
    sglang = _rows(data, "SGLang")[0]
    assert "DualChunkRotaryEmbedding" in sglang["error"] and "0.5.20" in sglang["error"]
    for engine in ("transformers", "llama.cpp", "lm-eval"):
        assert all(_says(v, "plain RoPE") for v in _rows(data, engine)), engine


def test_dca_ignores_a_rope_scaling_beside_it(tmp_path: Path) -> None:
    """get_rope takes rope_theta alone beside DCA: a yarn section added by hand is read as plain RoPE by vLLM 0.9-0.10
    (a difference named), while transformers applies it."""
    config = {**_config("qwen2.5-7b-instruct-1m"),
              "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 262_144}}
    data = _inspect(_folder(tmp_path, config))
    opt_in = next(v for v in _rows(data, "vLLM") if v["reader"] == "vLLM 0.9 to <0.11")
    assert opt_in["layers"]["main"]["rope_type"] == "default"
    assert opt_in["differs"].startswith("computes other RoPE")
    assert _rows(data, "transformers")[-1]["layers"]["main"]["rope_type"] == "yarn"


def test_without_the_key_nothing_is_said_of_dca(tmp_path: Path) -> None:
    """Negative control: the same config without dual_chunk_attention_config is plain RoPE trained to its max."""
    config = {k: v for k, v in _config("qwen2.5-7b-instruct-1m").items() if k != "dual_chunk_attention_config"}
    data = _inspect(_folder(tmp_path, config))
    assert data["trained_context"] == 1_010_000
    assert not data["attention"]["features"]
    assert not any(_says(v, "Dual Chunk") for v in data["engines"])


# --- Llama 4 (iRoPE) ------------------------------------------------------------------------------------------------

def test_llama4_scout_irope_is_explained(tmp_path: Path) -> None:
    data = _inspect(_folder(tmp_path, _config("llama-4-scout-17b-16e")))
    att = data["attention"]
    assert att["nope_layers"] == [i for i in range(48) if (i + 1) % 4 == 0]  # 0 marks NoPE: layers 3, 7, ... 47
    assert att["chunk"] == 8192 and att["chunked_layers"] == 36
    assert att["temperature"] == {"scale": 0.1, "floor": 8192, "layers": "NoPE layers"}
    lines = " ".join(att["features"])
    assert "12 of 48 layers apply no RoPE" in lines and "attention_chunk_size 8,192" in lines
    assert f"x{1 + 0.1 * math.log(2):.4g} from 8,191" in lines  # Llama4TextAttention: floor((p + 1) / 8192)
    assert any("8,192-token chunks" in b for b in att["bounds"])
    for view in data["engines"]:  # each engine says what it does with iRoPE
        assert view["error"] or _says(view, "no RoPE") or _says(view, "NoPE"), view["reader"]


def test_llama4_nope_layers_sglang_fixes_every_fourth(tmp_path: Path) -> None:
    """SGLang's llama4.py ignores no_rope_layers: a config with NoPE elsewhere is a difference there, not in vLLM."""
    config = _config("llama-4-scout-17b-16e")
    flags = [0 if i % 4 == 0 else 1 for i in range(48)]  # NoPE on layers 0, 4, ...: not SGLang's pattern
    config["text_config"] = {**config["text_config"], "no_rope_layers": flags}
    data = _inspect(_folder(tmp_path, config))
    assert "(layer_id + 1) % 4" in _rows(data, "SGLang")[0]["differs"]
    assert all(v["agrees"] for v in _rows(data, "vLLM"))
    scout = _inspect(_folder(tmp_path, _config("llama-4-scout-17b-16e"), "scout"))
    assert _rows(scout, "SGLang")[0]["agrees"]  # the control: Scout's own layers are every 4th


# --- Ministral 3's query temperature ----------------------------------------------------------------------------------

def test_ministral3_temperature_is_not_applied_by_vllm(tmp_path: Path) -> None:
    data = _inspect(_folder(tmp_path, _config("ministral-3-8b")))
    assert data["attention"]["temperature"] == {"scale": 0.1, "floor": 16384, "layers": "every layer"}
    newest = next(v for v in _rows(data, "vLLM") if v["reader"] == "vLLM 0.30+")
    assert not newest["agrees"] and "llama_4_scaling" in newest["differs"] and "16,384" in newest["differs"]
    assert _rows(data, "SGLang")[0]["agrees"]  # ministral3.py reads the beta, over 16,384
    assert _rows(data, "transformers")[-1]["agrees"]


# --- what a length means under the attention ---------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "length", "needle"), [
    ("gemma-3-4b-it", 131_072, "29 of 34 layers see only the last 1,024 tokens"),  # 5 of 6 slide, 34 layers
    ("llama-4-scout-17b-16e", 1_000_000, "36 of 48 layers attend only within 8,192-token chunks"),
    ("qwen2.5-7b-instruct-1m", 1_010_000, "beyond 253,952"),
])
def test_length_bounds(name: str, length: int, needle: str) -> None:
    from ropectl.schema.layers import text_config

    features = attention_features(text_config(_config(name)))
    assert any(needle in b for b in length_bounds(features, length)), length_bounds(features, length)


def test_no_bound_below_the_window() -> None:
    """Negative controls: a length inside the window or chunk is bounded by nothing; a window that is switched off
    (Qwen2.5-1M: use_sliding_window false) is no window."""
    from ropectl.schema.layers import text_config

    gemma = attention_features(text_config(_config("gemma-3-4b-it")))
    assert length_bounds(gemma, 1024) == []
    scout = attention_features(text_config(_config("llama-4-scout-17b-16e")))
    assert length_bounds(scout, 8192) == []
    assert attention_features(_config("qwen2.5-7b-instruct-1m")).window is None
