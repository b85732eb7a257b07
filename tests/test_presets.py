"""The shipped presets load, and a broken TOML file is a one-line usage error."""

from __future__ import annotations

from pathlib import Path

import pytest

from ropectl.errors import UsageError
from ropectl.patch.spec import build_choice, list_presets, method_spec
from ropectl.presets import load_toml_table, presets_dir

REPO = Path(__file__).resolve().parents[1]


def test_presets_live_in_configs() -> None:
    assert presets_dir() == REPO / "configs"
    assert set(list_presets()) == {p.stem.removeprefix("patch-") for p in (REPO / "configs").glob("patch-*.toml")}


@pytest.mark.parametrize("name", sorted(p.stem.removeprefix("patch-") for p in (REPO / "configs").glob("patch-*.toml")))
def test_every_patch_preset_builds_a_method(name: str) -> None:
    spec = method_spec(build_choice(preset=name))
    assert spec.name in {"linear", "ntk", "dynamic", "yarn", "llama3", "longrope"}


def test_bad_toml_and_non_table(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[patch\nmethod = ")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_toml_table(bad, "patch")
    flat = tmp_path / "flat.toml"
    flat.write_text('patch = "yarn"\n')
    with pytest.raises(UsageError, match=r"'\[patch\]' .* is not a table"):
        load_toml_table(flat, "patch")
    with pytest.raises(UsageError, match="cannot read"):
        load_toml_table(tmp_path / "missing.toml", "patch")


def test_preset_for_another_trained_context_is_said(tmp_path: Path) -> None:
    """R-19: llama2-4k-16k-yarn on a model trained at 256 writes original 4096; the summary must say so."""
    import json

    from factories import write_config
    from typer.testing import CliRunner

    from ropectl.cli.app import app

    def warnings(context: int) -> list[str]:
        cfg = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
               "max_position_embeddings": context, "rope_theta": 10000.0}
        folder = write_config(tmp_path / str(context), cfg)
        result = CliRunner().invoke(app, ["patch", str(folder), "--preset", "llama2-4k-16k-yarn", "--dry-run", "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["target_context"] == 16384  # what the preset asks is still written: 4 x 4096
        return [w for w in data["warnings"] if w.startswith("original_max_position_embeddings")]

    assert any("4,096" in w and "trained context 256" in w for w in warnings(256))
    assert warnings(4096) == []  # negative control: the model the preset was written for
