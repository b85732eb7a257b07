"""Bad input to `ropectl patch`: one-line error, non-zero exit, nothing written (issue 3, section 7)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import write_config

runner = CliRunner()
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 128,
         "max_position_embeddings": 4096, "rope_theta": 10000.0}


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def fails(tmp_path: Path, config: dict | None, *args: str, code: int) -> str:
    """Run patch on a config-only checkpoint under tmp_path; assert the failure contract; return stderr."""
    src = write_config(tmp_path / "src", config or LLAMA)
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["patch", str(src), *args, "-o", str(out)])
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Fix:" in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert snapshot(tmp_path) == before and not out.exists()
    return lines[0]


def test_unknown_method(tmp_path: Path) -> None:
    assert "unknown method 'ntk-aware'" in fails(tmp_path, None, "-m", "ntk-aware", "-f", "2", code=2)


@pytest.mark.parametrize("factor", ["1", "0.5", "-2", "nan", "inf"])
def test_bad_factor(tmp_path: Path, factor: str) -> None:
    line = fails(tmp_path, None, "-m", "yarn", "-f", factor, code=2)
    assert "factor" in line


def test_missing_factor(tmp_path: Path) -> None:
    assert "needs a factor" in fails(tmp_path, None, "-m", "linear", code=2)


@pytest.mark.parametrize("target", ["4096", "2048"])
def test_target_not_beyond_trained(tmp_path: Path, target: str) -> None:
    assert "not beyond the trained context 4096" in fails(tmp_path, None, "-m", "linear", "-t", target, code=2)


@pytest.mark.parametrize("method", ["yarn", "llama3"])
def test_no_original_length(tmp_path: Path, method: str) -> None:
    config = {k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}
    assert "trained context length is unknown" in fails(tmp_path, config, "-m", method, "-f", "4", code=2)


def test_longrope_wrong_length(tmp_path: Path) -> None:
    line = fails(tmp_path, None, "-m", "longrope", "-f", "4", "--short-factor", "1,1,1",
                 "--long-factor", "2,2,2", code=2)
    assert "needs 8" in line


def test_longrope_file_wrong_length(tmp_path: Path) -> None:
    lists = tmp_path / "lists.json"
    lists.write_text(json.dumps({"short_factor": [1.0] * 4, "long_factor": [2.0] * 8}))
    assert "needs 8" in fails(tmp_path, None, "-m", "longrope", "-f", "4", "--longrope-file", str(lists), code=2)


def test_read_only_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o555)
    if os.geteuid() == 0:  # root ignores permission bits: emulate what a normal user sees
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, m, **kw: False if Path(p) == locked else real(p, m, **kw))
    src = write_config(tmp_path / "src", LLAMA)
    result = runner.invoke(app, ["patch", str(src), "-m", "yarn", "-f", "2", "-o", str(locked / "out")])
    os.chmod(locked, 0o755)
    assert result.exit_code == 1 and "permission denied" in result.stderr
    assert list(locked.iterdir()) == []


def test_output_not_empty_needs_force(tmp_path: Path) -> None:
    src = write_config(tmp_path / "src", LLAMA)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    result = runner.invoke(app, ["patch", str(src), "-m", "yarn", "-f", "2", "-o", str(out)])
    assert result.exit_code == 1 and "not empty" in result.stderr and "--force" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    result = runner.invoke(app, ["patch", str(src), "-m", "yarn", "-f", "2", "-o", str(out), "--force"])
    assert result.exit_code == 1 and "keep.txt" in result.stderr and "did not write" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]  # --force never deletes what ropectl did not write


def test_model_without_rope(tmp_path: Path) -> None:
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_positions": 1024, "n_layer": 2, "vocab_size": 128}
    assert "does not use rotary position embeddings" in fails(tmp_path, gpt2, "-m", "yarn", "-f", "2", code=1)


def test_contradictory_rope_section(tmp_path: Path) -> None:
    config = {**LLAMA, "rope_scaling": {"type": "linear", "rope_type": "dynamic", "factor": 2.0}}
    assert "contradicts itself" in fails(tmp_path, config, "-m", "yarn", "-f", "2", code=1)


def test_already_scaled_without_record(tmp_path: Path) -> None:
    config = {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    assert "--replace-existing" in fails(tmp_path, config, "-m", "yarn", "-f", "4", code=1)


def test_ntk_rope_type_in_source_is_named(tmp_path: Path) -> None:
    config = {**LLAMA, "rope_scaling": {"type": "ntk", "factor": 2.0}}
    assert "static NTK is a rope_theta change" in fails(tmp_path, config, "-m", "yarn", "-f", "4", code=1)


def test_phi3_rejects_yarn(tmp_path: Path) -> None:
    phi3 = {**LLAMA, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"]}
    assert "accepts only rope types default, longrope" in fails(tmp_path, phi3, "-m", "yarn", "-f", "2", code=2)


def test_gptj_has_fixed_rope(tmp_path: Path) -> None:
    gptj = {"model_type": "gptj", "n_embd": 64, "n_head": 4, "rotary_dim": 8, "n_positions": 256, "n_layer": 2}
    assert "fixed base" in fails(tmp_path, gptj, "-m", "linear", "-f", "2", code=2)


def test_unknown_option_and_preset(tmp_path: Path) -> None:
    assert "has no option 'beta_fast'" in fails(tmp_path, None, "-m", "linear", "-f", "2", "--set", "beta_fast=3",
                                                code=2)
    assert "unknown preset" in fails(tmp_path, None, "--preset", "nope", code=2)


def test_factor_and_target_together(tmp_path: Path) -> None:
    assert "only one of" in fails(tmp_path, None, "-m", "linear", "-f", "2", "-t", "8192", code=2)


def test_nowhere_to_write(tmp_path: Path) -> None:
    src = write_config(tmp_path / "src", LLAMA)
    result = runner.invoke(app, ["patch", str(src), "-m", "linear", "-f", "2"])
    assert result.exit_code == 2 and "--output" in result.stderr


def test_hub_id_needs_output() -> None:
    result = runner.invoke(app, ["patch", "someone/some-model", "-m", "linear", "-f", "2", "--in-place"])
    assert result.exit_code == 2 and "pass --output DIR" in result.stderr


def test_output_inside_source(tmp_path: Path) -> None:
    src = write_config(tmp_path / "src", LLAMA)
    result = runner.invoke(app, ["patch", str(src), "-m", "linear", "-f", "2", "-o", str(src / "sub")])
    assert result.exit_code == 1 and "inside the source" in result.stderr and not (src / "sub").exists()


def _writer_bug(monkeypatch: pytest.MonkeyPatch, scale: float) -> None:
    """Simulate a config-writer bug: the factor (or, for ntk, the base) written is ``scale`` times the one
    ropectl computed with."""
    from ropectl.patch import core

    real = core.plan_config

    def plan(*args, **kwargs):
        planned = real(*args, **kwargs)
        config = planned.config
        sections = [v for v in (config.get("rope_scaling"), config.get("rope_parameters")) if isinstance(v, dict)]
        key = "factor" if any("factor" in v for v in sections) else "rope_theta"
        for holder in [config, *sections]:
            if key in holder:
                holder[key] = holder[key] * scale
        return planned

    monkeypatch.setattr(core, "plan_config", plan)


@pytest.mark.parametrize("method", ["linear", "llama3", "ntk"])
def test_verification_mismatch_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """A real disagreement (the written factor 1% off) is caught by transformers at the shipped tolerance."""
    _writer_bug(monkeypatch, 1.01)
    line = fails(tmp_path, None, "-m", method, "-f", "2", code=1)
    assert "different RoPE" in line


def test_verification_passes_without_the_bug(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: the same hook with no change lets the patch through."""
    _writer_bug(monkeypatch, 1.0)
    src = write_config(tmp_path / "src", LLAMA)
    result = runner.invoke(app, ["patch", str(src), "-m", "yarn", "-f", "2", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
