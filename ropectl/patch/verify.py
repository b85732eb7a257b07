"""Check a written config against ropectl's own RoPE math, through transformers itself.

transformers reloads the config exactly as a user's ``from_pretrained`` would, and builds the model's
rotary embedding class (without the rest of the model), so what is compared is the ``inv_freq`` and
attention scaling the model will really use. Then a tiny copy of the written config runs transformers' own forward
past the trained length (``ropectl.patch.forward``): "verified" means the model ran.
"""

from __future__ import annotations

import logging
import math
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import VerificationError
from ropectl.output import dumps
from ropectl.patch.forward import ForwardCheck, check_forward
from ropectl.rope.frequencies import compute_frequencies
from ropectl.rope.params import RopeParams

REL_TOL = 1e-5  # transformers computes in float32
MAIN = "main"


@dataclass(frozen=True)
class Verification:
    engine: str
    layers: tuple[str, ...]
    max_rel_error: float
    warnings: tuple[str, ...] = ()  # what transformers warned while loading the config: never swallowed
    skipped: str = ""  # why nothing could be compared (a rope type this transformers does not know)
    forward: ForwardCheck | None = None  # the tiny copy's forward (None: not run)

    def to_dict(self) -> dict[str, Any]:
        covers = ("rope frequencies and attention factor as transformers builds them from the written config, "
                  "against ropectl's own")
        if self.forward is not None:
            covers += f"; {self.forward.covers}"
        out = {"engine": self.engine, "layers": list(self.layers),
               "max_rel_error": None if self.skipped else self.max_rel_error,
               "warnings": list(self.warnings),
               "covers": "nothing: transformers cannot build this rope type" if self.skipped else covers}
        if self.forward is not None:
            out["forward"] = self.forward.to_dict()
        return {**out, "skipped": self.skipped} if self.skipped else out


# transformers messages that say nothing about the RoPE a checkpoint describes.
_NOISE = ("torch_dtype", "`rope_scaling` is deprecated", "rope_scaling` was renamed")


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def transformers_warnings() -> Iterator[list[str]]:
    """Collect what transformers logs or warns inside the block (its logger is silenced meanwhile)."""
    collect = _Collect()
    logger = logging.getLogger("transformers")
    # transformers' own handler would print them too: they are reported once, as ropectl warnings.
    saved = logger.handlers[:], logger.propagate, logger.level
    logger.handlers, logger.propagate = [collect], False
    logger.setLevel(min(logger.getEffectiveLevel(), logging.WARNING))
    # warning_once caches what it said: a second patch in the same process must hear it again.
    getattr(getattr(logging.Logger, "warning_once", None), "cache_clear", lambda: None)()
    out: list[str] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield out
    finally:
        logger.handlers, logger.propagate = saved[0], saved[1]
        logger.setLevel(saved[2])
    seen = [*collect.messages, *(str(w.message) for w in caught)]
    out.extend(m for m in dict.fromkeys(" ".join(m.split()) for m in seen) if not any(n in m for n in _NOISE))


def _module_for(model_type: str) -> Any:
    import importlib

    from transformers.models.auto.configuration_auto import model_type_to_module_name

    name = model_type_to_module_name(model_type)
    try:
        return importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    except ImportError:
        raise VerificationError(
            f"transformers has a config class but no modeling code for model type '{model_type}' (it runs as "
            "remote code), so the patched RoPE cannot be verified against it",
            "patch a model type that transformers implements, or edit this config by hand",
        ) from None


def rotary_class(config: Any) -> type:
    """The model's own rotary embedding class, e.g. ``LlamaRotaryEmbedding``."""
    module = _module_for(config.model_type)
    prefix = type(config).__name__.replace("TextConfig", "").replace("Config", "")
    names = [n for n in dir(module) if n.endswith("RotaryEmbedding") and isinstance(getattr(module, n), type)]
    preferred = [n for n in names if n == f"{prefix}RotaryEmbedding"] or sorted(names, key=len)
    if not preferred:
        raise VerificationError(
            f"transformers' {config.model_type} module has no rotary embedding class to check against",
            "this architecture cannot be verified; report it",
        )
    return getattr(module, preferred[0])


