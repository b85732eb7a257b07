"""The scaling-method registry shared by ``patch`` and ``eval-ppl``.

A method turns the unscaled base RoPE of a model (theta, rotary dim, trained context) plus a factor
and options into the :class:`RopeParams` the scaled model should use, in transformers' terms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ropectl.errors import MethodError
from ropectl.limits import MAX_FACTOR
from ropectl.rope.builders import (
    build_dynamic,
    build_linear,
    build_llama3,
    build_longrope,
    build_none,
    build_ntk,
    build_proportional,
    build_yarn,
    is_prope,
    trained_length,
)
from ropectl.rope.params import YARN_DEFAULT_BETAS, RopeParams


@dataclass(frozen=True)
class Param:
    name: str
    kind: type  # float, int, bool or list (of floats)
    default: Any = None
    help: str = ""


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    params: tuple[Param, ...]
    build: Callable[[RopeParams, float, Mapping[str, Any]], RopeParams]
    uses_factor: bool = True
    # llama.cpp's rope.scaling.type, or None where GGUF metadata cannot express the method.
    gguf_type: str | None = None
    # Why max_position_embeddings is what it is; shown by `patch` and docs/write-form.md.
    max_position_rule: str = "raised to the target context"

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.params) or "none"
        raise MethodError(f"method '{self.name}' has no option '{name}'", f"use one of: {known}")


@dataclass(frozen=True)
class MethodSpec:
    """A method choice as a user writes it: ``yarn:4,beta_fast=16``."""

    name: str
    factor: float | None = None
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        text = self.name if self.factor is None else f"{self.name}:{self.factor:g}"
        return text + "".join(f",{k}={_fmt(v)}" for k, v in self.options)


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


_ORIGINAL = Param("original_max_position_embeddings", int, None, "pretraining context (default: from the config)")

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("none", "unscaled RoPE (the base model)", (), build_none, uses_factor=False, gguf_type="none",
               max_position_rule="reset to the trained context"),
        Method("linear", "position interpolation: every frequency divided by the factor", (_ORIGINAL,), build_linear,
               gguf_type="linear"),
        Method("ntk", "static NTK-aware: rope_theta raised to theta*s^(d/(d-2))", (_ORIGINAL,), build_ntk,
               gguf_type="none"),
        Method("dynamic", "dynamic NTK: theta grows with the sequence length past the trained context", (_ORIGINAL,),
               build_dynamic, max_position_rule="kept at the trained context (scaling starts past it)"),
        Method("yarn", "YaRN: interpolate low frequencies, keep high ones, scale attention", (
            _ORIGINAL,
            Param("beta_fast", float, YARN_DEFAULT_BETAS["beta_fast"], "rotations where the ramp ends (keep)"),
            Param("beta_slow", float, YARN_DEFAULT_BETAS["beta_slow"], "rotations where the ramp starts (interpolate)"),
            Param("attention_factor", float, None, "cos/sin scale (default 0.1 ln s + 1)"),
            Param("mscale", float, None, "DeepSeek-style mscale"),
            Param("mscale_all_dim", float, None, "DeepSeek-style mscale_all_dim"),
            Param("truncate", bool, True, "round the ramp ends to whole dimensions"),
        ), build_yarn, gguf_type="yarn"),
        Method("llama3", "Llama 3.1: wavelength bands, smooth blend between them", (
            _ORIGINAL,
            Param("low_freq_factor", float, 1.0, "wavelengths above original/low are interpolated"),
            Param("high_freq_factor", float, 4.0, "wavelengths below original/high are kept"),
        ), build_llama3),
        Method("longrope", "LongRoPE: per-dimension rescale factors (short and long lists)", (
            _ORIGINAL,
            Param("short_factor", list, None, "rotary_dim/2 factors used up to the original length"),
            Param("long_factor", list, None, "rotary_dim/2 factors used beyond it"),
            Param("attention_factor", float, None, "cos/sin scale (default sqrt(1+ln s/ln L))"),
        ), build_longrope, gguf_type="longrope"),
        Method("proportional", "p-RoPE (Gemma 4): every frequency divided by the factor, unrotated pairs kept at 0", (
            Param("partial_rotary_factor", float, None, "share of each head that rotates (default: the model's)"),
        ), build_proportional),
    )
}
# A p-RoPE model's attention expects head_dim/2 frequencies with zeros past the rotated share; these keep that.
PROPORTIONAL_METHODS = ("none", "ntk", "proportional")


def get_method(name: str) -> Method:
    try:
        return METHODS[name.strip().lower()]
    except KeyError:
        raise MethodError(f"unknown method '{name}'", f"use one of: {', '.join(METHODS)}") from None


def parse_value(param: Param, raw: Any) -> Any:
    """Convert a CLI/TOML value to the parameter's type, with a clear error."""
    if param.kind is list:
        values = raw if isinstance(raw, (list, tuple)) else str(raw).replace(";", ",").split(",")
        return [_finite(param.name, v) for v in values if str(v).strip()]
    if param.kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in {"true", "false", "1", "0", "yes", "no"}:
            raise MethodError(f"option '{param.name}' must be true or false, got '{raw}'", "write true or false")
        return text in {"true", "1", "yes"}
    value = _finite(param.name, raw)
    if param.kind is int:
        if value != int(value) or value <= 0:
            raise MethodError(f"option '{param.name}' must be a positive integer, got '{raw}'", "pass e.g. 8192")
        return int(value)
    return value


