"""eval-tasks' scoring against transformers' own greedy ``generate`` and RULER's ``string_match_all`` (written out
here, apart from ropectl): teacher forcing where it settles a trial, greedy generation where it does not, and the
score always RULER's on greedy output."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.eval.test_ruler_tasks import TASKS, trials_for
from tests.helpers.eval_reference import greedy_generate, load


def generate(model, ids: tuple[int, ...], budget: int) -> tuple[int, ...]:
    """transformers' greedy decoding as lm-eval runs it for RULER: up to the budget, ending at end of sequence."""
    import torch

    prompt = torch.tensor([ids], dtype=torch.long)
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=budget, do_sample=False,
                             num_beams=1, pad_token_id=0)
    return tuple(int(x) for x in out[0, prompt.shape[1]:])


def ruler_string_match_all(text: str, refs: tuple[str, ...]) -> float:
    # lm-eval lm_eval/tasks/ruler/common_utils.py: sum(r.lower() in pred.lower() for r in refs) / len(refs)
    return sum(1.0 if r.lower() in text.lower() else 0.0 for r in refs) / len(refs)


def hf_engine(model, tok) -> SimpleNamespace:
    return SimpleNamespace(name="transformers", model=model, tokenizer=tok, input_device=lambda: "cpu")


@pytest.fixture(scope="module")
def tiny(tiny_model: Path):
    from transformers import AutoTokenizer

    return load(tiny_model), AutoTokenizer.from_pretrained(tiny_model)


def test_teacher_forcing_equals_greedy_generate(tiny) -> None:
    """On the model's own greedy continuation as the answer, the argmax at every answer position is that
    continuation; one changed token is a miss exactly there (negative control)."""
    from ropectl.eval.forward import teacher_forced
    from ropectl.eval.tasks.ruler.score import judge

    model, tok = tiny
    for t in trials_for(tok, TASKS, "1400", samples=1).values():
        generated = greedy_generate(model, t.ids[:t.prompt_len], t.answer_len)
        [(predicted, _)] = teacher_forced(model, [t], "cpu")
        assert predicted[0] == generated[0]
        forced = replace(t, ids=t.ids[:t.prompt_len] + generated)
        [(mine, _)] = teacher_forced(model, [forced], "cpu")
        assert mine == generated
        assert judge(forced, mine, 0.0).score == 1.0
        wrong = replace(forced, ids=forced.ids[:-1] + ((generated[-1] + 1) % model.config.vocab_size,))
        [(bad, _)] = teacher_forced(model, [wrong], "cpu")
        last_ref_end = t.spans[-1][1]
        assert bad == generated and judge(wrong, bad, 0.0).score == (1.0 if last_ref_end < t.answer_len else
                                                                       (len(t.spans) - 1) / len(t.spans))


def test_greedy_continuation_is_generate_token_for_token(tiny) -> None:
    from ropectl.eval.forward import continuation

    model, tok = tiny
    for t in trials_for(tok, ["niah_single_1", "vt"], "1400", samples=1).values():
        prompt = t.ids[:t.prompt_len]
        want = greedy_generate(model, prompt, 24)
        assert continuation(model, prompt, 24, "cpu", set()) == want
        stop = want[5]  # an end token ends it, that token included, as generate does
        assert continuation(model, prompt, 24, "cpu", {stop}) == want[:want.index(stop) + 1]


def test_every_score_is_string_match_all_on_greedy_output(tiny) -> None:
    """Every task on the tiny model: the score equals RULER's metric on generate's output within the task's budget;
    a reference greedy writes later than the answer's first token (teacher forcing misses it) is found, and one it
    never writes is not (negative control)."""
    from ropectl.eval.tasks.ruler import GENERATORS
    from ropectl.eval.tasks.ruler.score import score_trials

    model, tok = tiny
    trials = list(trials_for(tok, TASKS, "1400", samples=1).values())
    outcomes = score_trials(hf_engine(model, tok), trials)
    for t, o in zip(trials, outcomes, strict=True):
        text = tok.decode(list(generate(model, t.ids[:t.prompt_len], GENERATORS[t.task].budget)))
        assert o.score == ruler_string_match_all(text, t.references), (t.task, text, t.references)
    t = trials[0]
    text = tok.decode(list(generate(model, t.ids[:t.prompt_len], GENERATORS[t.task].budget)))
    inside, absent = text[3:8], "\x07never\x07"
    assert inside.strip() and absent not in text
    for refs, want in (((inside,), 1.0), ((absent,), 0.0)):
        [o] = score_trials(hf_engine(model, tok), [replace(t, references=refs)])
        assert o.scored_by == "greedy" and o.score == want


def test_greedy_leaves_dynamic_rope_as_the_cell_ran_it(tiny_model: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy generation runs past the cell's length, where dynamic scaling grows its base; the sweep's check of the
    frequencies at the cell's length still passes because the rotary modules are restored. Without the restore
    (control), the same run fails that check."""
    import contextlib

    from ropectl.errors import VerificationError
    from ropectl.eval import rotary
    from ropectl.eval.tasks.ruler.runner import run_tasks
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec

    def spec(out: str):
        return build_tasks_spec(model=str(tiny_model), tasks="niah_single_1", methods=["dynamic:2"], lengths="500",
                                samples=1, out=tmp_path / out, dtype="fp32")

    result = run_tasks(spec("kept"))
    assert [r.scored_by for r in result.rows] == ["greedy"]  # a random model misses: greedy ran past 500
    monkeypatch.setattr(rotary, "kept_rotary", lambda model: contextlib.nullcontext())
    with pytest.raises(VerificationError):
        run_tasks(spec("not-kept"))


@pytest.mark.slow
def test_smollm2_scores_equal_string_match_all_on_generate(smollm2: Path, smol_tok) -> None:
    """Every task on the real model at 1k: the score is RULER's string_match_all on transformers' greedy output
    within the task's budget, whichever path settled it."""
    from ropectl.eval.tasks.ruler import GENERATORS
    from ropectl.eval.tasks.ruler.score import score_trials
    from tests.helpers.eval_reference import gguf_model

    model = gguf_model(smollm2)
    trials = list(trials_for(smol_tok, TASKS, "1024", samples=1).values())
    outcomes = score_trials(hf_engine(model, smol_tok), trials)
    for t, o in zip(trials, outcomes, strict=True):
        text = smol_tok.decode(list(generate(model, t.ids[:t.prompt_len], GENERATORS[t.task].budget)))
        assert o.score == ruler_string_match_all(text, t.references), (t.task, text, t.references)
    assert sum(o.found for o in outcomes) > 0  # a real model retrieves something at 1k
