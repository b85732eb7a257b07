"""Every RoPE model type of the installed transformers: inspect against the model's own rotary class, then
``patch --dry-run`` with every method. A refusal passes only if tests/helpers/model_sweep_allowed.py lists it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ropectl.errors import RopectlError
from ropectl.inspection import InspectSpec, inspect_model
from ropectl.patch import patch_checkpoint
from ropectl.patch.spec import PatchSpec
from ropectl.rope.methods import METHODS, MethodSpec
from tests.helpers.model_sweep import inspected_ropes, rope_types, save_default, sweep_type, transformers_ropes
from tests.helpers.model_sweep_allowed import ALLOWED, allowed_reason

REL_TOL = 1e-5  # transformers computes in float32
FACTOR = 4.0


def _rel_error(ours, theirs) -> float:
    if len(ours) != len(theirs):
        return float("inf")
    return max((abs(a - b) / abs(b) if b else abs(a) for a, b in zip(ours, theirs)), default=0.0)


def _inspect_mismatches(folder: Path) -> list[str]:
    report = inspect_model(InspectSpec(model=str(folder)))
    oracle = transformers_ropes(folder)
    ours = inspected_ropes(report, set(oracle))
    bad = []
    for label, (inv, attention) in oracle.items():
        if label not in ours:
            bad.append(f"{label}: not reported (ropectl has {sorted(ours)})")
            continue
        err = max(_rel_error(ours[label][0], inv), abs(ours[label][1] - attention) / attention)
        if not err <= REL_TOL:
            bad.append(f"{label}: {len(ours[label][0])} vs {len(inv)} frequencies, relative error {err:.2g}")
    return bad


def _spec(method: str, pairs: int) -> MethodSpec:
    if method == "none":
        return MethodSpec("none")
    options = (("short_factor", [1.0] * pairs), ("long_factor", [FACTOR] * pairs)) if method == "longrope" else ()
    return MethodSpec(method, FACTOR, options)


def _no_modeling_code(model_type: str) -> bool:
    """Whether transformers ships only a config class for this type (the model runs as remote code).

    Checked here from the package itself, so each new transformers release's remote-code-only types are
    accepted as refused without listing them by hand, and a type that gains modeling code must patch."""
    import importlib.util

    from transformers.models.auto.configuration_auto import model_type_to_module_name

    name = model_type_to_module_name(model_type)
    try:
        return importlib.util.find_spec(f"transformers.models.{name}.modeling_{name}") is None
    except ModuleNotFoundError:
        return True


# patch's verification runs a tiny copy's forward too (ropectl/patch/forward.py); here once per type, with this
# method, to keep the sweep's time (every method's rotary is still compared with transformers')
FORWARD_METHOD = "yarn"


def _patch_failures(model_type: str, folder: Path, pairs: int, seen: set, prope: bool) -> list[str]:
    bad = []
    for method in METHODS:
        try:
            patch_checkpoint(PatchSpec(model=str(folder), method=_spec(method, pairs), dry_run=True, replace_existing=True,
                                       forward=method == FORWARD_METHOD))
        except RopectlError as exc:
            if "no modeling code" in str(exc) and _no_modeling_code(model_type):
                seen.add((model_type, method))
                continue
            # the wildcard row refuses proportional on plain models only: a p-RoPE model must take it
            if allowed_reason(model_type, method) is None or (prope and (model_type, method) not in ALLOWED):
                bad.append(f"patch {method}: refused but not in the allowed table: {exc}")
            seen.add((model_type, method))
            continue
        except Exception as exc:  # the point of the sweep: no traceback may reach a user
            bad.append(f"patch {method}: unexpected {type(exc).__name__}: {exc}")
            continue
        if (model_type, method) in ALLOWED:
            bad.append(f"patch {method}: listed as refused but it works now: drop it from the table")
    return bad


def _sweep_one(entry, tmp: Path, seen: set) -> list[str]:
    folder = save_default(entry, tmp / entry.model_type)
    try:
        mismatches = _inspect_mismatches(folder)
    except RopectlError as exc:
        seen.add((entry.model_type, "inspect"))
        if allowed_reason(entry.model_type, "inspect") is None:
            return [f"inspect refused but not in the allowed table: {exc}"]
        return []
    except Exception as exc:
        return [f"inspect: unexpected {type(exc).__name__}: {exc}"]
    if (entry.model_type, "inspect") in ALLOWED:
        mismatches.append("inspect: listed as refused but it works now: drop it from the table")
    model = inspect_model(InspectSpec(model=str(folder))).model
    pairs = (model.rotary_dim + 1) // 2
    prope = model.rope.rope_type == "proportional"
    return mismatches + _patch_failures(entry.model_type, folder, pairs, seen, prope)


@pytest.mark.slow
def test_every_rope_model_type(tmp_path: Path) -> None:
    types = rope_types()
    assert len(types) > 150, "the sweep found too few RoPE model types: the discovery is broken"
    failures: dict[str, list[str]] = {}
    seen: set = set()
    for entry in types:
        problems = _sweep_one(entry, tmp_path, seen)
        if problems:
            failures[entry.model_type] = problems
    swept = {e.model_type for e in types}
    stale = [k for k in ALLOWED if k[0] != "*" and k[0] not in swept]
    assert not stale, f"allowed-table entries for model types transformers no longer has: {stale}"
    assert not failures, json.dumps(failures, indent=1)


def test_negative_control_detects_a_wrong_head_dim(tmp_path: Path) -> None:
    """The comparison must fail when the config ropectl reads differs from what transformers builds."""
    entry = sweep_type("llama")
    folder = save_default(entry, tmp_path / "llama")
    config = json.loads((folder / "config.json").read_text())
    oracle = transformers_ropes(folder)
    config["head_dim"] = config["hidden_size"] // config["num_attention_heads"] // 2
    (folder / "config.json").write_text(json.dumps(config))
    report = inspect_model(InspectSpec(model=str(folder)))
    assert _rel_error(report.inv_freq, oracle["main"][0]) > REL_TOL


def test_cli_inspect_smoke_on_a_swept_type(tmp_path: Path) -> None:
    entry = sweep_type("gemma4_text")
    folder = save_default(entry, tmp_path / "gemma4")
    done = subprocess.run([sys.executable, "-m", "ropectl", "inspect", str(folder), "--json"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["layers"]["full_attention"]["rope_type"] == "proportional"


@pytest.mark.parametrize("key", sorted(k for k in ALLOWED if k[0] == "*"))
def test_wildcard_rows_name_a_method(key) -> None:
    assert key[1] in METHODS