def _finite(name: str, raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise MethodError(f"'{name}' must be a number, got '{raw}'", f"pass a number, e.g. {name}=4") from None
    if not math.isfinite(value):
        raise MethodError(f"'{name}' must be finite, got '{raw}'", "pass a finite number")
    return value


def check_factor(method: Method, factor: float | None) -> float:
    if not method.uses_factor:
        return 1.0
    if factor is None:
        raise MethodError(f"method '{method.name}' needs a factor", "pass --factor F or --target-length N")
    value = _finite("factor", factor)
    if value > MAX_FACTOR:  # beyond it, target lengths and NTK bases overflow
        raise MethodError(f"factor {factor:g} is above the limit of {MAX_FACTOR:g}", "pass a realistic factor, e.g. 4")
    if value <= 1:
        raise MethodError(
            f"factor {factor} does not extend the context (it must be > 1)",
            "pass a factor above 1, e.g. 4 for a 4x longer context",
        )
    return value


def factor_for_target(base: RopeParams, target_length: int) -> float:
    trained = trained_length(base)
    if target_length <= trained:
        raise MethodError(
            f"target length {target_length} is not beyond the trained context {trained}",
            f"pass a target length above {trained}",
        )
    return target_length / trained


def validate_options(method: Method, options: Mapping[str, Any], rotary_dim: int) -> dict[str, Any]:
    """Typed options with defaults filled; raises MethodError on anything inconsistent."""
    out = {p.name: p.default for p in method.params}
    for key, raw in options.items():
        out[key] = parse_value(method.param(key), raw)
    if method.name == "llama3" and out["high_freq_factor"] <= out["low_freq_factor"]:
        raise MethodError("llama3 needs high_freq_factor > low_freq_factor", "e.g. low_freq_factor=1,high_freq_factor=4")
    if method.name == "yarn" and not 0 < out["beta_slow"] < out["beta_fast"]:
        raise MethodError("yarn needs 0 < beta_slow < beta_fast", "e.g. beta_fast=32,beta_slow=1")
    partial = out.get("partial_rotary_factor")
    if partial is not None and not 0 < partial <= 1:
        raise MethodError(f"partial_rotary_factor must be in (0, 1], got {partial}", "e.g. partial_rotary_factor=0.25")
    if method.name == "yarn" and rotary_dim % 2:
        raise MethodError(
            f"the rotary dim {rotary_dim} is odd: transformers' yarn ramp then has one value less than the "
            "frequencies and cannot be built",
            "use --method linear, ntk or dynamic for this model",
        )
    if method.name == "longrope":
        pairs = (rotary_dim + 1) // 2
        for key in ("short_factor", "long_factor"):
            values = out.get(key)
            if not values or len(values) != pairs:
                got = len(values) if values else 0
                raise MethodError(
                    f"longrope {key} has {got} values but the rotary dim {rotary_dim} needs {pairs}",
                    f"give {pairs} comma-separated factors, or a JSON file with both lists",
                )
    return out


def apply_method(base: RopeParams, spec: MethodSpec, target_length: int | None = None) -> RopeParams:
    """The RoPE a model should use after scaling its unscaled ``base`` as ``spec`` says."""
    method = get_method(spec.name)
    _check_prope(base, method.name)
    factor = spec.factor
    if target_length is not None and method.uses_factor:
        factor = factor_for_target(base, target_length)
    options = validate_options(method, dict(spec.options), base.rotary_dim)
    if options.get("original_max_position_embeddings"):
        base = base.with_(scaling={"original_max_position_embeddings": options["original_max_position_embeddings"]})
    return method.build(base, check_factor(method, factor), options)


def _check_prope(base: RopeParams, name: str) -> None:
    if is_prope(base) and name not in PROPORTIONAL_METHODS:
        raise MethodError(
            f"method '{name}' would replace this model's proportional RoPE (p-RoPE) with one that rotates fewer "
            "dimensions than its attention expects",
            "use --method proportional (position interpolation on p-RoPE) or --method ntk",
        )
    if name == "proportional" and not is_prope(base):
        raise MethodError(
            "method 'proportional' keeps a p-RoPE model's layout (Gemma 4, LFM3), and this model is not p-RoPE",
            "use --method linear for plain position interpolation",
        )


def parse_spec(text: str) -> MethodSpec:
    """Parse ``name[:factor][,key=value...]``."""
    head, *rest = [part.strip() for part in text.split(",")]
    name, _, factor_text = head.partition(":")
    if not name:
        raise MethodError(f"malformed method spec '{text}'", "write name[:factor][,key=value...], e.g. yarn:4")
    method = get_method(name)
    factor = _finite("factor", factor_text) if factor_text else None
    options = []
    for part in rest:
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise MethodError(f"malformed option '{part}' in method spec '{text}'", "write key=value, e.g. beta_fast=16")
        options.append((key.strip(), parse_value(method.param(key.strip()), value.strip())))
    return MethodSpec(method.name, factor, tuple(options))
