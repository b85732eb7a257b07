"""`ropectl inspect` reports what transformers itself builds, for tiny checkpoints and the real SmolLM2 GGUF."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers import checkpoints
from tests.helpers.hf_reference import max_rel_error, rotary_embedding_frequencies

runner = CliRunner()
REQUIRED = ("model_type", "head_dim", "rotary_dim", "rope_theta", "rope_type", "factor",
            "original_max_position_embeddings", "max_position_embeddings", "layout", "inv_freq", "attention_factor")


def inspect_json(model: Path | str, *extra: str) -> dict:
    result = runner.invoke(app, ["inspect", str(model), "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def hf_model(folder: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {
        "llama": checkpoints.tiny_llama(root / "llama"),
        "llama_yarn": checkpoints.tiny_llama(root / "llama_yarn", max_position_embeddings=1024, rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 256}),
        "qwen2": checkpoints.tiny_qwen2(root / "qwen2"),
        "neox": checkpoints.tiny_neox(root / "neox"),
        "gemma3": checkpoints.tiny_gemma3(root / "gemma3"),
    }


@pytest.mark.parametrize("name", ["llama", "llama_yarn", "qwen2", "neox", "gemma3"])
def test_inspect_matches_transformers(tiny: dict[str, Path], name: str) -> None:
    report = inspect_json(tiny[name])
    assert all(key in report for key in REQUIRED)
    model = hf_model(tiny[name])
    if name == "gemma3":
        # One rotary module holds both layer types; check each against our per-layer report.
        rotary = model.model.rotary_emb
        for label, layer in report["layers"].items():
            inv = getattr(rotary, f"{label}_inv_freq").double().tolist()
            assert max_rel_error(layer["inv_freq"], inv) <= 1e-6
        assert report["rope_theta"] == 1e6 and report["layers"]["sliding_attention"]["rope_theta"] == 1e4
        return
    built = rotary_embedding_frequencies(model)
    assert built, "model has no rotary embedding"
    inv, attention = built[0]
    assert max_rel_error(report["inv_freq"], inv) <= 1e-6
    assert report["attention_factor"] == pytest.approx(attention, rel=1e-6)


def test_inspect_fields(tiny: dict[str, Path]) -> None:
    neox = inspect_json(tiny["neox"])
    assert (neox["head_dim"], neox["rotary_dim"], neox["layout"]) == (32, 8, "half-split")
    yarn = inspect_json(tiny["llama_yarn"])
    assert (yarn["rope_type"], yarn["factor"], yarn["original_max_position_embeddings"]) == ("yarn", 4.0, 256)
    assert yarn["trained_context"] == 256 and yarn["target_context"] == 1024


def test_dynamic_reports_values_at_seq_len(tmp_path: Path) -> None:
    folder = checkpoints.write_config(tmp_path / "dyn", {
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 4096,
        "rope_theta": 10000.0, "rope_scaling": {"type": "dynamic", "factor": 2.0}})
    at_load = inspect_json(folder)
    at_8k = inspect_json(folder, "--seq-len", "8192")
    assert at_load["effective_theta"] == 10000.0
    assert at_8k["effective_theta"] > 10000.0 and at_8k["inv_freq"][1] < at_load["inv_freq"][1]


def test_summary_and_plot(tiny: dict[str, Path], tmp_path: Path) -> None:
    png = tmp_path / "waves.png"
    result = runner.invoke(app, ["inspect", str(tiny["llama_yarn"]), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "yarn" in result.stdout and "dimension pairs" in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_v4_config_is_read(tmp_path: Path) -> None:
    folder = checkpoints.write_config(tmp_path / "v4", {
        "model_type": "llama", "hidden_size": 256, "num_attention_heads": 2, "max_position_embeddings": 32768,
        "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})
    report = inspect_json(folder)
    from transformers import AutoConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from tests.helpers import rope_reference

    # Two oracles that never see ropectl's reading of the config: transformers from the folder, and the formula.
    config = AutoConfig.from_pretrained(folder)
    assert config.rope_parameters["rope_type"] == "llama3"
    inv = LlamaRotaryEmbedding(config).inv_freq.double().tolist()
    assert max_rel_error(report["inv_freq"], inv) <= 1e-6
    want = rope_reference.llama3(500000.0, 128, 8.0, 8192, 1.0, 4.0)
    assert rope_reference.max_rel_error(report["inv_freq"], want) <= 1e-12
    # Negative control: the same folder with high_freq_factor 2 must not match the formula for 4.
    cfg = json.loads((folder / "config.json").read_text())
    cfg["rope_scaling"]["high_freq_factor"] = 2.0
    (folder / "config.json").write_text(json.dumps(cfg))
    assert rope_reference.max_rel_error(inspect_json(folder)["inv_freq"], want) > 1e-3


@pytest.mark.slow
def test_smollm2_gguf_matches_transformers(smollm2: Path) -> None:
    from transformers import AutoModelForCausalLM

    report = inspect_json(smollm2)
    assert (report["rope_theta"], report["head_dim"], report["max_position_embeddings"]) == (100000.0, 64, 8192)
    assert (report["num_attention_heads"], report["num_key_value_heads"], report["layout"]) == (9, 3, "interleaved")
    model = AutoModelForCausalLM.from_pretrained(smollm2.parent, gguf_file=smollm2.name)
    inv, attention = rotary_embedding_frequencies(model)[0]
    assert max_rel_error(report["inv_freq"], inv) <= 1e-6 and report["attention_factor"] == attention
