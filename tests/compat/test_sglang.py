"""SGLang tier: every line ``patch --emit sglang`` prints is read by SGLang's own code, and computes transformers' RoPE.

Tiny config-only folders (a Qwen3, and tests/compat/vllm_families.py's Llama, Qwen2-VL and Qwen2.5-VL: composite
configs with multimodal RoPE) are patched by ropectl's CLI. In the cached SGLang venv (tests/compat/engine_venvs.sh
sglang: the sglang wheel without its CUDA dependencies, beside a CPU torch), ropectl/verify/sglang_rotary.py (which never
imports ropectl) parses the printed line with SGLang's server-argument parser, loads it with its ModelConfig and builds
the rotary embedding with its get_rope; transformers' rotary class on the patched folder is the oracle. Two routes:
- ``emit``: the unpatched folder with the printed line: SGLang accepts the --context-length (its derived length is
  at least the target), holds the printed rope section, and its cos/sin equal transformers';
- ``folder``: the patched folder as SGLang loads it: ropectl's SGLang verdict (patch --json ``readers``) says "same"
  exactly where the cos/sin agree.
Checkpoints that ship a scaling (published configs: Llama-3.1-8B's llama3, Phi-3.5-mini's LongRoPE, Qwen2.5-7B's
yarn form) are served as they ship: the line ``patch MODEL --emit sglang`` prints with no -m holds the shipped section
value by value, at the context the config serves, and SGLang's cos/sin equal transformers' on the folder itself.
Negative controls: the printed line without ``attn_factor`` (SGLang ignores transformers' attention_factor) must
differ, and a linear section on a multimodal-RoPE model (refused by --emit sglang) must build one-dimensional RoPE.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from ropectl_cli import ropectl_json, ropectl_try
from venv_runner import run_jobs
from vllm_families import write_family
from vllm_rope_runner import hf_side

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
SGLANG_ROTARY = ROOT / "ropectl" / "verify" / "sglang_rotary.py"  # the script verify --engine-python sglang= runs
CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
VENV = CACHE / "sglang"
READER = "SGLang 0.5.23+"
TOL = 1e-5  # float32 cos/sin of the same formula; the differences the controls must see are > 1e-2
POSITIONS = [0, 1, 7, 63, 300]
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "num_hidden_layers": 2,
         "vocab_size": 256, "max_position_embeddings": 40960, "rope_theta": 1000000.0}
CASES = [("qwen3", ("--preset", "qwen3-128k")), ("qwen3", ("-m", "yarn:4,attention_factor=1.3")),
         ("qwen3", ("-m", "linear:4")), ("qwen3", ("-m", "dynamic:4")), ("qwen3", ("-m", "llama3:4")),
         ("qwen3", ("-m", "ntk:4")), ("llama", ("-m", "yarn:2")), ("llama", ("-m", "llama3:2")),
         ("qwen2_vl", ("-m", "yarn:4")), ("qwen2_vl", ("-m", "linear:2")), ("qwen2_vl", ("-m", "ntk:2")),
         ("qwen2_5_vl", ("-m", "yarn:4"))]
IDS = [f"{f}-{a[-1]}" for f, a in CASES]
# published configs that ship a scaling -> the context each serves as published
SHIPPED = {"llama-3.1-8b-instruct": 131072, "phi-3.5-mini-instruct": 131072, "qwen2.5-7b-instruct-yarn": 131072}
_STATE: dict[str, Any] = {}


def _source(root: Path, family: str) -> Path:
    folder = root / "src" / family
    if not folder.exists():
        if family == "qwen3":
            folder.mkdir(parents=True)
            (folder / "config.json").write_text(json.dumps(QWEN3))
        else:
            write_family(root / "src", family)
    return folder


def _launch(model: Path, args: list[str] = ()) -> str:
    return shlex.join(["python", "-m", "sglang.launch_server", "--model-path", str(model), *args])


def _case(root: Path, family: str, method: tuple[str, ...]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    src, name = _source(root, family), f"{family}-{method[-1]}"
    out = root / name.replace(":", "").replace(",", "-").replace("=", "")
    patched = ropectl_json("patch", str(src), *method, "-o", str(out))
    code, emitted, err = ropectl_try("patch", str(src), *method, "--emit", "sglang")
    view = next(v for v in patched["readers"] if v["reader"] == READER)
    case = {"out": out, "view": view, "code": code, "err": err, "emitted": emitted, "target": patched["target_context"]}
    jobs = [{"name": f"{name}/folder", "command": _launch(out), "positions": POSITIONS}]
    if emitted:
        target = int(emitted["emit"]["context_length"])
        # transformers' dynamic scales per batch length: a last position at the target gives the base SGLang is told
        far = [target - 1] if "dynamic" in method[-1] else []
        jobs.append({"name": f"{name}/emit", "command": emitted["emit"]["command"], "positions": POSITIONS + far})
        section = emitted["emit"]["json_model_override_args"].get("rope_parameters", {})
        if section.get("attn_factor", 1.0) != 1.0:  # negative control: the line without SGLang's own key
            args = shlex.split(emitted["emit"]["command"])
            i = args.index("--json-model-override-args") + 1
            args[i] = json.dumps({**json.loads(args[i]), "rope_parameters": {
                k: v for k, v in section.items() if k != "attn_factor"}})
            jobs.append({"name": f"{name}/no-attn-factor", "command": shlex.join(args), "positions": POSITIONS})
    elif family == "qwen2_vl":  # negative control: what --emit would have printed, had it not refused
        sys.path.insert(0, str(ROOT))
        from ropectl.readers import sglang
        from ropectl.schema.read import read_model_rope

        rope = read_model_rope(json.loads((out / "config.json").read_text())).rope
        override = sglang.overrides(rope, 1.0, int(case["target"]), ("text_config",))
        jobs.append({"name": f"{name}/refused", "positions": POSITIONS, "command": _launch(src, [
            "--json-model-override-args", json.dumps(override), "--context-length", str(case["target"])])})
    return case, jobs


def _shipped(root: Path, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    src = root / "shipped" / name
    src.mkdir(parents=True)
    (src / "config.json").write_text((ROOT / "tests" / "fixtures" / "configs" / f"{name}.json").read_text())
    code, emitted, err = ropectl_try("patch", str(src), "--emit", "sglang")  # no -m: the checkpoint as it ships
    case = {"out": src, "code": code, "err": err, "emitted": emitted}
    jobs = [{"name": f"{name}/as-is", "command": emitted["emit"]["command"], "positions": POSITIONS}] if emitted else []
    return case, jobs


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not (VENV / "bin" / "python").exists():
        pytest.skip(f"no SGLang venv at {VENV}: run tests/compat/engine_venvs.sh sglang (see docs/reference/compatibility.md)")
    if "results" not in _STATE:
        root = tmp_path_factory.mktemp("sglang")
        cases, jobs = {}, []
        for family, method in CASES:
            cases[(family, method)], more = _case(root, family, method)
            jobs += more
        for name in SHIPPED:
            cases[name], more = _shipped(root, name)
            jobs += more
        _STATE.update(cases=cases, results=run_jobs(VENV / "bin" / "python", SGLANG_ROTARY, jobs, root))
    return _STATE


def _diff(got: dict[str, Any], out: Path, positions: list[int]) -> float:
    """Largest |cos/sin| difference from transformers' at POSITIONS (the rows both compute alike)."""
    assert "cos" in got, got
    want, worst = hf_side(str(out), positions)["main"], 0.0
    for part in ("cos", "sin"):
        for a_row, b_row in list(zip(got[part], want[part]))[:len(POSITIONS)]:
            assert len(a_row) == len(b_row), f"{len(a_row)} vs {len(b_row)} frequencies"
            worst = max(worst, max(abs(a - b) for a, b in zip(a_row, b_row)))
    return worst


