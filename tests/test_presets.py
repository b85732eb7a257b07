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
