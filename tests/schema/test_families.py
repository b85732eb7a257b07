"""Family facts ropectl reads from config.json, each checked against transformers or a hand-computed value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropectl.errors import MethodError, NoRopeError
from ropectl.inspection import InspectSpec, inspect_model
from ropectl.patch import patch_checkpoint
from ropectl.patch.spec import PatchSpec
from ropectl.rope.methods import parse_spec
from ropectl.schema import read_model_rope
from tests.helpers.model_sweep import save_default, sweep_type, transformers_ropes

FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"


def _default(model_type: str, tmp_path: Path, **changes) -> Path:
    folder = save_default(sweep_type(model_type), tmp_path / model_type)
    if changes:
        config = {**json.loads((folder / "config.json").read_text()), **changes}
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def _out(folder: Path, spec: str, tmp_path: Path, **kw) -> dict:
    out = tmp_path / "out"
    patch_checkpoint(PatchSpec(model=str(folder), method=parse_spec(spec), output=out, **kw))
    return json.loads((out / "config.json").read_text())


def test_head_dim_null_is_written_explicitly(tmp_path: Path) -> None:
    """Mixtral ships "head_dim": null; transformers 5's yarn would compute None * 1.0."""
    folder = _default("mixtral", tmp_path, head_dim=None)
    written = _out(folder, "yarn:4", tmp_path)
    assert written["head_dim"] == written["hidden_size"] // written["num_attention_heads"]


@pytest.mark.parametrize(("model_type", "key"), [("jetmoe", "kv_channels"), ("zamba2", "attention_head_dim")])
def test_head_dim_from_the_familys_own_key(model_type: str, key: str, tmp_path: Path) -> None:
    folder = _default(model_type, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    model = read_model_rope(config)
    assert model.rotary_dim == config[key] and "head_dim" not in config
    assert len(transformers_ropes(folder)["main"][0]) == config[key] // 2


def test_mla_rotates_qk_rope_head_dim_of_a_published_config() -> None:
    config = json.loads((FIXTURES / "deepseek-v3.json").read_text())
    assert "head_dim" not in config
    model = read_model_rope(config)
    assert model.head_dim == model.rotary_dim == 64 and model.rope.factor == 40


def test_per_layer_sections_with_any_names_keep_their_own_partial_factor(tmp_path: Path) -> None:
    """Laguna: full 0.5, sliding 1.0; patching scales full_attention only and keeps sliding's factor."""
    config = sweep_type("laguna").config
    folder = _default("laguna", tmp_path, layer_types=["full_attention", "sliding_attention"]
                      * (config.num_hidden_layers // 2))
    model = read_model_rope(json.loads((folder / "config.json").read_text()))
    assert model.main_layer == "full_attention"
    assert model.layer_ropes["full_attention"].rotary_dim == model.head_dim // 2
    assert model.layer_ropes["sliding_attention"].rotary_dim == model.head_dim
    written = _out(folder, "yarn:4", tmp_path)["rope_parameters"]
    assert written["full_attention"]["rope_type"] == "yarn"
    assert written["sliding_attention"]["rope_type"] == "default"
    assert written["sliding_attention"].get("partial_rotary_factor", 1.0) == 1.0


def test_zaya_hybrid_label_is_the_main_layer(tmp_path: Path) -> None:
    model = read_model_rope(json.loads((_default("zaya", tmp_path) / "config.json").read_text()))
    assert model.main_layer == "hybrid"


def test_phimoe_gets_numeric_mscales_equal_to_the_attention_factor(tmp_path: Path) -> None:
    written = _out(_default("phimoe", tmp_path), "yarn:4", tmp_path)
    scaling = written["rope_scaling"]
    assert scaling["short_mscale"] == scaling["long_mscale"] == pytest.approx(0.1 * __import__("math").log(4) + 1)


@pytest.mark.parametrize(("model_type", "key", "value"), [("dbrx", "max_seq_len", 32768),
                                                          ("bailing_hybrid", "model_max_length", 65536)])
def test_trained_context_from_the_familys_own_key(model_type: str, key: str, value: int, tmp_path: Path) -> None:
    config = {**json.loads((_default(model_type, tmp_path) / "config.json").read_text()), key: value}
    config.pop("max_position_embeddings", None)
    assert read_model_rope(config).rope.trained_context == value


def test_recurrent_gemma_names_the_option_to_pass(tmp_path: Path) -> None:
    folder = _default("recurrent_gemma", tmp_path)
    with pytest.raises(MethodError, match="original_max_position_embeddings"):
        patch_checkpoint(PatchSpec(model=str(folder), method=parse_spec("yarn:4"), dry_run=True))
    result = patch_checkpoint(PatchSpec(model=str(folder), method=parse_spec("ntk:4,original_max_position_embeddings=8192"),
                                        dry_run=True))
    assert result.target_context == 32768 and result.verification["max_rel_error"] <= 1e-5
    with pytest.raises(MethodError, match="RecurrentGemma"):
        patch_checkpoint(PatchSpec(model=str(folder), method=parse_spec("yarn:4,original_max_position_embeddings=8192"),
                                   dry_run=True))


def test_qwen3_omni_mrope_inspect_and_yarn(tmp_path: Path) -> None:
    folder = _default("qwen3_omni_moe", tmp_path, head_dim=128)
    report = inspect_model(InspectSpec(model=str(folder)))
    assert report.inv_freq == pytest.approx(transformers_ropes(folder)["main"][0], rel=1e-6)
    result = patch_checkpoint(PatchSpec(model=str(folder), method=parse_spec("yarn:4"), dry_run=True))
    assert result.verification["max_rel_error"] <= 1e-5


def test_ernie_vl_inspect_reports_the_stored_order_and_patch_refuses_clearly(tmp_path: Path) -> None:
    folder = _default("ernie4_5_vl_moe", tmp_path)
    report = inspect_model(InspectSpec(model=str(folder)))
    assert report.inv_freq == pytest.approx(transformers_ropes(folder)["main"][0], rel=1e-6)
    assert sorted(report.inv_freq) != list(report.inv_freq)[::-1]  # really permuted, not descending
    with pytest.raises(MethodError, match="ERNIE-4.5-VL"):
        patch_checkpoint(PatchSpec(model=str(folder), method=parse_spec("yarn:2"), dry_run=True))


def test_vision_and_axial_configs_are_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(NoRopeError, match="2-D RoPE"):
        inspect_model(InspectSpec(model=str(_default("pixtral", tmp_path))))