def transformers_frequencies(folder: Path) -> dict[str, tuple[list[float], float]]:
    """{layer type or "main": (inv_freq, attention_scaling)} as transformers builds them from ``folder``."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(folder))
    except Exception as exc:  # transformers raises ValueError/KeyError/TypeError on a config it rejects
        raise VerificationError(
            f"transformers rejects the patched config ({type(exc).__name__}: {exc})",
            "nothing was written; report this with the model's config.json",
        ) from None
    config = getattr(config, "get_text_config", lambda: config)()
    rotary = rotary_class(config)(config)
    if hasattr(rotary, "inv_freq"):
        return {MAIN: (rotary.inv_freq.double().tolist(), float(rotary.attention_scaling))}
    out = {}
    for layer in sorted(set(getattr(config, "layer_types", None) or ())):
        if hasattr(rotary, f"{layer}_inv_freq"):
            inv = getattr(rotary, f"{layer}_inv_freq").double().tolist()
            out[layer] = (inv, float(getattr(rotary, f"{layer}_attention_scaling")))
    return out


def _rel_error(got: Sequence[float], want: Sequence[float]) -> float:
    if len(got) != len(want):
        return math.inf
    # p-RoPE's unrotated pairs have frequency 0 on both sides: compare those absolutely.
    return max((abs(g - w) / abs(w) if w else abs(g) for g, w in zip(got, want, strict=True)), default=0.0)


def compare(built: Mapping[str, tuple[list[float], float]], expected: Mapping[str, RopeParams]) -> float:
    """Largest relative error; raises VerificationError on any mismatch."""
    worst = 0.0
    for layer, params in expected.items():
        if layer not in built:
            raise VerificationError(f"transformers built no rotary embedding for '{layer}'", "report this")
        inv, attention = built[layer]
        ours = compute_frequencies(params)
        err = max(_rel_error(inv, ours.inv_freq), abs(attention - ours.attention_factor) / ours.attention_factor)
        if not err <= REL_TOL:
            raise VerificationError(
                f"transformers builds different RoPE for '{layer}' than ropectl computed (relative error {err:.2e}, "
                f"{len(inv)} vs {len(ours.inv_freq)} frequencies, attention {attention:.6g} vs "
                f"{ours.attention_factor:.6g})",
                "nothing was written; report this with the command line and config.json",
            )
        worst = max(worst, err)
    return worst


def unknown_to_transformers(expected: Mapping[str, RopeParams]) -> tuple[str, ...]:
    """Rope types in ``expected`` that this transformers cannot build (a method registered outside ropectl)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    return tuple(sorted({p.rope_type for p in expected.values()} - set(ROPE_INIT_FUNCTIONS) - {"default"}))


def verify_folder(folder: Path, expected: Mapping[str, RopeParams], source: Mapping[str, Any] | None = None,
                  length: int | None = None, forward: bool = True) -> Verification:
    """The rotary comparison, then the forward check (``source``: the unpatched config, to tell a patch that breaks
    the model from an architecture whose tiny copy cannot run at all; ``length``: the target the forward reaches)."""
    import transformers
    from transformers import AutoConfig

    version = transformers.__version__
    unknown = unknown_to_transformers(expected)
    if unknown:
        why = (f"transformers {version} has no rope type {', '.join(map(repr, unknown))}, so the written RoPE is "
               "not verified and transformers cannot load this config")
        return Verification(f"transformers {version}", tuple(expected), math.nan, (why,), skipped=why)
    with transformers_warnings() as said:
        built = transformers_frequencies(folder)
    worst = compare(built, expected)
    ran = None
    if forward:
        with transformers_warnings():  # what the tiny copy's sizes make transformers say is not about this checkpoint
            ran = check_forward(AutoConfig.from_pretrained(str(folder)), expected, source, length)
    return Verification(f"transformers {version}", tuple(expected), worst,
                        tuple(f"transformers {version} warned while loading the patched config: {m}" for m in said),
                        forward=ran)


def verify_config(config: Mapping[str, Any], expected: Mapping[str, RopeParams],
                  source: Mapping[str, Any] | None = None, length: int | None = None,
                  forward: bool = True) -> Verification:
    """Verify a config dict before anything is written, from a scratch folder holding only config.json."""
    with tempfile.TemporaryDirectory(prefix="ropectl-verify-") as tmp:
        (Path(tmp) / "config.json").write_text(dumps(config), encoding="utf-8")
        return verify_folder(Path(tmp), expected, source, length, forward)


def expected_ropes(rope: RopeParams, layer_ropes: Mapping[str, RopeParams]) -> dict[str, RopeParams]:
    return dict(layer_ropes) if layer_ropes else {MAIN: rope}
