"""Published config.json files of popular checkpoints (tests/fixtures/configs, sources in SOURCES.md): inspect
against each model's own transformers rotary class, and patch (re-extension where the model ships scaled),
verified by transformers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ropectl.errors import RopectlError
from ropectl.inspection import InspectSpec, inspect_model
from ropectl.patch import patch_checkpoint
from ropectl.patch.spec import PatchSpec
from ropectl.rope.methods import parse_spec
from tests.helpers.model_sweep import inspected_ropes, transformers_ropes

FIXTURES = Path(__file__).parents[1] / "fixtures" / "configs"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))
REL_TOL = 1e-5
# A method each model takes: its own (re-extension) where it ships scaled, else yarn.
PATCH = {"phi-3.5-mini-instruct": "ntk:2", "phi-4": "ntk:2", "phi-4-mini-instruct": "ntk:2", "gemma-3-4b-it": "yarn:2"}
# Models that ship with a scaling ropectl replaces only on --replace-existing (not yarn or llama3).
REPLACES = {"gemma-3-4b-it", "phi-3.5-mini-instruct", "phi-4-mini-instruct"}
# Models patch refuses, by the reason its one line names (docs/reference/families.md, Refusals).
REFUSED = {"qwen2.5-7b-instruct-1m": "dual_chunk_attention_config"}


def _folder(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(FIXTURES / f"{name}.json", folder / "config.json")
    return folder


def _err(ours, theirs) -> float:
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    return max(abs(a - b) / abs(b) if b else abs(a) for a, b in zip(ours, theirs))


def test_every_fixture_has_a_source() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text()
    assert len(NAMES) >= 15
    missing = [n for n in NAMES if f"`{n}.json`" not in sources]
    assert not missing, missing


@pytest.mark.parametrize("name", NAMES)
def test_inspect_matches_transformers(name: str, tmp_path: Path) -> None:
    folder = _folder(name, tmp_path)
    report = inspect_model(InspectSpec(model=str(folder)))
    oracle = transformers_ropes(folder)
    ours = inspected_ropes(report, set(oracle))
    for label, (inv, attention) in oracle.items():
        assert _err(ours[label][0], inv) <= REL_TOL, label
        assert ours[label][1] == pytest.approx(attention, rel=REL_TOL), label


@pytest.mark.parametrize("name", NAMES)
def test_patch_is_verified_by_transformers(name: str, tmp_path: Path) -> None:
    folder = _folder(name, tmp_path)
    report = inspect_model(InspectSpec(model=str(folder)))
    rope = report.model.rope
    method = PATCH.get(name) or (f"{rope.rope_type}:{2 * (rope.factor or 1):g}" if rope.rope_type in ("yarn", "llama3")
                                  else "yarn:4")
    if name in REFUSED:
        with pytest.raises(RopectlError, match=REFUSED[name]):
            patch_checkpoint(PatchSpec(model=str(folder), method=parse_spec(method), dry_run=True))
        return
    result = patch_checkpoint(PatchSpec(model=str(folder), method=parse_spec(method), dry_run=True,
                                        replace_existing=name in REPLACES))
    assert result.verification is not None and result.verification["max_rel_error"] <= REL_TOL
    assert json.loads((folder / "config.json").read_text()) == json.loads((FIXTURES / f"{name}.json").read_text())
