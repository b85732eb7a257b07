"""patch on the published configs whose attention bounds the RoPE: Dual Chunk Attention is refused, Llama 4 Scout's
own llama3 bands (low = high = 1) are patched with a warning that names them, and a lowered context is said loudly.

Oracles: vLLM 0.32's and SGLang 0.5.23's get_rope (rotary_embedding/__init__.py, factory.py) build
DualChunkRotaryEmbedding whenever dual_chunk_attention_config is passed and read nothing of the rope section but
rope_theta (run by tests/compat/test_vllm_rope.py and test_sglang.py), so a scaling beside it is discarded;
transformers 5.24's ``_compute_llama3_parameters`` on the written config, against the step function written here
(wavelength above original / low divided by the factor, the rest kept), and its validation, which only warns on
high_freq_factor <= low_freq_factor.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.cli import one_line

FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"
runner = CliRunner()


def _folder(tmp_path: Path, name: str, config: dict[str, Any] | None = None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    config = config if config is not None else json.loads((FIXTURES / f"{name}.json").read_text())
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("args", [["-m", "yarn", "-f", "2", "--emit", "vllm"], ["-m", "yarn", "-f", "2", "--emit", "sglang"],
                                  ["-m", "ntk", "-f", "4", "-o", "OUT"], ["-m", "linear", "-f", "2", "--dry-run"]])
def test_dual_chunk_attention_is_never_scaled(args: list[str], tmp_path: Path) -> None:
    src = _folder(tmp_path, "qwen2.5-7b-instruct-1m")
    out = tmp_path / "out"
    one_line(["patch", str(src), *[str(out) if a == "OUT" else a for a in args]], "dual_chunk_attention_config",
             "discard", code=2)
    assert not out.exists()


def test_without_dual_chunk_attention_the_same_model_scales(tmp_path: Path) -> None:
    """Negative control: the refusal is the key's, not the model's."""
    config = json.loads((FIXTURES / "qwen2.5-7b-instruct-1m.json").read_text())
    config.pop("dual_chunk_attention_config")
    src = _folder(tmp_path, "plain", config)
    result = runner.invoke(app, ["patch", str(src), "-m", "yarn", "-f", "2", "--emit", "vllm", "--json"])
    assert result.exit_code == 0, result.output


def _llama3_step(theta: float, d: int, factor: float, original: int) -> list[float]:
    out = []
    for i in range(d // 2):
        inv = theta ** (-2 * i / d)
        out.append(inv / factor if 2 * math.pi / inv > original else inv)
    return out


def test_llama4_scout_patches_with_its_own_bands(tmp_path: Path) -> None:
    src = _folder(tmp_path, "llama-4-scout-17b-16e")
    out = tmp_path / "out"
    result = runner.invoke(app, ["patch", str(src), "-m", "llama3", "-f", "2", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    warnings = " | ".join(data["warnings"])
    assert "low_freq_factor = high_freq_factor = 1 (the model's own bands" in warnings
    assert "must be greater than low_freq_factor" in warnings  # transformers' own warning, passed on
    assert data["verification"]["forward"]["ran"] is True
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    text = AutoConfig.from_pretrained(out).get_text_config()
    assert text.rope_parameters["low_freq_factor"] == text.rope_parameters["high_freq_factor"] == 1.0
    inv, _ = ROPE_INIT_FUNCTIONS["llama3"](text, "cpu")
    want = _llama3_step(500000.0, 128, 2.0, 8192)
    assert max(abs(a - b) / b for a, b in zip(inv.double().tolist(), want)) < 1e-6


def test_a_lowered_context_is_loud(tmp_path: Path) -> None:
    src = _folder(tmp_path, "llama-4-scout-17b-16e")
    data = json.loads(runner.invoke(app, ["patch", str(src), "-m", "llama3", "-f", "2", "--dry-run", "--json"]).stdout)
    lowered = [w for w in data["warnings"] if w.startswith("LOWERED")]
    assert lowered and "10,485,760" in lowered[0] and "16,384" in lowered[0] and "-t 10485760" in lowered[0]
    # negative control: a target at or beyond the shipped length lowers nothing
    keep = json.loads(runner.invoke(app, ["patch", str(src), "-m", "llama3", "-t", "10485760", "--dry-run",
                                          "--json"]).stdout)
    assert not any(w.startswith("LOWERED") for w in keep["warnings"])
    # none is the unscaled base: no -t keeps the shipped length, so the advice names as-is instead
    base = json.loads(runner.invoke(app, ["patch", str(src), "-m", "none", "--dry-run", "--json"]).stdout)
    (line,) = [w for w in base["warnings"] if w.startswith("LOWERED")]
    assert "-t " not in line and "-m as-is" in line and "unscaled base" in line


def test_a_high_band_below_the_low_one_is_refused(tmp_path: Path) -> None:
    src = _folder(tmp_path, "llama-4-scout-17b-16e")
    one_line(["patch", str(src), "-m", "llama3:2,low_freq_factor=4,high_freq_factor=1", "--dry-run"],
             "high_freq_factor >= low_freq_factor", code=2)
