"""patch's forward check: a tiny copy of the written config (``ropectl.patch.tiny``) run through transformers' own
forward past the trained length.

The rotary comparison (``ropectl.patch.verify``) checks the frequencies transformers builds; this checks that the
model runs with them: its attention may read rope keys the rotary class never does (Ministral 3's
``llama_4_scaling_beta``), switch tables by length (dynamic, LongRoPE), or skip RoPE on some layers. The copy has the
model's own head size and rope section, a few layers, and random weights; it runs eight positions ending past the
trained length (the target where that is longer), so the logits must be finite, and every rotary output the forward
computes must be ``cos/sin(position x inv_freq) x attention factor`` as ropectl computes them at that length.

A failure is refused when the unpatched config's copy runs (the patch broke the model); where the unpatched copy
fails too, the architecture cannot be run this way, and the check says so instead of claiming it ran.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import VerificationError
from ropectl.rope.frequencies import compute_frequencies
from ropectl.rope.methods import effective_factor
from ropectl.rope.params import RopeParams

TOKENS = 8
MAGNITUDE_TOL = 1e-4  # float32 cos/sin
ANGLE_TOL = 1e-3  # radians, plus the float32 error of position x inv_freq (below)
ANGLE_REL = 5e-7


@dataclass(frozen=True)
class ForwardCheck:
    first: int  # the positions run: first .. last
    last: int
    layers: int
    rotary_checked: int  # rotary outputs compared with ropectl's frequencies
    skipped: str = ""  # why the model's forward could not be run (its unpatched config fails the same way)

    def to_dict(self) -> dict[str, Any]:
        if self.skipped:
            return {"ran": False, "skipped": self.skipped}
        return {"ran": True, "positions": [self.first, self.last], "layers": self.layers,
                "rotary_outputs_checked": self.rotary_checked}

    @property
    def covers(self) -> str:
        if self.skipped:
            return f"the model's forward was not run ({self.skipped})"
        from ropectl.output import count

        rotary = (f", and its {count(self.rotary_checked, 'rotary output')} equal ropectl's at that length"
                  if self.rotary_checked else "")
        return (f"transformers' own forward of a {self.layers}-layer copy at positions {self.first:,}-{self.last:,} "
                f"gives finite logits{rotary}")


def check_length(expected: Mapping[str, RopeParams]) -> int:
    """The longest length the written RoPE is meant for: max positions, or trained x factor where that is longer."""
    out = 0
    for p in expected.values():
        trained = p.trained_context or 0
        out = max(out, int(p.max_position_embeddings or 0), int(round(trained * (effective_factor(p) or 1.0))), trained)
    return out


def _positions(expected: Mapping[str, RopeParams], length: int | None) -> range:
    trained = max((p.trained_context or 0 for p in expected.values()), default=0)
    end = max(int(length or check_length(expected)), trained + TOKENS, TOKENS)
    return range(end - TOKENS, end)


def _model(tiny: Any) -> Any:
    from transformers import AutoModel, AutoModelForCausalLM

    for auto in (AutoModelForCausalLM, AutoModel):
        try:
            return auto.from_config(tiny, attn_implementation="eager")
        except ValueError:  # no class registered for this text config: the next, then its module's own
            continue
    return _own_class(tiny)._from_config(tiny, attn_implementation="eager")


def _own_class(tiny: Any) -> Any:
    """The model class of a text config no auto class maps (a composite's sub-model): its modeling module's class
    whose config_class it is, a causal-LM head first."""
    import importlib

    module = importlib.import_module(type(tiny).__module__.replace(".configuration_", ".modeling_"))
    found = [c for c in vars(module).values() if isinstance(c, type) and getattr(c, "config_class", None) is type(tiny)
             and hasattr(c, "_from_config")]
    found.sort(key=lambda c: (not c.__name__.endswith("ForCausalLM"), not c.__name__.endswith("Model"), c.__name__))
    if not found:
        raise ValueError(f"no model class for {type(tiny).__name__}")
    return found[0]


def _first_half(t: Any, width: int) -> Any:
    """The ``width`` frequencies of a cos/sin row: rotate-half repeats them, interleaved layouts alternate them."""
    import torch

    if t.shape[-1] == width:
        return t
    if t.shape[-1] == 2 * width and torch.equal(t[..., :width], t[..., width:]):
        return t[..., :width]
    if t.shape[-1] == 2 * width and torch.equal(t[..., 0::2], t[..., 1::2]):
        return t[..., 0::2]
    return None


def _rotary_error(call: tuple[Any, Any, Any], expected: Mapping[str, RopeParams]) -> str | None:
    """How one rotary output differs from ropectl's frequencies (None: equal, or not a layout that can be read)."""
    import torch

    positions, layer_type, out = call
    label = layer_type if layer_type in expected else next(iter(expected)) if len(expected) == 1 else None
    candidates = [label] if label else list(expected)
    pos = positions.reshape(-1, positions.shape[-1])[0].double()
    if torch.is_tensor(out) and out.is_complex():  # Llama 4: cos + i sin per frequency
        cos, sin = out.real, out.imag
    elif isinstance(out, tuple) and len(out) == 2:
        cos, sin = out
    else:
        return None
    errors = []
    for name in candidates:
        params = expected[name]
        freqs = compute_frequencies(params, int(pos.max().item()) + 1)
        inv = torch.tensor(freqs.inv_freq, dtype=torch.float64)
        c = _first_half(cos.reshape(-1, pos.numel(), cos.shape[-1])[0].double(), len(inv))
        s = _first_half(sin.reshape(-1, pos.numel(), sin.shape[-1])[0].double(), len(inv))
        if c is None or s is None:
            return None
        angle = pos[:, None] * inv[None, :]
        got = torch.atan2(s, c)
        wrapped = torch.remainder(got - angle + math.pi, 2 * math.pi) - math.pi
        tol = ANGLE_TOL + angle.abs() * ANGLE_REL
        magnitude = (c.square() + s.square()).sqrt()
        att = (magnitude - freqs.attention_factor).abs().max().item() / freqs.attention_factor
        bad = (wrapped.abs() > tol) & (magnitude > 1e-6)
        if not bad.any() and att <= MAGNITUDE_TOL:
            return None
        errors.append(f"{name}: {int(bad.sum())} angles off, attention {magnitude.max().item():.6g} vs "
                      f"{freqs.attention_factor:.6g}")
    return "; ".join(errors)


def run_forward(config: Any, expected: Mapping[str, RopeParams] | None, length: int | None = None) -> ForwardCheck:
    """Run the tiny copy of ``config`` (a loaded transformers config); raises what the forward raises, or
    VerificationError when its logits are not finite or a rotary output differs from ``expected`` (None: only
    the logits are checked)."""
    import torch

    from ropectl.patch.tiny import tiny_text_config

    tiny = tiny_text_config(config)
    torch.manual_seed(0)
    model = _model(tiny).eval()
    calls: list[tuple[Any, Any, Any]] = []

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        ids = kwargs.get("position_ids", args[1] if len(args) > 1 else None)
        layer = kwargs.get("layer_type", args[2] if len(args) > 2 else None)
        if torch.is_tensor(ids):
            calls.append((ids.detach(), layer, out))

    for name, module in model.named_modules():
        kind = type(module).__name__
        if kind.endswith("RotaryEmbedding") and not any(w in kind or w in name for w in ("Vision", "vision", "Audio")):
            module.register_forward_hook(hook, with_kwargs=True)
    positions = _positions(expected or {}, length)
    ids = torch.randint(0, int(getattr(tiny, "vocab_size", 256) or 256), (1, TOKENS))
    pos = torch.tensor([list(positions)])
    with torch.no_grad():
        out = model(input_ids=ids, position_ids=pos, attention_mask=torch.ones_like(ids), use_cache=False)
    values = out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
    if not torch.isfinite(values).all():
        raise VerificationError(f"transformers' forward of the patched config gives non-finite logits at positions "
                                f"{positions.start:,}-{positions.stop - 1:,}", "nothing was written; report this "
                                "with the command line and config.json")
    checked = 0
    for call in calls if expected else ():
        error = _rotary_error(call, expected)
        if error:
            raise VerificationError(
                f"transformers' forward computes other RoPE than ropectl at positions {positions.start:,}-"
                f"{positions.stop - 1:,} ({error}): this model's attention builds RoPE from more than its rope section "
                "(per-layer bases, layers it leaves unscaled), which the written config does not change",
                "nothing was written; use a method this model applies to every layer, or report this with the "
                "command line and config.json")
        checked += 1
    layers = int(getattr(tiny, "num_hidden_layers", 0) or 0)
    return ForwardCheck(positions.start, positions.stop - 1, layers, checked)


def _load(folder: Path) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(folder))


