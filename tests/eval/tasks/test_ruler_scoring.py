"""eval-tasks' scoring against transformers' own greedy ``generate`` and RULER's ``string_match_all`` (written out
here, apart from ropectl): teacher forcing where it settles a trial, greedy generation where it does not, and the
score always RULER's on greedy output."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers.eval_reference import greedy_generate, load
from tests.helpers.ruler_trials import TASKS, trials_for

# One task per answer shape (see test_smollm2_scores_equal_string_match_all_on_generate).
SHAPES = ["niah_single_1", "niah_single_3", "niah_multikey_3", "niah_multivalue", "vt", "cwe", "fwe", "passkey"]
assert set(SHAPES) <= set(TASKS)


def generate(model, ids: tuple[int, ...], budget: int) -> tuple[int, ...]:
    """transformers' greedy decoding as lm-eval runs it for RULER: up to a budget, ending at end of sequence."""
    import torch

    prompt = torch.tensor([ids], dtype=torch.long)
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=budget, do_sample=False,
                             num_beams=1, pad_token_id=0)
    return tuple(int(x) for x in out[0, prompt.shape[1]:])


def ruler_string_match_all(text: str, refs: tuple[str, ...]) -> float:
    # lm-eval lm_eval/tasks/ruler/common_utils.py: sum(r.lower() in pred.lower() for r in refs) / len(refs)
    return sum(1.0 if r.lower() in text.lower() else 0.0 for r in refs) / len(refs)


def budget(t) -> int:
    """What a trial may generate: the canonical answer's length and the slack up to the cell's length, at most RULER's
    budget (written from the definition in docs/reference/long-context-tasks.md)."""
    from ropectl.eval.tasks.ruler import GENERATORS

    return min(GENERATORS[t.task].budget, t.length - len(t.ids) + t.answer_len)


def hf_engine(model, tok, path: Path):
    """The transformers engine around an already loaded model, its as-is RoPE in place."""
    from ropectl.eval.engines.hf import TransformersEngine
    from ropectl.runtime.load import LoadedModel
    from ropectl.runtime.model import method_states, model_source

    source = model_source(str(path))
    engine = TransformersEngine(source, "cpu", "fp32")
    engine.tokenizer, engine.loaded = tok, LoadedModel(model, tok, "cpu", "fp32")
    engine.state = method_states(source.config, ())[0]
    return engine


@pytest.fixture(scope="module")
def tiny(tiny_model: Path):
    from transformers import AutoTokenizer

    return load(tiny_model), AutoTokenizer.from_pretrained(tiny_model)


def answer_nll(model, ids: tuple[int, ...], start: int) -> float:
    """The NLL of ids[start:] from the model's own full forward (its logits, not ropectl's head)."""
    import torch

    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    return -sum(float(logp[t - 1, ids[t]]) for t in range(start, len(ids)))


def test_teacher_forced_argmax_equals_greedy_generate(tiny) -> None:
    """The batched teacher forcing (passkey's scorer, vLLM's shortcut): on the model's own greedy continuation as
    the answer, the argmax at every answer position is that continuation; one changed token (control) leaves the
    argmax as it was but makes the answer differ."""
    from ropectl.eval.engines.hf.forward import teacher_forced

    model, tok = tiny
    for t in trials_for(tok, TASKS, "1400", samples=1).values():
        generated = greedy_generate(model, t.ids[:t.prompt_len], t.answer_len)
        forced = replace(t, ids=t.ids[:t.prompt_len] + generated)
        [got] = teacher_forced(model, [list(forced.ids)], [forced.answer_len], "cpu")
        mine, nll = got.argmax, got.nll
        assert mine == generated
        assert nll == pytest.approx(answer_nll(model, forced.ids, t.prompt_len), rel=1e-4)
        wrong = replace(forced, ids=forced.ids[:-1] + ((generated[-1] + 1) % model.config.vocab_size,))
        bad = teacher_forced(model, [list(wrong.ids)], [wrong.answer_len], "cpu")[0].argmax
        assert bad == generated != wrong.ids[t.prompt_len:]


