"""Switching a loaded model's RoPE: rebuild each rotary embedding module for a method, and check its frequencies
against ropectl's float64 reference (a method transformers cannot build gets its frequencies installed)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl.errors import VerificationError
from ropectl.rope.frequencies import compute_frequencies
from ropectl.runtime.load import LoadedModel
from ropectl.runtime.model import MethodState
from ropectl.runtime.rotary import rotary_modules, verify_rotary


def activate(loaded: LoadedModel, state: MethodState) -> None:
    """Rebuild the rotary embedding(s) for ``state`` on the same device/dtype, then verify them."""
    loaded.active = None  # until every module is rebuilt and verified: a failure must not leave a stale label
    modules = rotary_modules(loaded.model)
    if not modules:
        raise VerificationError("found no rotary embedding module in the loaded model",
                                "report this model type; eval-ppl cannot switch its RoPE")
    foreign = _foreign(state)
    full = _config_as_loaded(loaded.model.config, _as_default(state.config) if foreign else dict(state.config))
    for parent, name, old in modules:
        cfg = full if old.config is loaded.model.config else _text(full)
        new = type(old)(cfg)
        ref = next(iter(old.buffers()), None)
        if ref is not None:
            new = new.to(device=ref.device, dtype=ref.dtype if ref.dtype.is_floating_point else None)
        if foreign:
            _install(new, compute_frequencies(state.rope))
        setattr(parent, name, new)
        verify_rotary(new, state, None)
    loaded.active = state.label


def _foreign(state: MethodState) -> bool:
    """A rope type transformers cannot build (a method registered outside ropectl): its frequencies are installed
    into a default rotary module instead. Only one that does not change with the length can be."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    unknown = {r.rope_type for r in state.ropes.values()} - set(ROPE_INIT_FUNCTIONS) - {"default"}
    if unknown and (state.layer_ropes or state.length_dependent):
        raise VerificationError(
            f"rope type '{sorted(unknown)[0]}' is unknown to transformers and per-layer or length-dependent, so it "
            "cannot be installed into the loaded model", "evaluate it where transformers builds it")
    return bool(unknown)


def _as_default(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with its (flat) rope section reduced to default RoPE at the same theta, which transformers builds."""
    out = dict(config)
    theta = (out.get("rope_parameters") or {}).get("rope_theta") or out.get("rope_theta")
    out["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    out.pop("rope_scaling", None)
    return out


def _install(module: Any, want: Any) -> None:
    import torch

    inv = torch.tensor(want.inv_freq, dtype=module.inv_freq.dtype, device=module.inv_freq.device)
    module.inv_freq = inv
    module.original_inv_freq = inv.clone()
    module.attention_scaling = want.attention_factor


def _config_as_loaded(loaded: Any, config: dict[str, Any]) -> Any:
    """``config`` (the checkpoint's, as the method changed it) in the loaded model's config class. A causal LM
    loaded from a vision-language checkpoint (Llama4ForCausalLM from Llama 4's Llama4Config) has the text config
    as its own: it is built from the checkpoint's text section, where the method's rope keys are."""
    cls = type(loaded)
    text = config.get("text_config")
    if isinstance(text, Mapping) and "text_config" not in (getattr(cls, "sub_configs", None) or {}):
        config = dict(text)
    return cls.from_dict(config)


def _text(config: Any) -> Any:
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def verify_after_forward(loaded: LoadedModel, state: MethodState, length: int) -> None:
    """Length-dependent methods: the frequencies transformers used at ``length`` are the ones we planned with."""
    if state.length_dependent:
        for _, _, module in rotary_modules(loaded.model):
            verify_rotary(module, state, length)