def _source_runs(source: Mapping[str, Any] | None, length: int) -> str | None:
    """None when the unpatched config's copy runs; else why it does not."""
    from ropectl.output import dumps

    with tempfile.TemporaryDirectory(prefix="ropectl-forward-") as tmp:
        (Path(tmp) / "config.json").write_text(dumps(source), encoding="utf-8")
        try:
            run_forward(_load(Path(tmp)), None, length)
        except Exception as exc:  # any failure of the model's own code: the architecture cannot run this way
            return f"{type(exc).__name__}: {exc}"
    return None


def check_forward(config: Any, expected: Mapping[str, RopeParams], source: Mapping[str, Any] | None = None,
                  length: int | None = None) -> ForwardCheck:
    """``run_forward``, with a failure refused unless the unpatched ``source`` config fails the same way."""
    try:
        return run_forward(config, expected, length)
    except VerificationError as exc:
        if "non-finite" not in exc.problem:
            raise
        failure = exc.problem
    except Exception as exc:  # what transformers' own code raises on the written config
        failure = f"{type(exc).__name__}: {exc}"
    positions = _positions(expected, length)
    own = _source_runs(source, positions.stop) if source is not None else None
    if own is None:
        raise VerificationError(
            f"transformers' forward fails on the patched config (a tiny copy at positions {positions.start:,}-"
            f"{positions.stop - 1:,}: {' '.join(failure.split())[:300]})"
            + (", while the unpatched config runs" if source is not None else ""),
            "nothing was written; report this with the command line and config.json")
    return ForwardCheck(positions.start, positions.stop - 1, 0, 0,
                        skipped=f"a tiny copy of this architecture fails unpatched too: {' '.join(own.split())[:200]}")
