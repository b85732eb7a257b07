"""The v4/v5 config writer and `apply_to_config`: round trips through ropectl's reader and transformers 5."""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ropectl.patch import apply_to_config
from ropectl.patch.verify import compare, expected_ropes
from ropectl.rope.methods import MethodSpec
from ropectl.schema import read_model_rope
from tests.helpers import rope_reference

LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 4096,
         "rope_theta": 500000.0}
GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 128,
          "max_position_embeddings": 8192, "layer_types": ["sliding_attention", "full_attention"],
          "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0}


def built(config: dict) -> dict:
    """{layer: (inv_freq, attention)} that transformers 5 builds from a config dict."""
    import json
    import tempfile
    from pathlib import Path

    from ropectl.patch.verify import transformers_frequencies

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        return transformers_frequencies(Path(tmp))


def test_input_not_modified_and_v4_form() -> None:
    original = copy.deepcopy(LLAMA)
    new, rope = apply_to_config(LLAMA, MethodSpec("yarn", 4.0))
    assert LLAMA == original
    # the default write form: max_position_embeddings is the target (what lm-eval and vLLM read as the length),
    # and both sections name the original
    scaling = {"factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}
    assert new["rope_scaling"] == {"rope_type": "yarn", "type": "yarn", **scaling}
    assert new["rope_parameters"] == {"rope_type": "yarn", "rope_theta": 500000.0, **scaling}
    assert new["rope_theta"] == 500000.0 and new["max_position_embeddings"] == 16384
    assert rope.rope_type == "yarn" and rope.factor == 4.0
    # --max-positions trained: max_position_embeddings stays the original length, so rope_scaling need not name
    # it (transformers 4.43-4.50 take the original from max_position_embeddings; docs/reference/write-form.md).
    new, rope = apply_to_config(LLAMA, MethodSpec("yarn", 4.0), max_positions="trained")
    assert new["rope_scaling"] == {"rope_type": "yarn", "type": "yarn", "factor": 4.0,
                                   "beta_fast": 32.0, "beta_slow": 1.0}
    assert new["rope_parameters"] == {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0,
                                      "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}
    assert new["rope_theta"] == 500000.0 and new["max_position_embeddings"] == 4096
    assert rope.rope_type == "yarn" and rope.factor == 4.0


def test_factor_is_written_as_float() -> None:
    new, _ = apply_to_config(LLAMA, MethodSpec("linear", 2))
    assert isinstance(new["rope_scaling"]["factor"], float)


def test_ntk_writes_theta_not_a_type() -> None:
    new, rope = apply_to_config(LLAMA, MethodSpec("ntk", 4.0))
    assert "rope_scaling" not in new and new["rope_parameters"]["rope_type"] == "default"
    assert new["rope_theta"] == pytest.approx(500000.0 * 4 ** (16 / 14))
    assert "ntk" not in str(new.get("rope_scaling")) and rope.rope_type == "default"


@pytest.mark.parametrize("schema", ["both", "v4", "v5"])
def test_gemma3_exact_forms_load_in_transformers(schema: str) -> None:
    """The reference warns flat rope_parameters + rope_scaling raises on Gemma3: we write nested + flat."""
    new, rope = apply_to_config(GEMMA3, MethodSpec("yarn", 2.0), schema=schema)
    if schema != "v4":
        assert set(new["rope_parameters"]) == {"full_attention", "sliding_attention"}
        assert new["rope_parameters"]["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
    if schema != "v5":
        assert new["rope_scaling"]["type"] == "yarn" and new["rope_local_base_freq"] == 10000.0
    else:
        assert "rope_scaling" not in new and "rope_local_base_freq" not in new
    model = read_model_rope(new)
    assert compare(built(new), expected_ropes(rope, model.layer_ropes)) <= 1e-5
    assert model.layer_ropes["sliding_attention"].rope_theta == 10000.0


def test_gemma3_truncate_false_refused() -> None:
    from ropectl.errors import MethodError

    with pytest.raises(MethodError, match="truncate"):
        apply_to_config(GEMMA3, MethodSpec("yarn", 2.0, (("truncate", False),)))


def test_stale_top_level_original_is_updated() -> None:
    stale = {**LLAMA, "original_max_position_embeddings": 2048}
    new, rope = apply_to_config(stale, MethodSpec("yarn", 2.0))
    assert new["original_max_position_embeddings"] == 4096 == rope.original_max_position_embeddings
    assert compare(built(new), {"main": rope}) <= 1e-5


def test_phi3_class_default_original_is_always_written() -> None:
    phi3 = {**LLAMA, "model_type": "phi3", "max_position_embeddings": 1024}  # Phi3Config defaults it to 4096
    n = 8
    spec = MethodSpec("longrope", 4.0, (("short_factor", [1.0] * n), ("long_factor", [2.0] * n)))
    new, rope = apply_to_config(phi3, spec)
    assert new["original_max_position_embeddings"] == 1024
    assert compare(built(new), {"main": rope}) <= 1e-5


def test_text_config_wrapper_is_written_inside() -> None:
    wrapped = {"model_type": "gemma3", "text_config": dict(GEMMA3), "ropectl": {"layout": "half-split"}}
    new, _ = apply_to_config(wrapped, MethodSpec("linear", 2.0))
    assert new["text_config"]["rope_scaling"]["factor"] == 2.0 and "rope_scaling" not in new
    assert new["ropectl"]["layout"] == "half-split" and "ropectl" not in new["text_config"]


def test_neox_partial_rotary_survives_v4_form() -> None:
    neox = {"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 96,
            "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 256,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}}
    for schema in ("v4", "both"):
        new, rope = apply_to_config(neox, MethodSpec("ntk", 2.0), schema=schema)
        assert new["rotary_pct"] == 0.25 and new["rotary_emb_base"] == pytest.approx(rope.rope_theta)
        assert compare(built(new), {"main": rope}) <= 1e-5


METHOD_OPTIONS = {
    "linear": st.just(()),
    "ntk": st.just(()),
    "dynamic": st.just(()),
    "yarn": st.tuples(st.sampled_from([16.0, 32.0, 64.0]), st.sampled_from([0.5, 1.0, 2.0])).map(
        lambda b: (("beta_fast", b[0]), ("beta_slow", b[1]))),
    "llama3": st.sampled_from([(), (("low_freq_factor", 2.0), ("high_freq_factor", 8.0))]),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    method=st.sampled_from(sorted(METHOD_OPTIONS)),
    data=st.data(),
    factor=st.floats(min_value=1.01, max_value=64.0, allow_nan=False),
    theta=st.sampled_from([1e4, 5e5, 1e6]),
    schema=st.sampled_from(["both", "v4", "v5"]),
)
def test_round_trip(method: str, data: st.DataObject, factor: float, theta: float, schema: str) -> None:
    """read(apply(config)) is the RoPE apply returned, and transformers builds the same frequencies."""
    options = data.draw(METHOD_OPTIONS[method])
    config = {**LLAMA, "rope_theta": theta}
    new, rope = apply_to_config(config, MethodSpec(method, factor, options), schema=schema)
    back = read_model_rope(new).rope
    assert back.rope_type == rope.rope_type and math.isclose(back.rope_theta, rope.rope_theta)
    assert dict(back.scaling) == dict(rope.scaling)
    assert back.max_position_embeddings == rope.max_position_embeddings
    assert compare(built(new), {"main": rope}) <= 1e-5
    # Independent oracle: what transformers builds equals the formula written apart from ropectl (float32 there).
    inv, attention = built(new)["main"]
    want, want_attention = rope_reference.expected(method, theta, 16, factor, 4096, dict(options))
    assert rope_reference.max_rel_error(inv, want) <= 1e-5 and math.isclose(attention, want_attention, rel_tol=1e-6)
    again, rope2 = apply_to_config(new, MethodSpec(method, factor, options), schema=schema)
    assert rope2 == rope  # re-applying composes from the recorded base: no stacking


def test_reference_formulas_match_the_worked_example() -> None:
    """The reference itself, checked against the documented YaRN example (theta 5e5, d 128, L 8192, s 4)."""
    inv, attention = rope_reference.yarn(5e5, 128, 4.0, 8192)
    base = rope_reference.default(5e5, 128)
    ramped = [j for j, (a, b) in enumerate(zip(inv, base, strict=True)) if not math.isclose(a, b) and not
              math.isclose(a, b / 4)]
    assert (ramped[0], ramped[-1]) == (19, 34) and math.isclose(attention, 1.138629, rel_tol=1e-6)  # dims 18-35 ramp
    assert inv[17] == base[17] and math.isclose(inv[35], base[35] / 4)


def test_round_trip_oracle_catches_a_wrong_factor() -> None:
    """Negative control: a config written with the factor off by 1% fails the independent oracle."""
    new, _ = apply_to_config({**LLAMA}, MethodSpec("linear", 4.0, ()), schema="v4")
    new["rope_scaling"] = {**new["rope_scaling"], "factor": 4.04}
    inv, _ = built(new)["main"]
    assert rope_reference.max_rel_error(inv, rope_reference.linear(5e5, 16, 4.0)) > 1e-3