@pytest.mark.parametrize(("family", "method"), CASES, ids=IDS)
def test_printed_line_is_read_by_sglang(family: str, method: tuple[str, ...], measured: dict[str, Any]) -> None:
    case = measured["cases"][(family, method)]
    name = f"{family}-{method[-1]}"
    if case["emitted"] is None:
        assert case["code"] != 0 and case["err"].startswith("error: ") and len(case["err"].strip().splitlines()) == 1
        refused = measured["results"].get(f"{name}/refused")
        if refused is not None:  # what SGLang would have built: one-dimensional RoPE on a multimodal model
            assert "error" in refused or "rope_error" in refused or "MRotary" not in refused["kind"], refused
        return
    got, emitted = measured["results"][f"{name}/emit"], case["emitted"]["emit"]
    assert "error" not in got and "rope_error" not in got, got
    assert got["context_length"] == emitted["context_length"] == case["target"]
    printed = emitted["json_model_override_args"]
    printed = printed.get("text_config", printed)["rope_parameters"]
    assert {k: got["rope_parameters"].get(k) for k in printed} == printed  # value by value, rope_theta included
    assert got["rope_theta"] == printed["rope_theta"]
    assert _diff(got, case["out"], POSITIONS + ([case["target"] - 1] if "dynamic" in method[-1] else [])) <= TOL


