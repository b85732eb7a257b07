"""The reader module: entries interpreted as documented, the docs/reference/compatibility.md table in sync, the ropectl record.

Whether the entries match the real transformers versions is the compat tier's job (tests/compat/,
`make compat`); here the interpreter is checked against values written out by hand from each version's
source (e.g. 4.43's ``_compute_yarn_parameters`` takes the original length from max_position_embeddings).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropectl.readers.base import VersionRange, version_key
from ropectl.readers.parity import engine_views
from ropectl.readers.table import PAGE, in_sync
from ropectl.readers.transformers import READERS, predict, reader_for
from ropectl.readers.view import null_theta_warning
from ropectl.schema.record import BaseRope, Record

ROOT = Path(__file__).resolve().parents[2]
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 256, "rope_theta": 10000.0}
YARN_RAISED = {**LLAMA, "rope_scaling": {"rope_type": "yarn", "type": "yarn", "factor": 3.3,
                                         "original_max_position_embeddings": 64}}


def test_readme_table_in_sync() -> None:
    """The generated reader table lives in docs/reference/compatibility.md (the README links to it)."""
    assert PAGE == "docs/reference/compatibility.md"
    assert in_sync((ROOT / PAGE).read_text(encoding="utf-8")), "run python -m ropectl.readers.table"


def test_readme_table_goes_stale_when_an_entry_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: the sync check must notice a changed entry."""
    import dataclasses

    from ropectl.readers import transformers as tf

    changed = (dataclasses.replace(tf.READERS[0], tested=("4.43.0",)), *tf.READERS[1:])
    monkeypatch.setattr(tf, "READERS", changed)
    assert not in_sync((ROOT / PAGE).read_text(encoding="utf-8"))


def test_versions_cover_every_supported_release_once() -> None:
    for version in ("4.43.0", "4.44.2", "4.50.3", "4.56.0", "4.57.6", "5.0.0", "5.8.1", "5.9.0", "5.23.0"):
        assert sum(version in r.versions for r in READERS) == 1, version
    assert version_key("5.0.0rc1") == (5, 0, 0) and "4.9" not in VersionRange("4.43", "4.45")
    assert reader_for("4.57.6").versions.low == "4.56"


def test_yarn_original_length_per_version() -> None:
    """4.43-4.50 take it from max_position_embeddings; 4.51-4.55 also derive the factor from it."""
    old = predict(reader_for("4.45.2"), YARN_RAISED).ropes["main"]
    assert old.original_max_position_embeddings == 256 and old.factor == 3.3
    mid = predict(reader_for("4.51.3"), YARN_RAISED).ropes["main"]
    assert mid.original_max_position_embeddings == 64 and mid.factor == pytest.approx(256 / 64)
    new = predict(reader_for("4.57.6"), YARN_RAISED).ropes["main"]
    assert new.original_max_position_embeddings == 64 and new.factor == 3.3


def test_v4_readers_ignore_rope_parameters() -> None:
    cfg = {k: v for k, v in LLAMA.items() if k != "rope_theta"}
    cfg["rope_parameters"] = {"rope_type": "linear", "factor": 4.0, "rope_theta": 5e5}
    old = predict(reader_for("4.57.6"), cfg).ropes["main"]
    assert (old.rope_type, old.rope_theta) == ("default", 10000.0)
    new = predict(reader_for("5.23.0"), cfg).ropes["main"]
    assert (new.rope_type, new.rope_theta, new.factor) == ("linear", 5e5, 4.0)


def test_quirks_turn_into_errors_and_ignored_scaling() -> None:
    phi3 = {**LLAMA, "model_type": "phi3", "original_max_position_embeddings": 64,
            "rope_scaling": {"rope_type": "longrope", "type": "longrope", "short_factor": [1.0] * 8,
                             "long_factor": [2.0] * 8, "factor": 4.0}}
    assert "exactly type, short_factor and long_factor" in predict(reader_for("4.57.6"), phi3).error
    assert predict(reader_for("5.23.0"), phi3).ok
    mistral = {**LLAMA, "model_type": "mistral", "rope_scaling": {"type": "linear", "factor": 4.0}}
    assert predict(reader_for("4.45.2"), mistral).ropes["main"].rope_type == "default"
    assert predict(reader_for("4.48.3"), mistral).ropes["main"].rope_type == "linear"
    gemma = {**LLAMA, "model_type": "gemma3_text", "head_dim": 16,
             "rope_scaling": {"rope_type": "yarn", "type": "yarn", "factor": 4.0}}
    assert "KeyError" in predict(reader_for("5.0.0"), gemma).error and predict(reader_for("5.9.0"), gemma).ok
    assert "no Gemma3" in predict(reader_for("4.48.3"), gemma).error


