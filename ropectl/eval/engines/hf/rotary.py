"""Switching a loaded model's RoPE: rebuild each rotary embedding module for a method, and check its frequencies
against ropectl's float64 reference (a method transformers cannot build gets its frequencies installed)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ropectl.errors import VerificationError
from ropectl.eval.engines.hf.load import LoadedModel
from ropectl.eval.model import MethodState
from ropectl.rope.frequencies import compute_frequencies

TOLERANCE = 1e-5  # transformers computes in float32


def _tower(class_name: str) -> bool:
    return any(word in class_name for word in ("Vision", "Audio", "Talker"))


def rotary_modules(model: Any) -> list[tuple[Any, str, Any]]:
    """(parent, attribute, module) for every rotary embedding in the model."""
    found = []
    for parent in model.modules():
        for name, child in parent.named_children():
            kind = type(child).__name__
            # A vision or audio tower's rotary module (2-D axial RoPE) is not the language model's.
            if kind.endswith("RotaryEmbedding") and hasattr(child, "config") and not _tower(kind):
                found.append((parent, name, child))
    return found


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


def verify_rotary(module: Any, state: MethodState, length: int | None, *, problem: str | None = None,
                  fix: str | None = None) -> None:
    """The module's frequencies equal ropectl's float64 reference at ``length``: relative error <= 1e-5, widened to
    twice the buffer's epsilon (against the reference rounded to its dtype) where it is stored in bf16/fp16.

    ``length`` None: the frequencies as built at load time (``original_inv_freq`` where transformers keeps one:
    longrope and dynamic swap ``inv_freq`` during a forward past their original length, as training does).
    ``problem``/``fix``: the caller's words for a mismatch; the measured errors are appended to ``problem``.
    """
    for layer_type, rope in state.ropes.items():
        found = _built(module, layer_type, loaded=length is None)
        if found is None:
            continue  # a layer type without rope parameters: transformers builds no frequencies for it
        inv, scaling = found
        want = compute_frequencies(rope, seq_len=length)
        ref = _rounded(want.inv_freq, inv.dtype)
        got = inv.detach().double().cpu().tolist()
        # p-RoPE's unrotated pairs have frequency 0 on both sides: compared absolutely
        errors = [abs(a - b) / abs(b) if b else abs(a) for a, b in zip(got, ref, strict=False)]
        err = max(errors, default=0.0)
        att = abs(float(scaling) - want.attention_factor) / abs(want.attention_factor)
        tol = _tolerance(inv.dtype)
        if len(got) != len(ref) or not all(e <= tol for e in [*errors, att]):  # NaN fails
            where = f"{layer_type}: " if layer_type else ""
            problem = problem or f"the rebuilt rotary embedding for '{state.label}' does not match ropectl's frequencies"
            raise VerificationError(
                f"{problem} ({where}inv_freq max relative error {err:.2e}, {len(got)} vs {len(ref)} frequencies, attention "
                f"{float(scaling):.6g} vs {want.attention_factor:.6g})",
                fix or "report this model type; results would not measure the method asked for",
            )


def _built(module: Any, layer_type: str, loaded: bool) -> tuple[Any, Any] | None:
    """(inv_freq, attention scaling) of one layer type (per-layer models keep one buffer per type), or None."""
    prefix = f"{layer_type}_" if layer_type and hasattr(module, f"{layer_type}_inv_freq") else ""
    if layer_type and not prefix and not hasattr(module, "inv_freq"):
        return None
    inv = getattr(module, f"{prefix}original_inv_freq", None) if loaded else None
    inv = getattr(module, f"{prefix}inv_freq") if inv is None else inv
    return inv, getattr(module, f"{prefix}attention_scaling", getattr(module, "attention_scaling", 1.0))


def _rounded(values: Any, dtype: Any) -> list[float]:
    """The float64 reference as a buffer of ``dtype`` holds it."""
    import torch

    return torch.tensor(values, dtype=torch.float64).to(dtype).double().tolist()


def _tolerance(dtype: Any) -> float:
    import torch

    return max(TOLERANCE, 2 * torch.finfo(dtype).eps)


@contextmanager
def kept_rotary(model: Any) -> Iterator[None]:
    """Restores every rotary module's buffers and scalar attributes (dynamic's grown base and cached length) on exit."""
    saved = [(module, {k: v.clone() for k, v in module._buffers.items() if v is not None},
              {k: v for k, v in vars(module).items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
             for _, _, module in rotary_modules(model)]
    try:
        yield
    finally:
        for module, buffers, scalars in saved:
            module._buffers.update(buffers)  # copies: longrope updates its inv_freq in place
            for name, value in scalars.items():
                setattr(module, name, value)


def verify_after_forward(loaded: LoadedModel, state: MethodState, length: int) -> None:
    """Length-dependent methods: the frequencies transformers used at ``length`` are the ones we planned with."""
    if state.length_dependent:
        for _, _, module in rotary_modules(loaded.model):
            verify_rotary(module, state, length)
