"""An evaluation engine whose task answers are known in advance, for report's branch tests on tiny seeded models.

Its greedy decoding returns the canonical answer exactly when the whole trial fits the context the checkpoint
claims (the loaded config's max_position_embeddings), and nothing otherwise; PPL and teacher forcing are the
transformers engine's own. So a tiny random model "does" every task inside its claimed context and none past it,
and report's verdict on it is known by construction. Registered through ``ROPECTL_EVAL_ENGINES``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from ropectl.eval.engines import register_engine
from ropectl.eval.engines.hf import TransformersEngine
from ropectl.eval.engines.requests import Continuation, GreedyContinuation
from tests.helpers.eval_data import build

MODULE = "tests.helpers.report_engine"


@register_engine("claims")
class ClaimsEngine(TransformersEngine):
    def greedy(self, requests: Sequence[GreedyContinuation]) -> list[Continuation]:
        assert self.state is not None, "activate a method before scoring"
        claimed = self.state.rope.max_position_embeddings
        return [Continuation(tuple(r.answer) if len(r.prompt) + len(r.answer) <= claimed else (), 0.0)
                for r in requests]


def tiny_base(folder: Path, context: int) -> Path:
    """A tiny seeded Llama claiming ``context`` tokens, with the character tokenizer of the eval tests whose decoding
    joins characters back without spaces (RULER's string match reads the decoded answer)."""
    from tokenizers import decoders
    from transformers import PreTrainedTokenizerFast

    build("llama", folder, max_position_embeddings=context)
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    tok.backend_tokenizer.decoder = decoders.Fuse()
    tok.save_pretrained(folder)
    return folder


@contextlib.contextmanager
def claims_env(root: Path) -> Iterator[Path]:
    """``root`` as the working folder, with the claims engine registered and a cache of its own."""
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ROPECTL_EVAL_ENGINES", MODULE)
        mp.setenv("XDG_CACHE_HOME", str(root / "cache"))
        mp.chdir(root)
        yield root
