"""Gemma 4 configs in the hub's form carry ``global_head_dim`` and no ``per_layer_config``: transformers builds the
full-attention layers' head dim from it (512 when absent), and ropectl reads it the same way (it once used the
sliding layers' head_dim there, and patch's verification refused every such checkpoint).

Oracle: the inverse frequencies of transformers' own Gemma4TextRotaryEmbedding, per layer type, built from the
same config.json. Negative controls: an explicit ``per_layer_config`` wins over ``global_head_dim`` in transformers
and in ropectl; and the old reading (head_dim for every layer) differs from transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.rope.frequencies import compute_frequencies
from ropectl.schema.read import read_model_rope
from tests.helpers.model_sweep import transformers_ropes

TINY = dict(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, layer_types=["sliding_attention", "full_attention"],
            sliding_window=64, max_position_embeddings=256, hidden_size_per_layer_input=0, vocab_size_per_layer_input=128)


def hub_config(folder: Path, **changes: Any) -> Path:
    """A tiny Gemma 4 text config.json as the hub ships it: no per_layer_config unless ``changes`` gives one."""
    from transformers import Gemma4TextConfig

    config = Gemma4TextConfig(**TINY).to_dict()
    config.pop("per_layer_config")
    config.update(changes)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def ropectl_ropes(folder: Path) -> dict[str, list[float]]:
    model = read_model_rope(json.loads((folder / "config.json").read_text()))
    return {label: list(compute_frequencies(p).inv_freq) for label, p in model.layer_ropes.items()}


def assert_same(ours: dict[str, list[float]], theirs: dict[str, tuple[list[float], float]]) -> None:
    assert set(ours) == set(theirs)
    for label, (inv_freq, _) in theirs.items():
        assert len(ours[label]) == len(inv_freq), label
        assert ours[label] == pytest.approx(inv_freq, rel=1e-6, abs=1e-12), label


@pytest.mark.parametrize(("changes", "global_pairs"), [
    ({"global_head_dim": 32}, 16),
    ({}, 256),  # transformers' default global head dim: 512
    ({"global_head_dim": 64, "rope_parameters": {
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6,
                           "factor": 4.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}, 32),
])
def test_global_layers_read_global_head_dim_as_transformers(tmp_path: Path, changes: dict, global_pairs: int) -> None:
    folder = hub_config(tmp_path / "g4", **changes)
    theirs = transformers_ropes(folder)
    assert len(theirs["full_attention"][0]) == global_pairs and len(theirs["sliding_attention"][0]) == 8
    assert_same(ropectl_ropes(folder), theirs)


def test_an_explicit_per_layer_config_wins(tmp_path: Path) -> None:
    """Negative control: with per_layer_config given, transformers ignores global_head_dim; so does ropectl."""
    folder = hub_config(tmp_path / "g4", global_head_dim=32, per_layer_config={"1": {"head_dim": 24}})
    theirs = transformers_ropes(folder)
    assert len(theirs["full_attention"][0]) == 12
    assert_same(ropectl_ropes(folder), theirs)


def test_the_old_reading_differs_from_transformers(tmp_path: Path) -> None:
    """Negative control: head_dim for the global layers (ropectl's old reading) is caught by the comparison."""
    folder = hub_config(tmp_path / "g4", global_head_dim=32)
    theirs = transformers_ropes(folder)
    ours = ropectl_ropes(folder)
    old = ropectl_ropes(hub_config(tmp_path / "old", global_head_dim=32, per_layer_config={}))
    assert old["full_attention"] != ours["full_attention"]
    with pytest.raises(AssertionError):
        assert_same(old, theirs)


@pytest.mark.parametrize("spec", ["proportional:4", "ntk:4"])
def test_patch_verifies_a_hub_form_checkpoint(tmp_path: Path, spec: str) -> None:
    """It was refused ("16 vs 8 frequencies"); now patch writes it and transformers' rebuild matches."""
    from tests.helpers.family_checkpoints import tiny_gemma4_text

    src = tiny_gemma4_text(tmp_path / "src")
    config = json.loads((src / "config.json").read_text())
    config.pop("per_layer_config")
    (src / "config.json").write_text(json.dumps({**config, "global_head_dim": 32}))
    result = CliRunner().invoke(app, ["patch", str(src), "-m", spec, "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "verified with transformers" in result.stdout
    assert_same(ropectl_ropes(tmp_path / "out"), transformers_ropes(tmp_path / "out"))
