"""A loaded model's rotary embedding modules and the one check of their frequencies against ropectl's float64
reference: what the evaluation engine runs after each method switch, and finetune after building its model."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ropectl.errors import VerificationError
from ropectl.rope.frequencies import compute_frequencies
from ropectl.runtime.model import MethodState

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
