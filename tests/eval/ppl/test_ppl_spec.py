"""eval-ppl spec: length parsing, presets, defaults and validation (no model needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ropectl.errors import MethodError, UsageError
from ropectl.eval.tasks.ppl.spec import DEFAULTS, GENERIC, build_spec, load_preset
from ropectl.runtime.lengths import parse_length, parse_lengths

REPO = Path(__file__).resolve().parents[3]


@given(st.integers(min_value=2, max_value=10**7))
def test_plain_integers_round_trip(n: int) -> None:
    assert parse_length(str(n)) == n
    assert parse_length(n) == n


@given(st.integers(min_value=1, max_value=4096))
def test_k_suffix_is_1024(k: int) -> None:
    assert parse_length(f"{k}k") == k * 1024 == parse_length(f"{k}K")


def test_named_examples() -> None:
    assert parse_lengths("2k,16k,4096") == (2048, 4096, 16384)
    assert parse_lengths(["8k", 1024, "2k,4k"]) == (1024, 2048, 4096, 8192)
    assert parse_length("1.5k") == 1536
    assert parse_length("1m") == 1024**2


@pytest.mark.parametrize("bad", ["0", "-4", "1", "2.5", "abc", "4kb", "k", "", "nan", "1e-3", "0.1k", "1.3k"])
def test_bad_lengths_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_lengths(bad) if bad else parse_lengths(",")
    assert "\n" not in str(err.value)


def test_bool_is_not_a_length() -> None:
    with pytest.raises(UsageError):
        parse_length(True)


@pytest.mark.parametrize("spec", ["yarn:abc", ":4", "warp:2", "yarn:4,beta_fast", "yarn:4,nope=1", " "])
def test_malformed_methods_fail_before_any_work(spec: str) -> None:
    with pytest.raises((MethodError, UsageError)):
        build_spec(model="x", methods=[spec])


def test_embedded_default_without_model() -> None:
    spec = build_spec()
    assert spec.model is None and spec.dataset is None
    assert [m.label for m in spec.methods] == DEFAULTS["methods"]
    assert spec.lengths == parse_lengths(DEFAULTS["lengths"])
    assert max(spec.lengths) > 8192  # the default sweep goes past SmolLM2's trained context


def test_a_model_without_methods_is_evaluated_as_is() -> None:
    spec = build_spec(model="some/model")
    assert spec.methods == () and spec.method_labels == ("as-is",)
    assert spec.lengths == parse_lengths(GENERIC["lengths"])


def test_flags_override_preset() -> None:
    spec = build_spec("default", docs=7, lengths="1k")
    assert spec.docs == 7 and spec.lengths == (1024,)
    assert [m.label for m in spec.methods] == DEFAULTS["methods"]


def test_default_preset_file_matches_code_defaults() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    table = tomllib.loads((REPO / "configs" / "eval-default.toml").read_text())["eval"]
    assert table == DEFAULTS
    assert load_preset("default") == DEFAULTS


def test_every_shipped_preset_builds() -> None:
    for path in sorted((REPO / "configs").glob("eval-*.toml")):
        build_spec(str(path))
        build_spec(path.stem.removeprefix("eval-"))


def test_unknown_preset_and_setting() -> None:
    with pytest.raises(UsageError, match="unknown preset"):
        build_spec("no-such-preset")
    with pytest.raises(UsageError, match="unknown eval setting"):
        build_spec({"lengths": "1k", "colour": "red"})


@pytest.mark.parametrize("flags", [
    {"mode": "window"}, {"dtype": "int8"}, {"docs": 0}, {"chunk_size": 0}, {"stride": 64},
    {"mode": "sliding", "stride": 1024, "lengths": "1k"}, {"methods": ["yarn:2", "yarn:2"]},
    {"device_map": "balanced"},
])
def test_invalid_settings(flags: dict) -> None:
    with pytest.raises(UsageError):
        build_spec(model="m", **flags)
