"""What an ``eval-passkey`` run is asked to do: one frozen spec from defaults, a preset and flags.

Flags shared with eval-ppl (methods, lengths, dtype, device, output) parse exactly as there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.eval.settings import TrialRunFields, check_run, merge_settings, parse_methods
from ropectl.rope.methods import MethodSpec, unscaled_name
from ropectl.runtime.lengths import parse_lengths, parse_token_counts

# The embedded default: SmolLM2-135M (trained at 8192), unscaled against dynamic:2 (the demo's
# recommendation), across and past the trained context, three depths, one trial each.
PASSKEY_DEFAULTS: dict[str, Any] = {
    "methods": [unscaled_name(), "dynamic:2"],
    "lengths": ["2k", "8k", "12k"],
    "depths": [0.1, 0.5, 0.9],
    "trials": 1,
}
GENERIC: dict[str, Any] = {"lengths": ["2k", "4k", "8k", "16k"], "depths": [0.0, 0.25, 0.5, 0.75, 1.0], "trials": 5}


@dataclass(frozen=True, kw_only=True)
class PasskeySpec(TrialRunFields):
    """Passkey retrieval: methods x lengths x depths x trials."""

    model: str | None = None
    methods: tuple[MethodSpec, ...] = ()
    lengths: tuple[int, ...] = (2048,)
    depths: tuple[float, ...] = (0.5,)
    trials: int = 1
    seed: int = 0
    key_digits: int = 5

    def __post_init__(self) -> None:
        validate(self)

    def with_(self, **changes: Any) -> PasskeySpec:
        return replace(self, **changes)


def validate(spec: PasskeySpec) -> None:
    from ropectl.eval.engines import check_engine_options

    check_engine_options(spec.engine, spec.tensor_parallel_size, spec.pipeline_parallel_size,
                         spec.distributed_executor_backend)
    if spec.trials < 1:
        raise UsageError(f"--samples must be at least 1, got {spec.trials}", "pass --samples 1 or more")
    if not spec.depths:
        raise UsageError("no depths given", "pass --depths, e.g. 0.1,0.5,0.9 (fractions of the filler)")
    bad = [d for d in spec.depths if not (math.isfinite(d) and 0.0 <= d <= 1.0)]
    if bad:
        raise UsageError(f"depth {bad[0]:g} is outside [0, 1]",
                         "depths are fractions of the filler before the key: 0 = first, 1 = last, e.g. 0.1,0.5,0.9")
    if not 1 <= spec.key_digits <= 30:
        raise UsageError(f"--key-digits must be between 1 and 30, got {spec.key_digits}", "pass e.g. --key-digits 5")
    check_run(spec.dtype, spec.batch_tokens, spec.methods)


def parse_depths(values: str | list[Any] | tuple[Any, ...]) -> tuple[float, ...]:
    items = str(values).split(",") if isinstance(values, str) else [
        part for v in values for part in (str(v).split(",") if isinstance(v, str) else [v])]
    out = []
    for item in (i for i in items if str(i).strip()):
        try:
            out.append(float(item))
        except ValueError:
            raise UsageError(f"depth '{item}' is not a number", "write depths like 0.1,0.5,0.9") from None
    return tuple(sorted(set(out)))


_KEYS = {f.name for f in fields(PasskeySpec)}


def build_passkey_spec(preset: Mapping[str, Any] | None = None, **flags: Any) -> PasskeySpec:
    """Defaults (embedded model: the demo sweep; a MODEL: a generic one), then ``preset``, then flags."""
    layers = [PASSKEY_DEFAULTS if flags.get("model") is None else GENERIC, dict(preset or {})]
    merged = merge_settings(layers, flags, _KEYS, "passkey")
    merged["methods"] = parse_methods(merged.get("methods"))
    merged["lengths"] = parse_lengths(merged["lengths"])
    parse_token_counts(merged, ("batch_tokens",))
    merged["depths"] = parse_depths(merged["depths"])
    if merged.get("out") is not None:
        merged["out"] = Path(merged["out"]).expanduser()
    return PasskeySpec(**merged)