@pytest.mark.parametrize(("family", "method"), CASES, ids=IDS)
def test_folder_verdict_is_what_sglang_builds(family: str, method: tuple[str, ...], measured: dict[str, Any]) -> None:
    case = measured["cases"][(family, method)]
    got, view = measured["results"][f"{family}-{method[-1]}/folder"], case["view"]
    if view["error"]:
        assert "error" in got or "rope_error" in got or "MRotary" not in got.get("kind", ""), got
        return
    assert "error" not in got and "rope_error" not in got, got
    same = view["differs"] is None or view["differs"].startswith("accepts at most")
    assert (_diff(got, case["out"], POSITIONS) <= TOL) == same, (view["differs"], got.get("kind"))
    assert view["serving_length"] == got["context_length"]


def test_attn_factor_is_what_sglang_reads(measured: dict[str, Any]) -> None:
    """The control: SGLang ignores transformers' attention_factor, so the line without attn_factor differs."""
    case = measured["cases"][("qwen3", ("-m", "yarn:4,attention_factor=1.3"))]
    got = measured["results"]["qwen3-yarn:4,attention_factor=1.3/no-attn-factor"]
    assert _diff(got, case["out"], POSITIONS) > 1e-2


@pytest.mark.parametrize("name", list(SHIPPED))
def test_the_no_m_line_serves_the_checkpoint_as_it_ships(name: str, measured: dict[str, Any]) -> None:
    case = measured["cases"][name]
    assert case["emitted"] is not None, case["err"]
    got, emitted = measured["results"][f"{name}/as-is"], case["emitted"]["emit"]
    assert "error" not in got and "rope_error" not in got, got
    assert got["context_length"] == emitted["context_length"] == SHIPPED[name]
    printed = emitted["json_model_override_args"]["rope_parameters"]
    assert {k: got["rope_parameters"].get(k) for k in printed} == printed
    shipped = json.loads((case["out"] / "config.json").read_text())["rope_scaling"]
    for key in ("factor", "short_factor", "long_factor", "low_freq_factor", "high_freq_factor"):
        if key in shipped:  # the published values, as published
            assert got["rope_parameters"][key] == shipped[key], key
    assert _diff(got, case["out"], POSITIONS) <= TOL


# --- Dual Chunk Attention and LongRoPE, with SGLang's own get_rope and rotary forward (tests/compat/rope_probe.py) -----

def _probe(jobs: list[dict[str, Any]], work: Path) -> dict[str, Any]:
    if not (VENV / "bin" / "python").exists():
        pytest.skip(f"no SGLang venv at {VENV}: run tests/compat/engine_venvs.sh sglang")
    work.mkdir(parents=True, exist_ok=True)
    return run_jobs(VENV / "bin" / "python", HERE / "rope_probe.py", jobs, work)


def _inspected(folder: Path) -> dict[str, Any]:
    """ropectl's SGLang row for the release this tier runs."""
    from probe_cases import view_at

    return view_at(ropectl_json("inspect", str(folder), "--engines")["engines"], "SGLang", "0.5.23")


def test_dca_is_built_by_get_rope_and_a_scaling_beside_it_changes_nothing(tmp_path: Path) -> None:
    """SGLang 0.5.23's get_rope (layers/rotary_embedding/factory.py) builds DualChunkRotaryEmbedding whenever the key
    is passed, before it reads the rope section; on the CPU its CUDA device lookup raises. ropectl's SGLang row on
    the published Qwen2.5-1M config says so, and its context length is max_position_embeddings (get_context_length)."""
    from probe_cases import check_dca, dca_jobs, tiny_qwen_1m

    check_dca(_probe(dca_jobs(), tmp_path / "probe"), "CUDA")
    folder = tiny_qwen_1m(tmp_path / "qwen1m")
    got = run_jobs(VENV / "bin" / "python", SGLANG_ROTARY,
                   [{"name": "1m", "command": _launch(folder), "positions": POSITIONS}], tmp_path)["1m"]
    view = _inspected(folder)
    assert view["error"] and "DualChunkRotaryEmbedding" in view["error"]
    assert got["context_length"] == view["serving_length"] == 1_010_000


def test_longrope_switches_per_batch(tmp_path: Path) -> None:
    """SGLang 0.5.23's Phi3LongRoPEScaledRotaryEmbedding.forward (rope_variant.py): a short prompt alone gets the
    short factors, the same prompt batched with one long request the long ones, and a lone prompt whose last position
    is the original length the short ones (transformers: long). ropectl's SGLang row on Phi-3.5 says per batch."""
    from probe_cases import ORIGINAL, longrope_jobs, which_list

    got = _probe(longrope_jobs()[:1], tmp_path / "probe")
    assert [which_list(b) for b in got[f"longrope/{ORIGINAL}"]["batches"]] == ["short", "long", "short"]
    folder = tmp_path / "phi"
    folder.mkdir()
    (folder / "config.json").write_text((ROOT / "tests" / "fixtures" / "configs" /
                                         "phi-3.5-mini-instruct.json").read_text())
    view = _inspected(folder)
    assert not view["agrees"] and "per batch" in view["differs"]
