"""A toy evaluation engine, written as one module: the walk-through of docs/contributing/add-an-engine.md
("An evaluation engine").

Loading the weights and switching the RoPE method are the transformers engine's (a subclass inherits them, and
its capabilities: a cheap method switch, torchrun data parallelism). The three scoring calls are written afresh,
the plain way: the model's own forward with logits at every position and log-softmax, greedy decoding without a
cache. So the toy's numbers are an independent computation of what the transformers engine's chunked loss, its
head-at-the-answer teacher forcing and its KV-cached decoding compute.

Registered through ``ROPECTL_EVAL_ENGINES=tests.helpers.toy_engine`` (or the ``ropectl.eval_engines`` entry point).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ropectl.eval.engines import register_engine
from ropectl.eval.engines.hf import TransformersEngine
from ropectl.eval.engines.requests import (
    AnswerLogprobs,
    AnswerScore,
    Continuation,
    GreedyContinuation,
    SequenceNLL,
    SequenceScore,
    sequence_score,
)


@register_engine("toy")
class ToyEngine(TransformersEngine):
    def _logprobs(self, tokens: Sequence[int]) -> Any:
        """[len(tokens), vocab] log-probs of the next token after each position, from the model's own forward."""
        import torch

        ids = torch.as_tensor([int(t) for t in tokens], dtype=torch.long, device=self.input_device())[None]
        with torch.inference_mode():
            return torch.log_softmax(self.model(input_ids=ids).logits[0].float(), -1).cpu()

    def sequence_nll(self, requests: Sequence[SequenceNLL]) -> list[SequenceScore]:
        import torch

        out = []
        for r in requests:
            logp = self._logprobs(r.tokens)
            targets = torch.as_tensor([int(t) for t in r.tokens[1:]], dtype=torch.long)
            nll = -logp[:-1].gather(-1, targets[:, None])[:, 0]
            out.append(sequence_score(r, nll[r.score_from:]))
        return out

    def answer_logprobs(self, requests: Sequence[AnswerLogprobs]) -> list[AnswerScore]:
        out = []
        for r in requests:
            logp = self._logprobs(r.tokens)
            start = len(r.prompt)
            rows = [logp[start - 1 + k] for k in range(len(r.answer))]
            picked = tuple(float(row[int(a)]) for row, a in zip(rows, r.answer, strict=True))
            out.append(AnswerScore(tuple(int(row.argmax()) for row in rows), picked, -sum(picked)))
        return out

    def greedy(self, requests: Sequence[GreedyContinuation]) -> list[Continuation]:
        from ropectl.eval.engines.hf.forward import end_tokens
        from ropectl.runtime.rotary import kept_rotary

        state = self.state
        assert state is not None, "activate a method before scoring"
        eos = end_tokens(self.model, self.tokenizer)
        out = []
        for r in requests:
            tokens: list[int] = []
            with kept_rotary(self.model):  # dynamic grows its base with the sequence: the next prompt starts afresh
                for step in range(r.budget):  # no cache: every step runs the whole sequence
                    token = int(self._logprobs([*r.prompt, *tokens])[-1].argmax())
                    if step == 0:
                        self.verify_after_forward(state, len(r.prompt))
                    tokens.append(token)
                    if token in eos or (r.stop is not None and r.stop(tokens)):
                        break
            nll = self.answer_logprobs([AnswerLogprobs(r.prompt, r.answer)])[0].nll if r.answer else 0.0
            out.append(Continuation(tuple(tokens), nll))
        return out
