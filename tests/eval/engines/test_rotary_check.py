"""verify_rotary, the one check of a rotary module against ropectl's frequencies: the modules are built by
transformers itself from a config (the oracle), with negative controls built from another config."""

from __future__ import annotations

from typing import Any

import pytest

from ropectl.errors import VerificationError

BASE = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 1, "intermediate_size": 64, "vocab_size": 32, "max_position_embeddings": 64,
        "rope_theta": 10000.0}
LONGROPE = {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 64,
            "short_factor": [1.0] * 8, "long_factor": [float(i + 2) for i in range(8)]}


def _state(config: dict[str, Any]):
    from ropectl.finetune.build import patched_state

    return patched_state(config, "m")


def _module(config: dict[str, Any]) -> Any:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    return LlamaRotaryEmbedding(LlamaConfig.from_dict(dict(config)))


def test_bf16_buffers_are_checked_at_their_precision() -> None:
    """A bf16 inv_freq (one ulp is 2^-7 relative: far above 1e-5) passes against the config it was built from; another
    scaling factor does not (negative control: frequencies twice as high)."""
    import torch

    from ropectl.runtime.rotary import verify_rotary

    config = {**BASE, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}
    module = _module(config).to(torch.bfloat16)
    assert module.original_inv_freq.dtype == torch.bfloat16
    verify_rotary(module, _state(config), None)
    other = _module({**BASE, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}).to(torch.bfloat16)
    with pytest.raises(VerificationError, match="does not match"):
        verify_rotary(other, _state(config), None)


def test_float32_keeps_the_tight_tolerance() -> None:
    """fp32: a relative change of 1e-4 in every frequency is refused (bf16's tolerance would have let it through)."""
    from ropectl.runtime.rotary import verify_rotary

    module = _module(BASE)
    module.original_inv_freq = module.original_inv_freq * (1 + 1e-4)
    with pytest.raises(VerificationError, match="max relative error 1.0"):
        verify_rotary(module, _state(BASE), None)


def test_longrope_after_a_long_forward_is_checked_as_built() -> None:
    """A forward past the original length swaps longrope's long factors into inv_freq (as training does): at
    length None the frequencies built at load time are compared; at the length the forward ran, the long ones."""
    import torch

    from ropectl.runtime.rotary import verify_rotary

    config = {**BASE, "max_position_embeddings": 256, "rope_scaling": LONGROPE}
    module, state = _module(config), _state(config)
    module(torch.zeros(1, 100, 64), torch.arange(100)[None])
    assert not torch.equal(module.inv_freq, module.original_inv_freq)  # the swap happened
    verify_rotary(module, state, None)
    verify_rotary(module, state, 100)
    with pytest.raises(VerificationError):
        verify_rotary(module, state, 32)  # negative control: the short factors were not in use


def test_the_callers_words_carry_the_measured_error() -> None:
    from ropectl.runtime.rotary import verify_rotary

    with pytest.raises(VerificationError) as info:
        verify_rotary(_module(BASE), _state({**BASE, "rope_theta": 500000.0}), None, problem="trained with other RoPE",
                      fix="rebuild it")
    assert info.value.problem.startswith("trained with other RoPE (inv_freq max relative error ")
    assert info.value.fix == "rebuild it"
