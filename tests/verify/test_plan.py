"""verify's lengths from a config (no weights): the trained context and the target, plus where the method's own
length rule bites (its registry record, ``Method.rule_lengths``), against the rule in the issue, computed by hand:
longrope at its original length and one past it, dynamic at a length that is not the served maximum."""

from __future__ import annotations

import pytest

from ropectl.errors import UsageError
from ropectl.verify.plan import engine_list, make_plan
from ropectl.verify.spec import VerifySpec

BASE = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 128, "rope_theta": 10000.0}


def lengths(rope: dict | None, max_positions: int, target: int | None = None) -> tuple[int, ...]:
    config = {**BASE, "max_position_embeddings": max_positions, **({"rope_scaling": rope} if rope else {})}
    return make_plan(VerifySpec(model="m", target=target, device="cpu", dtype="fp32"), config).lengths


def test_static_methods_score_the_trained_context_and_the_target() -> None:
    assert lengths(None, 256) == (256,)
    assert lengths({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}, 1024) == (256, 1024)
    assert lengths({"rope_type": "linear", "factor": 2.0}, 512, target=768) == (512, 768)


def test_longrope_adds_its_original_length_and_one_past_it() -> None:
    rope = {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
            "original_max_position_embeddings": 256}
    assert lengths(rope, 1024) == (256, 257, 1024)


def test_dynamic_adds_a_length_that_is_not_the_served_maximum() -> None:
    got = lengths({"rope_type": "dynamic", "factor": 4.0}, 256)
    assert got == (256, 640, 1024)  # trained 256, target 256 x 4, and (256 + 1024) / 2


def test_engine_names_are_checked_before_anything_loads() -> None:
    assert engine_list(VerifySpec(model="m", engines=("llama.cpp", "hf"))) == ("transformers", "llama.cpp")
    with pytest.raises(UsageError, match="unknown engine 'vlm'"):
        engine_list(VerifySpec(model="m", engines=("vlm",)))
    with pytest.raises(UsageError, match="--serve vllm"):
        engine_list(VerifySpec(model="m", engines=("llama.cpp",), serve=(("vllm", "--max-model-len 8"),)))
