"""The ``proportional`` method (p-RoPE, Gemma 4 / LFM3 / DiffusionGemma) in the registry and through patch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropectl.errors import MethodError
from ropectl.patch import patch_checkpoint
from ropectl.patch.spec import PatchSpec
from ropectl.rope.methods import MethodSpec, apply_method, parse_spec
from ropectl.rope.params import RopeParams
from tests.helpers.model_sweep import save_default, sweep_type, transformers_ropes

PROPE = RopeParams("proportional", 1e6, 512, 8192, {"partial_rotary_factor": 0.25})


def test_registry_builds_proportional_with_the_models_partial_factor() -> None:
    rope = apply_method(PROPE, parse_spec("proportional:4"))
    assert rope.rope_type == "proportional" and rope.factor == 4.0
    assert rope.scaling["partial_rotary_factor"] == 0.25 and rope.max_position_embeddings == 32768


def test_ntk_and_none_keep_p_rope() -> None:
    assert apply_method(PROPE, parse_spec("ntk:4")).rope_type == "proportional"
    assert apply_method(PROPE, parse_spec("none")).scaling == {"partial_rotary_factor": 0.25}


@pytest.mark.parametrize("spec", ["yarn:4", "linear:4", "llama3:4"])
def test_methods_that_would_break_p_rope_are_refused(spec: str) -> None:
    with pytest.raises(MethodError, match="p-RoPE"):
        apply_method(PROPE, parse_spec(spec))


def test_proportional_on_a_plain_model_is_refused() -> None:
    with pytest.raises(MethodError, match="not p-RoPE"):
        apply_method(RopeParams("default", 1e4, 128, 4096), parse_spec("proportional:2"))


def test_partial_factor_option_is_validated() -> None:
    with pytest.raises(MethodError, match="partial_rotary_factor"):
        apply_method(PROPE, MethodSpec("proportional", 2.0, (("partial_rotary_factor", 1.5),)))


def test_patched_gemma4_builds_what_ropectl_computes(tmp_path: Path) -> None:
    """Written to disk and rebuilt by Gemma 4's own rotary class: global layers scaled, sliding ones untouched."""
    entry = sweep_type("gemma4_text")
    source = save_default(entry, tmp_path / "src")
    before = transformers_ropes(source)
    out = tmp_path / "out"
    patch_checkpoint(PatchSpec(model=str(source), method=parse_spec("proportional:8"), output=out))
    after = transformers_ropes(out)
    assert after["sliding_attention"] == before["sliding_attention"]
    for old, new in zip(before["full_attention"][0], after["full_attention"][0]):
        assert new == pytest.approx(old / 8, rel=1e-6, abs=0.0)
    written = json.loads((out / "config.json").read_text())["rope_parameters"]["full_attention"]
    assert written["rope_type"] == "proportional" and written["partial_rotary_factor"] == 0.25