def test_greedy_continuation_is_generate_and_its_nll_the_forward_s(tiny) -> None:
    from ropectl.eval.engines.hf.greedy import continuation

    model, tok = tiny
    for t in trials_for(tok, ["niah_single_1", "vt"], "1400", samples=1).values():
        prompt, answer = t.ids[:t.prompt_len], t.ids[t.prompt_len:]
        want = greedy_generate(model, prompt, 24)
        tokens, nll = continuation(model, prompt, 24, "cpu", set(), None, answer)
        assert tokens == want
        assert nll == pytest.approx(answer_nll(model, t.ids, t.prompt_len), rel=1e-4)
        stop = want[5]  # an end token ends it, that token included, as generate does
        assert continuation(model, prompt, 24, "cpu", {stop})[0] == want[:want.index(stop) + 1]
        # the model's own continuation as the answer: greedy follows it to the end, NLL all the way
        own = want[:min(t.answer_len, len(want))]
        tokens, nll = continuation(model, prompt, len(own), "cpu", set(), None, own)
        assert tokens == own and nll == pytest.approx(answer_nll(model, prompt + own, len(prompt)), rel=1e-4)


def test_every_score_is_string_match_all_on_greedy_output(tiny, tiny_model: Path) -> None:
    """Every task on the tiny model: the score equals RULER's metric on generate's output of the trial's budget; a
    reference greedy writes after its first tokens is found, and one it never writes is not (negative control)."""
    from ropectl.eval.tasks.ruler.score import score_trials

    model, tok = tiny
    trials = list(trials_for(tok, TASKS, "1400", samples=1).values())
    outcomes = score_trials(hf_engine(model, tok, tiny_model), trials)
    for t, o in zip(trials, outcomes, strict=True):
        text = tok.decode(list(generate(model, t.ids[:t.prompt_len], budget(t))))
        assert o.score == ruler_string_match_all(text, t.references), (t.task, text, t.references)
    t = trials[0]
    text = tok.decode(list(generate(model, t.ids[:t.prompt_len], budget(t))))
    inside, absent = text[3:8], "\x07never\x07"
    assert inside.strip() and absent not in text
    for refs, want in (((inside,), 1.0), ((absent,), 0.0)):
        [o] = score_trials(hf_engine(model, tok, tiny_model), [replace(t, references=refs)])
        assert o.score == want


def test_each_trial_starts_from_the_method_s_rope(tiny_model: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy decoding runs past the prompt, where dynamic scaling grows its base; the next trial's prompt must be
    run with the base for its own length, which is checked after every prompt's forward. The rotary modules are
    restored after each trial, so it passes; without the restore (control), the second trial fails that check."""
    import contextlib

    from ropectl.errors import VerificationError
    from ropectl.eval.tasks.ruler.runner import run_tasks
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec
    from ropectl.runtime import rotary

    def spec(out: str):
        return build_tasks_spec(model=str(tiny_model), tasks="niah_single_1", methods=["dynamic:2"], lengths="500",
                                samples=2, out=tmp_path / out, dtype="fp32")

    result = run_tasks(spec("kept"))
    assert [r.score for r in result.rows] == [0.0, 0.0]  # a random model misses: greedy decoded up to 500
    monkeypatch.setattr(rotary, "kept_rotary", lambda model: contextlib.nullcontext())
    with pytest.raises(VerificationError):
        run_tasks(spec("not-kept"))


@pytest.mark.heavy
def test_smollm2_scores_equal_string_match_all_on_generate(smollm2: Path, smol_tok) -> None:
    """The real model at 1k: the score is RULER's string_match_all on transformers' greedy output of the trial's
    budget. One task per haystack and answer shape (repeated noise / essay / needle haystacks; number and UUID
    values; a UUID key; four values; variable chains; ten common and three frequent words; digits) rather than all
    twelve: the four left out (niah_single_2, niah_multikey_1, niah_multikey_2, niah_multiquery) combine a kept
    task's haystack and reference shapes, and each greedy decode of up to 128 tokens is the suite's costliest
    real-model step on a 2-core CPU."""
    from ropectl.eval.tasks.ruler.score import score_trials
    from tests.helpers.eval_reference import gguf_model

    model = gguf_model(smollm2)
    trials = list(trials_for(smol_tok, SHAPES, "1024", samples=1).values())
    outcomes = score_trials(hf_engine(model, smol_tok, smollm2), trials)
    for t, o in zip(trials, outcomes, strict=True):
        text = smol_tok.decode(list(generate(model, t.ids[:t.prompt_len], budget(t))))
        assert o.score == ruler_string_match_all(text, t.references), (t.task, text, t.references)
    assert sum(o.found for o in outcomes) > 0  # a real model retrieves something at 1k
