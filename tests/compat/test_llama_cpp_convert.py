"""llama.cpp's converter route, per family: a patched config.json, converted by llama.cpp's own convert_hf_to_gguf.py
and run by llama.cpp, computes what ropectl's llama.cpp view says.

For a Hugging Face folder, ropectl's llama.cpp view predicts what llama.cpp computes once the folder is converted.
Here tiny seeded checkpoints of Llama, DeepSeek-V3 (multi-head latent attention) and gpt-oss (SmolLM2's
tokenizer, q/k projections scaled so attention is sharp and RoPE shows in the log-probs) are patched by ropectl,
converted with the converter of the tested llama.cpp (the llamacpp-convert venv), and scored by llama.cpp
(llama_cpp_runner.py) and by transformers on the same token ids. Where the view says "same", the per-token log-probs
agree to SAME_TOL (the unpatched model's own gap is below it); where it names a difference, they differ by more
than DIFF_MIN: each family has cases of both kinds, so neither side of the check can pass vacuously.

A checkpoint that ships llama3 (a Llama patched to llama3:4) is also served as it ships: ``patch FOLDER --emit
llama.cpp`` with no -m prints only the context, since the converter writes the scaling as a rope_freqs tensor; that
line, run on the converted file, gives transformers' log-probs of the folder. On DeepSeek-V3, whose converter drops
llama3, the same command refuses.

Qwen2-VL is checked on what llama.cpp loads (its load log): llama-cpp-python hands llama.cpp one position per token,
while the qwen2vl graph reads four (multimodal RoPE), so its log-probs cannot be compared through this binding.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llama_cpp_convert import (  # noqa: E402
    DIFF_MIN,
    FAMILIES,
    N_TOKENS,
    SAME_TOL,
    checkpoint,
    convert,
    llama_cpp_view,
    missing,
    run_llama_cpp,
    transformers_logprobs,
)
from ropectl_cli import ropectl_json, ropectl_try  # noqa: E402

# (family, patch arguments or None for the unpatched model, what ropectl's llama.cpp view must say)
CASES: dict[str, tuple[str, tuple[str, ...] | None, bool]] = {
    "llama-none": ("llama", None, True),
    "llama-llama3": ("llama", ("-m", "llama3:4"), True),  # the Llama converter bakes rope_freqs
    "llama-yarn": ("llama", ("-m", "yarn:4"), True),
    "deepseek-none": ("deepseek_v3", None, True),
    "deepseek-llama3": ("deepseek_v3", ("-m", "llama3:4"), False),  # the converter drops it
    "deepseek-linear": ("deepseek_v3", ("-m", "linear:4"), False),  # deepseek2's own logit scale
    "deepseek-yarn": ("deepseek_v3", ("-m", "yarn:4"), False),
    "deepseek-yarn-mscale": ("deepseek_v3", ("-m", "yarn:4", "--mscale", "1", "--mscale-all-dim", "1"), True),
    "deepseek-ntk": ("deepseek_v3", ("-m", "ntk:4"), True),
    "gpt_oss-shipped": ("gpt_oss", None, True),
    "gpt_oss-yarn": ("gpt_oss", ("-m", "yarn:8", "--replace-existing"), True),
}
_STATE: dict[str, Any] = {}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = missing()
    if why:
        pytest.skip(why)
    if "work" not in _STATE:
        _STATE["work"] = tmp_path_factory.mktemp("llamacpp-convert")
    return _STATE["work"]


def _source(work: Path, family: str) -> Path:
    folder = work / f"src-{family}"
    if not folder.exists():
        checkpoint(folder, FAMILIES[family])
    return folder


def _patched(work: Path, name: str) -> Path:
    family, args, _ = CASES[name]
    source = _source(work, family)
    if args is None:
        return source
    out = work / name
    if not out.exists():
        ropectl_json("patch", str(source), *args, "-o", str(out))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_converted_folder_computes_what_the_view_says(name: str, work: Path) -> None:
    folder = _patched(work, name)
    view = llama_cpp_view(folder)
    assert view["agrees"] is CASES[name][2], view  # what ropectl says, before running anything
    ids = [int(i) for i in __import__("numpy").random.default_rng(0).integers(100, 40000, N_TOKENS)]
    llama = run_llama_cpp(convert(folder), ids)["logprobs"]
    gap = max(abs(a - b) for a, b in zip(llama, transformers_logprobs(folder, ids)))
    if view["agrees"]:
        assert gap <= SAME_TOL, f"ropectl says llama.cpp computes the same, but log-probs differ by {gap:.4f}"
    else:
        assert gap > DIFF_MIN, f"ropectl names a difference ({view['differs']}), but log-probs agree to {gap:.4f}"


def test_qwen2_vl_yarn_loads_as_the_view_says(work: Path) -> None:
    source = _source(work, "qwen2_vl")
    out = work / "qwen2_vl-yarn"
    code, data, err = ropectl_try("patch", str(source), "-m", "yarn:4", "-o", str(out))
    assert code == 0, err
    view = llama_cpp_view(out)
    assert view["agrees"], llama_cpp_view
    log = run_llama_cpp(convert(out), list(range(100, 108)))["log"]
    loaded = dict(re.findall(r"print_info: (rope scaling|freq_scale_train|n_ctx_orig_yarn|mrope sections)\s*=\s*(.+)",
                             log))
    assert loaded == {"rope scaling": "yarn", "freq_scale_train": "0.25", "n_ctx_orig_yarn": "64",
                      "mrope sections": "[2, 3, 3, 0]"}, loaded


def test_the_no_m_line_serves_a_shipped_llama3_as_converted(work: Path) -> None:
    folder = _patched(work, "llama-llama3")
    emitted = ropectl_json("patch", str(folder), "--emit", "llama.cpp")
    args = emitted["emit"]["args"]
    assert args == ["-c", "256"] and any("rope_freqs" in w for w in emitted["warnings"]), emitted
    ids = [int(i) for i in __import__("numpy").random.default_rng(1).integers(100, 40000, N_TOKENS)]
    llama = run_llama_cpp(convert(folder), ids, {"n_ctx": int(args[1])})["logprobs"]
    gap = max(abs(a - b) for a, b in zip(llama, transformers_logprobs(folder, ids)))
    unscaled = max(abs(a - b) for a, b in zip(llama, transformers_logprobs(_source(work, "llama"), ids)))
    print(f"llama.cpp, the no -m line on a converted llama3 checkpoint: max |logprob diff| vs transformers {gap:.4f} "
          f"(vs the unscaled model {unscaled:.4f})")
    assert gap <= SAME_TOL < DIFF_MIN < unscaled  # the scaling is in effect, as transformers computes it
    code, _, err = ropectl_try("patch", str(_patched(work, "deepseek-llama3")), "--emit", "llama.cpp")
    assert code != 0 and "does not reach llama.cpp" in err and len(err.strip().splitlines()) == 1
