"""Re-extension of models that ship scaled (gpt-oss yarn x32, Llama 3.1 llama3 x8): the new factor counts from
the true original length and keeps the model's own method options; transformers verifies every result."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ropectl.errors import ConfigError
from ropectl.patch import patch_checkpoint
from ropectl.patch.spec import PatchSpec
from ropectl.rope.methods import parse_spec

FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"


def _model(name: str, tmp_path: Path, **changes) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    config = {**json.loads((FIXTURES / f"{name}.json").read_text()), **changes}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _patch(folder: Path, spec: str, out: Path | None = None, **kw):
    if out is None:
        return patch_checkpoint(PatchSpec(model=str(folder), method=parse_spec(spec), dry_run=True, **kw))
    return patch_checkpoint(PatchSpec(model=str(folder), method=parse_spec(spec), output=out, **kw))


def test_gpt_oss_yarn_64_from_its_original_4096(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _patch(_model("gpt-oss-20b", tmp_path), "yarn:64", out)
    written = json.loads((out / "config.json").read_text())
    scaling = written["rope_scaling"]
    # The yarn write form: max_position_embeddings is the target, and both sections name the original
    # (docs/reference/write-form.md).
    assert scaling["factor"] == 64.0 and written["max_position_embeddings"] == 4096 * 64
    assert scaling["original_max_position_embeddings"] == 4096
    assert written["rope_parameters"]["original_max_position_embeddings"] == 4096
    assert scaling["truncate"] is False and scaling["beta_fast"] == 32.0  # the model's own options, kept
    assert result.target_context == 4096 * 64
    assert result.verification["max_rel_error"] <= 1e-5
    line = next(w for w in result.warnings if w.startswith("re-extension"))
    assert "yarn x32 (4096 -> 131072)" in line and "x64" in line and "(-> 262144)" in line


def test_llama31_target_length_counts_from_8192(tmp_path: Path) -> None:
    result = _patch(_model("llama-3.1-8b-instruct", tmp_path), "llama3", target_length=262144)
    assert result.after.factor == 32.0 and result.target_context == 262144
    diff = result.diff
    assert '"factor": 32.0' in diff and '"low_freq_factor": 1.0' in diff and '"high_freq_factor": 4.0' in diff
    assert result.verification["max_rel_error"] <= 1e-5


def test_user_options_win_over_carried_ones(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _patch(_model("gpt-oss-20b", tmp_path), "yarn:64,beta_fast=16", out)
    assert json.loads((out / "config.json").read_text())["rope_scaling"]["beta_fast"] == 16.0


def test_another_method_starts_from_the_unscaled_base(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _patch(_model("llama-3.1-8b-instruct", tmp_path), "yarn:16", out)
    scaling = json.loads((out / "config.json").read_text())["rope_scaling"]
    assert scaling["rope_type"] == "yarn" and "low_freq_factor" not in scaling
    written = json.loads((out / "config.json").read_text())
    assert written["max_position_embeddings"] == 131072 and scaling["original_max_position_embeddings"] == 8192
    assert result.target_context == 131072


def test_a_target_below_the_shipped_context_is_said(tmp_path: Path) -> None:
    result = _patch(_model("gpt-oss-20b", tmp_path), "yarn:8")
    line = next(w for w in result.warnings if w.startswith("re-extension"))
    assert "not beyond the shipped 131072" in line


def test_deepseek_v3_keeps_mscale_and_verifies(tmp_path: Path) -> None:
    result = _patch(_model("deepseek-v3", tmp_path), "yarn:80")
    assert '"mscale_all_dim": 1.0' in result.diff and result.verification["max_rel_error"] <= 1e-5


def test_linear_scaled_model_still_needs_replace_existing(tmp_path: Path) -> None:
    folder = _model("llama-3.1-8b-instruct", tmp_path, rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ConfigError, match="--replace-existing"):
        _patch(folder, "yarn:4")


def test_cli_prints_the_summary_line(tmp_path: Path) -> None:
    folder = _model("gpt-oss-20b", tmp_path)
    done = subprocess.run([sys.executable, "-m", "ropectl", "patch", str(folder), "-m", "yarn", "-f", "64",
                           "--dry-run"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "re-extension" in done.stdout + done.stderr
    shutil.rmtree(folder)
