"""vLLM's get_rope builds multimodal RoPE only for default and yarn sections with mrope_section (vLLM 0.32
rotary_embedding/__init__.py); another type gets a one-dimensional embedding fed three-row positions, which vLLM's
CPU kernel crashed on (tests/compat/test_vllm_engine.py found it; test_vllm_rope.py checks the built class). The
reader refuses those, and `patch --emit vllm` with it; default and yarn are the control."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import one_line

QWEN2_VL = {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl", "vocab_size": 256,
            "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]}}


def _with(rope: dict) -> dict:
    return {**QWEN2_VL, "rope_scaling": {**rope, "mrope_section": [4, 6, 6]}}


@pytest.mark.parametrize(("rope", "ok"), [
    ({"rope_type": "linear", "factor": 2.0}, False),
    ({"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 32768}, False),
    ({"rope_type": "dynamic", "factor": 2.0}, False),
    ({"rope_type": "default"}, True),
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32768}, True),
])
def test_reader_refuses_one_dimensional_rope_on_mrope(rope: dict, ok: bool) -> None:
    from ropectl.readers import vllm

    reading = vllm.predict(vllm.newest(), _with(rope))
    assert reading.ok is ok, reading.error
    if not ok:
        assert "mrope_section only when its type is default or yarn" in reading.error


def test_emit_vllm_refuses_linear_on_qwen2_vl_and_prints_yarn(isolated, tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from ropectl.cli.app import app

    folder = tmp_path / "qwen2-vl"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN2_VL))
    one_line(["patch", str(folder), "-m", "linear:2", "--emit", "vllm"], "cannot serve this")
    result = CliRunner().invoke(app, ["patch", str(folder), "-m", "yarn:2", "--emit", "vllm"])
    assert result.exit_code == 0 and "vllm serve" in result.stdout
