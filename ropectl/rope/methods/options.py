"""A method choice as users write it (``yarn:4,beta_fast=16``), its typed options, and applying it to a base RoPE."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ropectl.errors import MethodError
from ropectl.limits import MAX_FACTOR
from ropectl.output import plain
from ropectl.rope.methods.common import is_prope, trained_length
from ropectl.rope.methods.registry import Method, Param, get_method
from ropectl.rope.params import RopeParams

# The spec key that names a JSON file holding a method's list options (``longrope:4,file=factors.json``).
FILE_KEY = "file"


@dataclass(frozen=True)
class MethodSpec:
    """A method choice as a user writes it: ``yarn:4,beta_fast=16``, or ``longrope:4,file=factors.json``.

    ``file`` is where the method's list options came from (its ``factors_file`` keys): the label then names the
    file instead of spelling the lists out, so it stays short and can be typed again.
    """

    name: str
    factor: float | None = None
    options: tuple[tuple[str, Any], ...] = ()
    file: str | None = None

    @property
    def label(self) -> str:
        text = self.name if self.factor is None else f"{self.name}:{self.factor:g}"
        options = self.options
        if self.file is not None:
            from_file = get_method(self.name).factors_file
            text += f",{FILE_KEY}={self.file}"
            options = tuple((k, v) for k, v in options if k not in from_file)
        return text + "".join(f",{k}={plain(v)}" for k, v in options)


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
    if method.validate is not None:
        method.validate(out, rotary_dim)
    return out


def resolve_file(spec: MethodSpec) -> MethodSpec:
    """``spec`` with the lists of the factors file it names under its own options (``longrope:4,file=F``): the one
    place such a file is read. A no-op without a file, or when the spec already holds every list."""
    if spec.file is None:
        return spec
    keys = get_method(spec.name).factors_file
    given = dict(spec.options)
    if all(k in given for k in keys):
        return spec
    from ropectl.rope.factors_file import read_factors_file

    return replace(spec, options=tuple({**read_factors_file(Path(spec.file), keys), **given}.items()))


def apply_method(base: RopeParams, spec: MethodSpec) -> RopeParams:
    """The RoPE a model should use after scaling its unscaled ``base`` as ``spec`` says (a target length is turned
    into a factor before, by ``factor_for_target``)."""
    spec = resolve_file(spec)
    method = get_method(spec.name)
    _check_prope(base, method.name)
    options = validate_options(method, dict(spec.options), base.rotary_dim)
    if options.get("original_max_position_embeddings"):
        base = base.with_(scaling={"original_max_position_embeddings": options["original_max_position_embeddings"]})
    return method.build(base, check_factor(method, spec.factor), options)


def _check_prope(base: RopeParams, name: str) -> None:
    if is_prope(base) and not get_method(name).keeps_prope:
        raise MethodError(
            f"method '{name}' would replace this model's proportional RoPE (p-RoPE) with one that rotates fewer "
            "dimensions than its attention expects",
            "use --method proportional (position interpolation on p-RoPE) or --method ntk",
        )
    if get_method(name).prope and not is_prope(base):
        raise MethodError(
            f"method '{name}' keeps a p-RoPE model's layout (Gemma 4, LFM3), and this model is not p-RoPE",
            "use --method linear for plain position interpolation",
        )


def parse_spec(text: str) -> MethodSpec:
    """Parse ``name[:factor][,key=value...]``; ``file=PATH`` names the JSON file of a method's list options
    (longrope's factors), read when the spec is applied (:func:`resolve_file`), not here: reading a results label
    back to its method needs no file."""
    head, *rest = [part.strip() for part in text.split(",")]
    name, _, factor_text = head.partition(":")
    if not name:
        raise MethodError(f"malformed method spec '{text}'", "write name[:factor][,key=value...], e.g. yarn:4")
    method = get_method(name)
    factor = _finite("factor", factor_text) if factor_text else None
    options, file = [], None
    for part in rest:
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise MethodError(f"malformed option '{part}' in method spec '{text}'", "write key=value, e.g. beta_fast=16")
        if key.strip() == FILE_KEY:
            file = _file_option(method, value.strip())
            continue
        options.append((key.strip(), parse_value(method.param(key.strip()), value.strip())))
    return MethodSpec(method.name, factor, tuple(options), file)


def _file_option(method: Method, value: str) -> str:
    if not method.factors_file:
        raise MethodError(f"method '{method.name}' takes no {FILE_KEY}= option (only methods with list options do, "
                          "e.g. longrope)", f"drop {FILE_KEY}=")
    if not value:
        raise MethodError(f"{FILE_KEY}= names no file", f"write {FILE_KEY}=factors.json")
    return value
