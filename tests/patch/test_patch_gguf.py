"""`ropectl patch` on a real GGUF (SmolLM2-135M Q4_1): new metadata, identical tensors, clear refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app

runner = CliRunner()
# Tests that parse the file are slow: each parse of the 49k-token vocabulary takes seconds.


@pytest.fixture(scope="module")
def yarn2(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("gguf") / "smollm2-yarn2.gguf"
    result = runner.invoke(app, ["patch", str(smollm2), "-m", "yarn", "-f", "2", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.stderr
    return out, json.loads(result.stdout)


@pytest.mark.slow
def test_yarn2_metadata_reads_back(yarn2: tuple[Path, dict]) -> None:
    from ropectl.io.gguf_meta import read_gguf_metadata
    from ropectl.io.resolve import resolve_model

    out, data = yarn2
    meta = read_gguf_metadata(out)
    assert meta["llama.rope.scaling.type"] == "yarn"
    assert meta["llama.rope.scaling.factor"] == pytest.approx(2.0)
    assert meta["llama.rope.scaling.original_context_length"] == 8192
    assert meta["llama.context_length"] == 16384
    assert meta["llama.rope.freq_base"] == pytest.approx(100000.0)
    assert meta["llama.rope.scaling.yarn_beta_fast"] == pytest.approx(32.0)
    assert meta["llama.rope.scaling.yarn_beta_slow"] == pytest.approx(1.0)
    assert "llama.rope.scaling.attn_factor" not in meta  # llama.cpp's own 0.1 ln(s) + 1 is HF's default
    assert meta["ropectl.base.rope_theta"] == 100000.0 and meta["ropectl.method"] == "yarn:2"
    resolved = resolve_model(out)
    assert resolved.config["rope_scaling"]["rope_type"] == "yarn"
    assert resolved.config["rope_scaling"]["factor"] == 2.0
    assert resolved.config["max_position_embeddings"] == 16384
    assert data["after"]["attention_factor"] == pytest.approx(1.0693147, rel=1e-6)
    assert data["verification"]["tensors_identical"] == 272


@pytest.mark.slow
def test_yarn2_tensors_and_other_metadata_identical(smollm2: Path, yarn2: tuple[Path, dict]) -> None:
    import gguf
    import numpy as np

    src, out = gguf.GGUFReader(str(smollm2)), gguf.GGUFReader(str(yarn2[0]))
    assert [t.name for t in src.tensors] == [t.name for t in out.tensors]
    for a, b in zip(src.tensors, out.tensors, strict=True):
        assert a.tensor_type == b.tensor_type and list(a.shape) == list(b.shape)
        assert np.array_equal(a.data, b.data)
    changed = {"llama.context_length"}
    for name, fld in src.fields.items():
        if name.startswith("GGUF.") or name in changed:
            continue
        assert name in out.fields and fld.contents() == out.fields[name].contents(), name


@pytest.mark.slow
def test_repatch_composes_from_recorded_base(yarn2: tuple[Path, dict], tmp_path: Path) -> None:
    result = runner.invoke(app, ["patch", str(yarn2[0]), "-m", "linear", "-f", "4", "--dry-run", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["composed_from_record"] and data["target_context"] == 32768
    assert "+llama.rope.scaling.type = 'linear'" in data["diff"]
    assert "-llama.rope.scaling.original_context_length = 8192" in data["diff"]


@pytest.mark.parametrize("method", ["dynamic", "llama3"])
def test_gguf_cannot_express(smollm2: Path, tmp_path: Path, method: str) -> None:
    out = tmp_path / "x.gguf"
    result = runner.invoke(app, ["patch", str(smollm2), "-m", method, "-f", "2", "-o", str(out)])
    assert result.exit_code == 2 and "cannot be written to GGUF metadata" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists() and list(tmp_path.iterdir()) == []
    fix = result.stderr.split("Fix:", 1)[1]
    if method == "dynamic":  # llama.cpp has no dynamic NTK at all: converting the checkpoint would not help
        assert "convert" not in fix and "yarn" in fix and "ntk" in fix
    else:  # control: llama.cpp's converter writes llama3 as a rope_freqs tensor, so conversion is the fix
        assert "convert_hf_to_gguf.py" in fix


def test_gguf_output_must_be_new_gguf(smollm2: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["patch", str(smollm2), "-m", "yarn", "-f", "2", "-o", str(tmp_path / "dir")])
    assert result.exit_code == 1 and ".gguf" in result.stderr
    result = runner.invoke(app, ["patch", str(smollm2), "-m", "yarn", "-f", "2", "--in-place"])
    assert result.exit_code == 2 and "in place" in result.stderr


@pytest.mark.slow
def test_transformers_reads_patched_gguf_config(yarn2: tuple[Path, dict]) -> None:
    from transformers import AutoConfig

    out = yarn2[0]
    config = AutoConfig.from_pretrained(str(out.parent), gguf_file=out.name)
    assert config.model_type == "llama" and config.max_position_embeddings == 16384
