"""``patch --emit sglang`` without SGLang installed: the printed line's shape, the Qwen3 card's SGLang values, the
refusals, and recommend's line. tests/compat/test_sglang.py has SGLang's own code read every such line."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.families.cards import all_cards
from ropectl.recommend import patch_commands

runner = CliRunner()
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "num_hidden_layers": 2,
         "vocab_size": 256, "max_position_embeddings": 40960, "rope_theta": 1000000.0}
QWEN2_VL = {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
            "text_config": {"model_type": "qwen2_vl_text", "hidden_size": 64, "num_attention_heads": 4,
                            "num_key_value_heads": 2, "intermediate_size": 128, "num_hidden_layers": 2,
                            "vocab_size": 256, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}}


def _folder(tmp_path: Path, config: dict[str, Any]) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def _emit(folder: str, *args: str) -> tuple[list[str], dict[str, Any]]:
    result = runner.invoke(app, ["patch", folder, *args, "--emit", "sglang"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.strip().splitlines()) == 1  # one pasteable line; notes go to stderr
    argv = shlex.split(result.stdout.strip())
    return argv, json.loads(argv[argv.index("--json-model-override-args") + 1])


def test_the_line_launches_sglang_with_the_target(tmp_path: Path) -> None:
    folder = _folder(tmp_path, QWEN3)
    argv, override = _emit(folder, "-m", "linear", "-f", "4")
    assert argv[:5] == ["python", "-m", "sglang.launch_server", "--model-path", folder]
    assert argv[argv.index("--context-length") + 1] == "131072"  # 32,768 (the card's trained length) x 4
    assert override["max_position_embeddings"] == 131072
    # rope_theta is spelled in the section: an override that lacks it lost it (sgl-project/sglang#41227)
    assert override["rope_parameters"] == {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 4.0}


def test_the_qwen3_cards_sglang_values_are_what_ropectl_prints(tmp_path: Path) -> None:
    recipe = next(r for c in all_cards() for r in c.recipes if r.preset == "qwen3-128k")
    card = recipe.sglang_overrides["rope_scaling"]
    argv, override = _emit(_folder(tmp_path, QWEN3), "--preset", "qwen3-128k")
    section = override["rope_parameters"]
    assert {k: section[k] for k in card} == card  # value by value
    assert int(argv[argv.index("--context-length") + 1]) == recipe.serve_length
    # the keys the card leaves to SGLang's defaults are spelled at those defaults (0.1 ln 4 + 1 is transformers')
    assert section["attn_factor"] == 1.0 and section["mscale"] is None and section["mscale_all_dim"] is None


def test_attention_factor_goes_as_sglangs_multiplier(tmp_path: Path) -> None:
    _, override = _emit(_folder(tmp_path, QWEN3), "-m", "yarn:4,attention_factor=1.3")
    # SGLang's YaRN scale is attn_factor x (0.1 ln(factor) + 1); transformers' is attention_factor itself
    assert math.isclose(override["rope_parameters"]["attn_factor"], 1.3 / (0.1 * math.log(4) + 1), rel_tol=1e-12)


def test_a_composite_config_is_nested_and_keeps_its_multimodal_layout(tmp_path: Path) -> None:
    _, override = _emit(_folder(tmp_path, QWEN2_VL), "-m", "yarn", "-f", "4")
    section = override["text_config"]["rope_parameters"]
    assert section["mrope_section"] == [2, 3, 3] and section["rope_type"] == "yarn"
    assert "mscale" not in section  # SGLang's multimodal YaRN class raises TypeError on it


def test_what_get_rope_cannot_build_is_refused_in_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["patch", _folder(tmp_path, QWEN2_VL), "-m", "linear", "-f", "2", "--emit", "sglang"])
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "mrope_section" in lines[0] and "Fix:" in lines[0]
    control = runner.invoke(app, ["patch", _folder(tmp_path, QWEN2_VL), "-m", "yarn", "-f", "2", "--emit", "sglang"])
    assert control.exit_code == 0, control.output


def test_dynamic_is_served_as_its_static_equivalent(tmp_path: Path) -> None:
    result = runner.invoke(app, ["patch", _folder(tmp_path, QWEN3), "-m", "dynamic", "-f", "4", "--emit", "sglang"])
    assert result.exit_code == 0, result.output
    section = json.loads(shlex.split(result.stdout)[-3])["rope_parameters"]
    # transformers' dynamic base at 131,072 tokens from 32,768, by hand: theta (4 x 4 - 3)^(16/14)
    assert section["rope_type"] == "default"
    assert math.isclose(section["rope_theta"], 1e6 * 13 ** (16 / 14), rel_tol=1e-9)
    assert "static" in result.stderr


def test_recommend_prints_the_sglang_line() -> None:
    commands = patch_commands("M", "yarn:4", ("sglang",))
    assert commands[1] == "ropectl patch M -m yarn:4 --emit sglang"
