"""eval-passkey on the embedded SmolLM2-135M: teacher forcing agrees with transformers' greedy generate."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.eval_reference import gguf_model, greedy_generate


@pytest.mark.heavy
def test_smollm2_teacher_forcing_equals_generate_and_retrieves(smollm2: Path) -> None:
    import torch
    from transformers import AutoTokenizer

    from ropectl.eval.tasks.passkey.prompt import PromptBuilder

    tok = AutoTokenizer.from_pretrained(smollm2.parent, gguf_file=smollm2.name)
    model = gguf_model(smollm2)
    builder = PromptBuilder(tok, 1024)
    trials = [builder.trial(1024, d, 0, seed=0, digits=5) for d in (0.1, 0.5, 0.9)]
    outcomes = score_trials(model, trials, torch.device("cpu"))  # one batched forward
    for trial, outcome in zip(trials, outcomes):
        generated = greedy_generate(model, trial.ids[:-trial.answer_len], trial.answer_len)
        assert outcome.predicted == generated or (not outcome.success and outcome.predicted[0] == generated[0])
        assert outcome.success == (generated == trial.ids[-trial.answer_len:])
        assert tok.decode(list(generated)).strip() == trial.key  # a real model finds the key at 1k


def score_trials(model, trials, device):
    """Passkey outcomes from the transformers engine's batched teacher forcing on ``model``."""
    from ropectl.eval.engines.hf.forward import teacher_forced
    from ropectl.eval.tasks.passkey.score import outcomes

    got = teacher_forced(model, [list(t.ids) for t in trials], [t.answer_len for t in trials], device)
    return outcomes(trials, [(g.argmax, g.nll) for g in got])
