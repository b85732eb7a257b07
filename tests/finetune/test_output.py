"""The fine-tuned checkpoint (ropectl.finetune.output): each layout loads in transformers with the patched RoPE and
computes what the model in memory computed; merged weights, tied embeddings, the record, and safe writing.

Oracles: transformers itself (from_pretrained, ROPE_INIT_FUNCTIONS on the written config), linear's frequencies by
hand, the LoRA merge formula W + B·A·alpha/r written here, and the in-memory model's logits before writing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import finetuned as ft
from tests.helpers.eval_data import build

LOGIT_TOL = 1e-5  # float32 forwards of the same weights, in another process layout


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny Llama (trained 256, tied embeddings) with a char tokenizer: never modified."""
    return build("llama", tmp_path_factory.mktemp("ft-src") / "src", tie_word_embeddings=True)


@pytest.fixture(scope="module")
def written(source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each layout of linear:4, written once: {layout: (WrittenCheckpoint, in-memory logits)}."""
    return ft.write_layouts(tmp_path_factory.mktemp("ft-out"), source)


def _load(folder: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder)).eval()


def _tensors(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    out: dict[str, Any] = {}
    for path in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(path)))
    return out


@pytest.mark.parametrize("layout", ["full", "merged", "adapter"])
def test_written_folder_computes_the_trained_model(layout: str, written: dict[str, Any]) -> None:
    checkpoint, before = written[layout]
    assert checkpoint.layout == layout
    got = ft.logits(_load(checkpoint.path), ft.ids(300))
    assert float((got - before).abs().max()) <= LOGIT_TOL


def test_adapter_folder_is_not_its_base(written: dict[str, Any]) -> None:
    """Negative control: the base alone (what a reader ignoring the adapter gets) computes something else."""
    checkpoint, before = written["adapter"]
    assert checkpoint.base == checkpoint.path / "base"
    assert not (checkpoint.path / "config.json").exists()  # transformers 5 would take OUT for a complete model
    base = ft.logits(_load(checkpoint.base), ft.ids(300))
    assert float((base - before).abs().max()) > 100 * LOGIT_TOL
    adapter = json.loads((checkpoint.path / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(checkpoint.base.absolute())


@pytest.mark.parametrize("layout", ["full", "merged", "adapter"])
def test_loaded_rope_is_the_patched_one(layout: str, written: dict[str, Any]) -> None:
    import torch
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    checkpoint, _ = written[layout]
    folder = checkpoint.base if layout == "adapter" else checkpoint.path
    inv = _load(checkpoint.path).model.rotary_emb.inv_freq.double()
    built, attention = ROPE_INIT_FUNCTIONS["linear"](AutoConfig.from_pretrained(str(folder)), "cpu")
    by_hand = torch.tensor([1 / (10000.0 ** (2 * i / 16)) / 4 for i in range(8)], dtype=torch.float64)
    assert torch.allclose(inv, built.double(), rtol=1e-6) and attention == 1.0
    assert torch.allclose(inv, by_hand, rtol=1e-6)
    config = json.loads((folder / "config.json").read_text())
    assert config["rope_scaling"] == {"rope_type": "linear", "type": "linear", "factor": 4.0}  # both schemas
    assert config["rope_parameters"]["rope_type"] == "linear" and config["rope_theta"] == 10000.0
    assert any(line.startswith("verified") and "max relative error" in line for line in checkpoint.lines)


def test_merged_weights_are_base_plus_scaled_lora(source: Path, tmp_path: Path) -> None:
    from ropectl.finetune.output import write_checkpoint

    config = ft.patched_config(source, "yarn:4")
    model = ft.lora(ft.build_model(source, config), seed=5)
    pairs = {}
    for name, module in model.named_modules():
        if name.endswith(ft.TARGETS) and hasattr(module, "lora_A"):
            key = name.split("base_model.model.", 1)[1] + ".weight"
            pairs[key] = (module.lora_B["default"].weight.detach().clone(), module.lora_A["default"].weight.detach().clone())
    assert len(pairs) == 2 * len(ft.TARGETS)
    write_checkpoint(tmp_path / "out", model, None, config, ft.PROVENANCE, merge=True, dtype="fp32", force=False,
                     source=source)
    base, merged = _tensors(source), _tensors(tmp_path / "out")
    for key, (b, a) in pairs.items():
        want = base[key] + (b @ a) * (ft.ALPHA / ft.RANK)
        assert float((merged[key] - want).abs().max()) <= 1e-6, key
        assert float((merged[key] - base[key]).abs().max()) > 1e-2  # the merge is not trivial
    untouched = [k for k in base if "mlp" in k]
    assert untouched and all(bool((merged[k] == base[k]).all()) for k in untouched)


def test_tied_embeddings_stay_tied_after_merge(written: dict[str, Any]) -> None:
    checkpoint, _ = written["merged"]
    assert "lm_head.weight" not in _tensors(checkpoint.path)
    config = json.loads((checkpoint.path / "config.json").read_text())
    assert config["tie_word_embeddings"] is True
    model = _load(checkpoint.path)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_embeddings_trained_through_a_copy_are_written_untied(source: Path, tmp_path: Path) -> None:
    """peft #2777: modules_to_save trains a copy of the tied embeddings; lm_head keeps the original. The trained
    model is untied, and so is what is written (re-tying would change every logit)."""
    import torch

    from ropectl.finetune.output import write_checkpoint

    config = ft.patched_config(source, "linear:4")
    model = ft.lora(ft.build_model(source, config), modules_to_save=("embed_tokens",))
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "modules_to_save" in name:
                weight.add_(0.3)
    before = ft.logits(model, ft.ids(100))
    out = write_checkpoint(tmp_path / "out", model, None, config, ft.PROVENANCE, merge=True, dtype="fp32",
                           force=False, source=source)
    assert any("untied" in w for w in out.warnings)
    saved = _tensors(out.path)
    assert float((saved["lm_head.weight"] - saved["model.embed_tokens.weight"]).abs().max()) > 0.1
    assert json.loads((out.path / "config.json").read_text())["tie_word_embeddings"] is False
    assert float((ft.logits(_load(out.path), ft.ids(100)) - before).abs().max()) <= LOGIT_TOL


def test_record_round_trips(written: dict[str, Any]) -> None:
    from ropectl.io.resolve import resolve_model
    from ropectl.schema.record import Record

    for layout, (checkpoint, _) in written.items():
        resolved = resolve_model(checkpoint.path)  # the adapter folder: read from its base
        record = Record.of(resolved.config)
        assert record.finetune == {**ft.PROVENANCE, "method": "linear:4", "layout": layout, "dtype": "float32"}
        assert record.method == "linear:4" and record.base is not None and record.base.trained_context == 256
        assert Record.from_json(record.to_json()) == record


def test_model_config_is_not_what_is_written(source: Path, tmp_path: Path) -> None:
    """transformers 5's save_pretrained writes the v5 form only (no rope_scaling, no top-level rope_theta): the
    file written is the patched config as given, both schemas (a plain save_pretrained is the negative control)."""
    config = ft.patched_config(source, "yarn:4")
    model = ft.build_model(source, config)
    model.save_pretrained(str(tmp_path / "plain"))
    plain = json.loads((tmp_path / "plain" / "config.json").read_text())
    assert "rope_scaling" not in plain
    from ropectl.finetune.output import write_checkpoint

    out = write_checkpoint(tmp_path / "out", model, None, config, ft.PROVENANCE, merge=False, dtype="fp32",
                           force=False, source=source)
    written = json.loads((out.path / "config.json").read_text())
    assert {k: v for k, v in written.items() if k not in ("ropectl", "torch_dtype", "dtype")} == \
        {k: v for k, v in config.items() if k not in ("ropectl", "torch_dtype", "dtype")}
    assert written["rope_scaling"]["rope_type"] == "yarn" and written["rope_theta"] == 10000.0


def test_rope_set_after_loading_is_refused(source: Path, tmp_path: Path) -> None:
    """A model loaded unpatched whose config object is scaled afterwards trained with the unscaled RoPE (transformers
    5 builds the rotary module at load): writing it under the patched config would describe another model."""
    from transformers import AutoModelForCausalLM

    from ropectl.errors import VerificationError
    from ropectl.finetune.output import write_checkpoint

    config = ft.patched_config(source, "linear:4")
    model = AutoModelForCausalLM.from_pretrained(str(source))
    model.config.rope_scaling = {"rope_type": "linear", "factor": 4.0}
    with pytest.raises(VerificationError, match="trained with other RoPE"):
        write_checkpoint(tmp_path / "out", model, None, config, ft.PROVENANCE, merge=False, dtype="fp32",
                         force=False, source=source)
    assert list(tmp_path.iterdir()) == []


def test_bf16_weights_leave_the_model_alone(source: Path, tmp_path: Path) -> None:
    import torch

    written, _ = ft.write(tmp_path / "out", source, "linear:4", "full", dtype="bf16")
    assert {t.dtype for t in _tensors(written.path).values()} == {torch.bfloat16}
    config = json.loads((written.path / "config.json").read_text())
    assert config["torch_dtype"] == "bfloat16" and written.dtype == "bfloat16"
    model = ft.build_model(source, ft.patched_config(source, "linear:4"))
    assert model.dtype == torch.float32


def test_existing_output_is_refused_and_force_replaces_only_ropectl_output(source: Path, tmp_path: Path) -> None:
    from ropectl.errors import OutputError

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="not empty"):
        ft.write(out, source, "linear:4", "full")
    with pytest.raises(OutputError, match="did not write"):
        ft.write(out, source, "linear:4", "full", force=True)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    (out / "notes.txt").unlink()
    out.rmdir()
    ft.write(out, source, "linear:4", "full")
    with pytest.raises(OutputError, match="pass --force"):
        ft.write(out, source, "linear:4", "merged")
    replaced, _ = ft.write(out, source, "linear:4", "merged", force=True)
    assert json.loads((out / "config.json").read_text())["ropectl"]["finetune"]["layout"] == replaced.layout


def test_failed_write_leaves_nothing(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ropectl.finetune import output_weights

    def tokenizer_fails(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("ropectl.finetune.output._save_tokenizer", tokenizer_fails)
    for layout in ("merged", "adapter"):
        with pytest.raises(OSError, match="disk full"):
            ft.write(tmp_path / layout, source, "linear:4", layout)
    assert list(tmp_path.iterdir()) == []  # no output, no staged folder beside it
    assert output_weights.listed(source) == sorted(p.name for p in source.iterdir())  # the source untouched


def test_refusals(source: Path, tmp_path: Path) -> None:
    from ropectl.errors import UsageError
    from ropectl.finetune.output import write_checkpoint

    config = ft.patched_config(source, "linear:4")
    model = ft.build_model(source, config)
    with pytest.raises(UsageError, match="merges a LoRA adapter"):
        write_checkpoint(tmp_path / "a", model, None, config, {}, merge=True, dtype="fp32", force=False, source=source)
    with pytest.raises(UsageError, match="no local source"):
        write_checkpoint(tmp_path / "b", ft.lora(model), None, config, {}, merge=False, dtype="fp32", force=False,
                         source=None)
    with pytest.raises(UsageError, match="unknown dtype"):
        write_checkpoint(tmp_path / "c", model, None, config, {}, merge=False, dtype="fp8", force=False, source=source)
    assert list(tmp_path.iterdir()) == []


def test_summary_lines_name_the_engines(written: dict[str, Any]) -> None:
    checkpoint, _ = written["merged"]
    readers = [line.split(":")[0] for line in checkpoint.lines[1:]]
    for engine in ("vLLM", "llama.cpp", "lm-eval", "transformers"):
        assert any(r.startswith(engine) for r in readers), readers
    assert not checkpoint.notes  # a folder source: nothing to convert back
    assert math.isfinite(len(checkpoint.files)) and ("config.json", "written") in checkpoint.files


@pytest.mark.heavy
def test_gguf_source_writes_a_dequantized_base(smollm2: Path, tmp_path: Path) -> None:
    """The embedded SmolLM2 GGUF, fine-tuned with LoRA and not merged: OUT/base holds transformers' own dequantized
    weights under the patched config, OUT loads as base + adapter, and the notes say how to convert back."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from ropectl.finetune.output import write_checkpoint
    from ropectl.rope.methods import parse_spec
    from ropectl.schema.apply import plan_config

    where = {"gguf_file": smollm2.name}
    config = plan_config(AutoConfig.from_pretrained(str(smollm2.parent), **where).to_dict(), parse_spec("yarn:4")).config
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(config))
    hf_config = AutoConfig.from_pretrained(str(tmp_path / "cfg"))
    model = AutoModelForCausalLM.from_pretrained(str(smollm2.parent), config=hf_config, **where).eval()
    dequantized = {k: v.clone() for k, v in model.state_dict().items()}
    model = ft.lora(model)
    before = ft.logits(model, ft.ids(64))
    out = write_checkpoint(tmp_path / "out", model, AutoTokenizer.from_pretrained(str(smollm2.parent), **where),
                           config, ft.PROVENANCE, merge=False, dtype="fp32", force=False, source=smollm2)
    assert out.base is not None and any("convert_hf_to_gguf.py" in n and "convert_lora_to_gguf.py" in n
                                        for n in out.notes)
    base = _tensors(out.base)
    assert all(torch.equal(base[k], v) for k, v in dequantized.items() if k in base) and "model.embed_tokens.weight" in base
    assert float((ft.logits(_load(out.path), ft.ids(64)) - before).abs().max()) <= 1e-4


def test_per_layer_rope_is_checked_per_layer_type(tmp_path: Path) -> None:
    """Gemma3 (full and sliding attention, one rotary module with a buffer per layer type): the written folder is
    verified, and a model built without the patched config is refused (only the full-attention layers change)."""
    from transformers import AutoModelForCausalLM

    from ropectl.errors import VerificationError
    from ropectl.finetune.output import write_checkpoint

    source = build("gemma3", tmp_path / "src")
    config = ft.patched_config(source, "linear:4")
    out = write_checkpoint(tmp_path / "out", ft.build_model(source, config), None, config, ft.PROVENANCE, merge=False,
                           dtype="fp32", force=False, source=source)
    assert out.lines[0].startswith("verified OUT")
    with pytest.raises(VerificationError, match="full_attention"):
        write_checkpoint(tmp_path / "bad", AutoModelForCausalLM.from_pretrained(str(source)), None, config,
                         ft.PROVENANCE, merge=False, dtype="fp32", force=False, source=source)
    assert not (tmp_path / "bad").exists()
