"""The transformers engine's forward beyond the shared one (``ropectl.runtime.forward``: the decoder body,
hidden -> logits): teacher forcing with the head only at the answer positions, and where greedy decoding stops."""

from __future__ import annotations

from typing import Any

from ropectl.eval.engines.requests import AnswerScore
from ropectl.runtime.forward import body_hidden_batch, logits_fn


def teacher_forced(model: Any, rows: list[list[int]], answer_lens: list[int], device: Any) -> list[AnswerScore]:
    """Rows of one length share a forward (equal lengths: no padding, each row is its batch-1 self), each ending in
    its answer; the head runs only over the positions that predict the answer, so no [length, vocab] logits."""
    import torch
    import torch.nn.functional as F

    if len({len(r) for r in rows}) != 1:
        raise ValueError("a batch must hold trials of one length")
    ids = torch.tensor(rows, dtype=torch.long, device=device)
    head = logits_fn(model)
    out = []
    with torch.inference_mode():
        hidden = body_hidden_batch(model, ids)
        for row, k in enumerate(answer_lens):
            n = len(rows[row])
            logits = head(hidden[row, n - 1 - k:n - 1]).float()
            target = ids[row, n - k:].to(logits.device)
            nll = float(F.cross_entropy(logits, target, reduction="sum"))
            picked = torch.log_softmax(logits, -1).gather(-1, target[:, None])[:, 0]
            out.append(AnswerScore(tuple(int(x) for x in logits.argmax(-1)), tuple(float(x) for x in picked), nll))
    return out


def end_tokens(model: Any, tokenizer: Any) -> set[int]:
    """The ids greedy decoding stops at: the generation config's end-of-sequence ids and the tokenizer's."""
    config = getattr(model, "generation_config", None)
    ids = getattr(config, "eos_token_id", None)
    out = set(ids if isinstance(ids, (list, tuple)) else ([] if ids is None else [ids]))
    if getattr(tokenizer, "eos_token_id", None) is not None:
        out.add(int(tokenizer.eos_token_id))
    return out
