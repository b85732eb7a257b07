"""The fine-tuned checkpoint: one complete folder that keeps its patched RoPE in every engine.

Three layouts, named in the record (``config["ropectl"]["finetune"]["layout"]``):

- ``full``: a full fine-tune, saved as a plain Hugging Face folder.
- ``merged``: LoRA merged into the weights (peft's ``merge_and_unload``), saved the same way.
- ``adapter``: LoRA not merged. OUT is a peft adapter folder (``adapter_config.json``, ``adapter_model.safetensors``)
  whose ``base_model_name_or_path`` is the patched base written beside it as ``OUT/base`` (the source's weights,
  hardlinked from a local safetensors folder, or dequantized from a GGUF), so ``from_pretrained(OUT)`` (transformers
  with peft) and ``PeftModel.from_pretrained`` load it with the patched RoPE, and vLLM serves ``OUT/base`` with
  ``--enable-lora``. OUT has no config.json of its own (transformers 5 would take a folder with one for a complete
  model and look for the base weights in it): ropectl reads an adapter folder's config from its base
  (``ropectl.io.resolve.adapter_base``), so ``inspect``, ``eval-ppl`` and ``recommend`` take OUT itself. The base's
  config carries the fine-tune record. The base is named by its absolute path: moving OUT needs
  ``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(OUT/base), OUT)`` or an edit of that path.

``config.json`` is written last from the patched config the one patch path produced (never from the model's config
object: transformers 5's ``save_pretrained`` rewrites it, and may have let ``rope_theta`` fall back to its default),
then read back by transformers and checked against ropectl's own frequencies, as ``patch`` checks what it writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import CheckpointError, UsageError
from ropectl.finetune import output_weights as weights
from ropectl.io.files import atomic_write_text, check_output_dir, link_tree, real_output, staged_dir
from ropectl.io.weight_files import WEIGHT_SUFFIXES
from ropectl.output import dumps
from ropectl.patch.verify import Verification, expected_ropes, verify_folder
from ropectl.rope.methods import effective_factor
from ropectl.rope.params import RopeParams
from ropectl.schema.read import read_model_rope
from ropectl.schema.record import Record

CONFIG = "config.json"
BASE = "base"  # the adapter layout's patched base, inside OUT
LAYOUTS = ("full", "merged", "adapter")
CONVERTER = "convert_hf_to_gguf.py"  # llama.cpp's converter (the llamacpp-convert compat tier runs it)


@dataclass(frozen=True)
class WrittenCheckpoint:
    """What ``write_checkpoint`` wrote; ``lines`` is the summary, verification first, as ``patch`` reports it."""

    path: Path
    layout: str  # full | merged | adapter
    files: tuple[tuple[str, str], ...]  # (path relative to OUT, how: written / hardlink / copy ...)
    lines: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # how to take it further (a GGUF source: the converter command)
    base: Path | None = None  # the adapter layout's patched base folder
    dtype: str = "float32"

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "layout": self.layout, "dtype": self.dtype,
                "base": str(self.base) if self.base else None,
                "files": [{"path": p, "how": how} for p, how in self.files],
                "lines": list(self.lines), "warnings": list(self.warnings), "notes": list(self.notes)}


def check_output(output: Path, source: Path | None, force: bool) -> None:
    """The refusals of ``write_checkpoint`` that need no model: call before training, so nothing is lost after."""
    check_output_dir(output, source if source is not None and source.is_dir() else None, force)


def layout_of(model: Any, merge: bool) -> str:
    if not weights.is_peft(model):
        if merge:
            raise UsageError("--merge merges a LoRA adapter, but this model was fully fine-tuned", "drop --merge")
        return "full"
    return "merged" if merge else "adapter"


def write_checkpoint(output: Path, model: Any, tokenizer: Any, config: Mapping[str, Any], provenance: Mapping[str, Any],
                     *, merge: bool, dtype: str, force: bool, source: Path | None,
                     target: int | None = None) -> WrittenCheckpoint:
    """Write the fine-tuned ``model`` to ``output`` (staged beside it, renamed when complete).

    ``config``: the patched config dict (``ropectl.schema.apply``), kept as given but for the record's
    ``finetune`` part, the weights' dtype and, where merging untied them, ``tie_word_embeddings``. ``merge`` consumes
    a peft model (``merge_and_unload``). ``source``: the checkpoint trained from (a folder or a ``.gguf``), needed
    for the adapter layout's base. ``target``: the context the summary checks engines at (default: the config's).
    """
    output = real_output(Path(output))
    source = Path(source) if source is not None else None
    check_output(output, source, force)
    layout = layout_of(model, merge)
    if layout == "adapter" and (source is None or not source.exists()):
        raise UsageError("the adapter layout writes the patched base beside the adapter, from the source checkpoint, "
                         "but no local source was given", "pass --merge to write one merged folder")
    torch_dtype = weights.resolve_dtype(dtype, config)
    expected = _expected(config)
    weights.check_trained_rope(model, config)  # the RoPE trained with is the RoPE written
    tied = _ties(config, model)  # before a merge: peft's merge rewrites the model's config
    if layout == "merged":
        model = weights.merged(model)
    final = _final_config(config, provenance, layout, torch_dtype)
    warnings = _untie(final, model) if layout != "adapter" and tied else []
    with staged_dir(output, force=force, command="finetune") as staging:
        files, verified = _write(staging, output, layout, model, tokenizer, final, torch_dtype, source, expected)
    lines = _lines(verified, final, expected, target)
    return WrittenCheckpoint(output, layout, tuple(files), tuple(lines), tuple(warnings),
                             tuple(weights.gguf_notes(source, output, layout)),
                             output / BASE if layout == "adapter" else None, torch_dtype)


def _expected(config: Mapping[str, Any]) -> dict[str, RopeParams]:
    model = read_model_rope(config)
    return expected_ropes(model.rope, model.layer_ropes)


def _final_config(config: Mapping[str, Any], provenance: Mapping[str, Any], layout: str,
                  torch_dtype: str) -> dict[str, Any]:
    """``config`` with the fine-tune's record and the weights' dtype."""
    record = Record.of(config)
    tuned = {**dict(provenance), "layout": layout, "dtype": torch_dtype}
    out = record.with_(finetune=tuned).written_into(config)
    quant = out.get("quantization_config")
    if isinstance(quant, Mapping) and quant.get("quant_method") == "gguf":
        out.pop("quantization_config")  # the weights written are the dequantized floats
    out["torch_dtype"] = torch_dtype  # transformers 4 reads torch_dtype, 5 reads dtype (and torch_dtype)
    if "dtype" in out:
        out["dtype"] = torch_dtype
    return out


def _untie(final: dict[str, Any], model: Any) -> list[str]:
    """peft's modules_to_save trains a copy of tied embeddings while lm_head keeps the original (peft #2777): the
    model that was trained is untied, so it is written untied (lm_head saved) rather than re-tied on load."""
    if not weights.untied(model):
        return []
    final["tie_word_embeddings"] = False
    return ["the config ties lm_head to the input embeddings, but training changed them apart (peft modules_to_save "
            "trains a copy of the embeddings): written untied (tie_word_embeddings false, lm_head saved), as trained; "
            "train with LoraConfig(ensure_weight_tying=True) to keep them tied"]


def _ties(config: Mapping[str, Any], model: Any) -> bool:
    """Whether the config ties lm_head to the embeddings (where it says nothing, the loaded model's: its class
    default)."""
    default = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    return bool(config.get("tie_word_embeddings", default))


def _write(staging: Path, output: Path, layout: str, model: Any, tokenizer: Any, final: dict[str, Any],
           torch_dtype: str, source: Path | None,
           expected: Mapping[str, RopeParams]) -> tuple[list[tuple[str, str]], list[tuple[str, Verification]]]:
    if layout == "adapter":
        assert source is not None
        base_files = _write_base(staging / BASE, source, tokenizer, final, torch_dtype)
        verified = [(f"{BASE}/", verify_folder(staging / BASE, expected))]
        weights.save_adapter(model, staging, torch_dtype, base=output.absolute() / BASE)
        _save_tokenizer(tokenizer, staging)  # AutoTokenizer.from_pretrained(OUT) works as for any folder
        own = [(p, "written") for p in weights.listed(staging, skip=BASE)]
        return own + [(f"{BASE}/{p}", how) for p, how in base_files], verified
    weights.save_full(model, staging, torch_dtype, _ties(final, model))
    _save_tokenizer(tokenizer, staging)
    atomic_write_text(staging / CONFIG, _dump(final))  # last: whatever save_pretrained wrote is replaced
    _check_written(staging, final)
    return [(p, "written") for p in weights.listed(staging)], [("", verify_folder(staging, expected))]


def _write_base(folder: Path, source: Path, tokenizer: Any, final: Mapping[str, Any],
                torch_dtype: str) -> list[tuple[str, str]]:
    """The patched base: the source's weights (hardlinked from a local folder, dequantized from a GGUF) under the
    patched config, as ``patch -o`` writes it. Its config holds the fine-tune's record (layout adapter): the
    record travels with the config ropectl reads for OUT."""
    folder.mkdir()
    files: list[tuple[str, str]] = []
    if source.is_dir():
        files, _ = link_tree(source, folder, copy=False,
                             exclude=lambda rel: rel.parent != Path(".") or not _base_file(rel.name),
                             needed=lambda rel: rel.suffix in WEIGHT_SUFFIXES or rel.name.endswith(".index.json"))
    else:
        weights.save_dequantized(source, folder, torch_dtype)
    _save_tokenizer(tokenizer, folder)
    atomic_write_text(folder / CONFIG, _dump(final))
    _check_written(folder, final)
    linked = {f for f, _ in files}
    return files + [(p, "written") for p in weights.listed(folder) if p not in linked]


def _base_file(name: str) -> bool:
    """The source files a base needs: weights, their index and the generation config (config.json is written)."""
    suffix = Path(name).suffix
    return (suffix in WEIGHT_SUFFIXES and suffix != ".gguf" or name.endswith(".index.json")
            or name == "generation_config.json")


def _save_tokenizer(tokenizer: Any, folder: Path) -> None:
    """The tokenizer with its chat template (tokenizer_config.json or chat_template.jinja, as transformers saves)."""
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))


def _dump(config: Mapping[str, Any]) -> str:
    return dumps(config, indent=2, ensure_ascii=False) + "\n"


def _check_written(folder: Path, config: Mapping[str, Any]) -> None:
    """config.json on disk is the config meant (a later save_pretrained call must not have rewritten it)."""
    if json.loads((folder / CONFIG).read_text(encoding="utf-8")) != json.loads(_dump(config)):
        raise CheckpointError(f"'{folder / CONFIG}' was rewritten after ropectl wrote it",
                              "nothing was written; report this with the transformers version")


def _lines(verified: list[tuple[str, Verification]], final: Mapping[str, Any], expected: Mapping[str, RopeParams],
           target: int | None) -> list[str]:
    """patch's summary: the verification, then each engine reader's view of the written config."""
    from ropectl.readers.parity import engine_views, merge_runs

    lines = []
    for where, v in verified:
        if v.skipped:
            lines.append(f"{where or 'OUT'}: not verified: {v.skipped}")
            continue
        lines.append(f"verified {where or 'OUT'} with {v.engine}: rope frequencies max relative error "
                     f"{v.max_rel_error:.1e}")
        lines += [f"{where or 'OUT'}: {w}" for w in v.warnings]
    length = target or _target(final)
    views = engine_views(final, expected, (None, length) if length else (None,))
    for view in merge_runs(v.to_json() for v in views):
        lines.append(f"{view['reader']}: " + ("same RoPE" if view["agrees"] else view["differs"])
                     + (f"; fix: {view['fix']}" if view.get("fix") else ""))
    return lines


def _target(config: Mapping[str, Any]) -> int | None:
    rope = read_model_rope(config).rope
    original, factor = rope.original_max_position_embeddings, effective_factor(rope)
    if original and factor:
        return int(round(original * factor))
    return rope.max_position_embeddings