def test_views_name_each_disagreeing_range() -> None:
    from ropectl.schema.read import read_model_rope

    views = engine_views(YARN_RAISED, {"main": read_model_rope(YARN_RAISED).rope}, (None, 256))
    differ = [v.reader.label for v in views if v.differs]
    assert differ == ["transformers 4.43 to <4.45", "transformers 4.45 to <4.48", "transformers 4.48 to <4.51",
                      "transformers 4.51 to <4.55", "transformers 4.55 to <4.56", "vLLM 0.0 to <0.30"]
    # vLLM up to 0.29 derives yarn's length from the original: int(64 x 3.3) = 211 < 256
    assert views[-1 - [v.reader.label for v in reversed(views)].index("vLLM 0.0 to <0.30")].fix == "use vLLM >= 0.30"
    assert all(v.warning().startswith(v.reader.label.replace("0.0 to <", "before ")) for v in views if v.differs)
    assert views[0].fix == "use transformers >= 4.56"


def test_gemma3_cannot_load_label_ends_where_gemma3_arrived() -> None:
    """transformers added Gemma 3 in 4.50.0 (its release notes), inside the 4.48 to <4.51 entry: the warning and
    the fix name 4.50, not the entry's end."""
    from ropectl.readers.view import engine_warnings
    from ropectl.schema.read import read_model_rope

    gemma = {**LLAMA, "model_type": "gemma3_text", "head_dim": 16}
    views = engine_views(gemma, {"main": read_model_rope(gemma).rope})
    lines = [w for w in engine_warnings(gemma, views) if w.startswith("transformers")]
    assert lines == ["transformers 4.43 to <4.50: cannot load it: has no Gemma3 (added in 4.50); "
                     "fix: use transformers >= 4.50"]
    assert [v.reader.label for v in views if v.reader.engine == "transformers" and v.differs is None][0] == \
        "transformers 4.50 to <4.51"
    # control: a Llama of the same shape splits no entry and warns of nothing
    views = engine_views(LLAMA, {"main": read_model_rope(LLAMA).rope})
    assert [v.reader for v in views if v.reader.engine == "transformers"] == list(READERS)
    assert engine_warnings(LLAMA, views) == []


def test_transformers_serving_rule_names_dynamic_only_for_dynamic() -> None:
    """The serving-length line says what applies to the method: dynamic's start past max_position_embeddings only
    where the reading builds dynamic."""
    from ropectl.schema.read import read_model_rope

    dynamic = {**LLAMA, "rope_scaling": {"rope_type": "dynamic", "type": "dynamic", "factor": 2.0}}
    rules = {}
    for name, config in (("yarn", YARN_RAISED), ("default", LLAMA), ("dynamic", dynamic)):
        views = engine_views(config, {"main": read_model_rope(config).rope})
        rules[name] = next(v.to_json()["serving_rule"] for v in views if v.reader is READERS[-1])
    assert "dynamic" not in rules["yarn"] and "dynamic" not in rules["default"]
    assert rules["yarn"].startswith("none enforced: longer prompts run")
    assert rules["dynamic"].startswith(rules["yarn"]) and "dynamic" in rules["dynamic"]  # control


def test_null_theta_is_named() -> None:
    saved = {**LLAMA, "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": None}}
    del saved["rope_theta"]
    assert "null" in null_theta_warning(saved)
    assert null_theta_warning(LLAMA) is None
    assert "null" in predict(reader_for("5.23.0"), saved).error


def test_record_round_trip_keeps_unknown_keys() -> None:
    raw = {"base": {"rope_theta": 1e4, "max_position_embeddings": 4096, "trained_context": 4096},
           "method": "yarn:4", "layout": "interleaved", "future": {"x": 1}}
    record = Record.from_json(raw)
    assert record.base == BaseRope(1e4, 4096, 4096) and record.extra == {"future": {"x": 1}}
    assert record.to_json() == raw
    assert json.loads(json.dumps(record.written_into({"a": 1})))["ropectl"] == raw
    assert Record.of({"text_config": {"ropectl": raw}}).method == "yarn:4"
    assert not Record() and Record().written_into({"ropectl": {}}) == {}


def test_inspect_says_when_transformers_builds_something_else(tmp_path: Path) -> None:
    """Gemma3 with a flat rope_parameters: transformers 5 builds full attention unscaled; inspect must say so."""
    from ropectl.inspection import InspectSpec, inspect_model

    cfg = {"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "max_position_embeddings": 512, "layer_types": ["sliding_attention", "full_attention"],
           "rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e6}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    report = inspect_model(InspectSpec(model=str(tmp_path), engines=True)).to_dict()
    views = {v["reader"]: v for v in report["engines"]}
    assert report["rope_type"] == "linear" and not views["transformers 5.9+"]["agrees"]
    assert views["transformers 5.9+"]["layers"]["full_attention"]["rope_type"] == "default"
    # 5.9+ is named within the span of releases that read it the same way (merged engine views)
    assert any(w.startswith("transformers 5.") and "+: computes other full_attention RoPE" in w for w in report["warnings"])
    assert "nest rope_parameters" in views["transformers 5.9+"]["fix"]


def test_inspect_never_reports_a_null_theta_silently(tmp_path: Path) -> None:
    from ropectl.inspection import InspectSpec, inspect_model

    cfg = {**LLAMA, "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": None}}
    del cfg["rope_theta"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    report = inspect_model(InspectSpec(model=str(tmp_path))).to_dict()
    assert report["rope_theta"] == 10000.0 and any("rope_theta is null" in w for w in report["warnings"])
    assert report["engines"] == []  # the full per-reader section only with --engines
