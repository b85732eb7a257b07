"""Training data as the references build it: documents with BOS/EOS, a held-out split by document, packed windows.

- Every document is one token sequence bookended by BOS (where the tokenizer has one) and EOS, as YaRN's PG19
  chunks are. Documents are concatenated in a seeded order and cut into equal spans with no padding, so attention
  DOES cross document boundaries inside a span (YaRN and PoSE do the same); the EOS between them marks the seam.
- The held-out documents are whole documents: named by the user (the same ones across runs, for paired comparisons),
  or drawn seeded, preferring ones long enough to be scored at the target; recorded in the output and never packed
  into a training span.
- A training example is a span of ``span`` tokens: ``--full`` uses the target length with plain positions; PoSE
  draws its window and skipped positions from a span of up to 5 x the window (``positions``).
- One "step" is ``global_batch`` examples of ``seq_len`` tokens each; example ``j`` of the run is a pure function of
  (seed, j), so a resumed or data-parallel run sees exactly the examples of a one-process uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ropectl.errors import DataError
from ropectl.finetune.positions import example as pose_example


@dataclass(frozen=True)
class Split:
    """Training spans and held-out documents (token arrays), with what the record keeps about them."""

    spans: tuple[Any, ...]  # 1-D int64 arrays of ``span`` tokens each
    held_out: tuple[tuple[str, Any], ...]  # (doc id, tokens)
    train_docs: int
    train_tokens: int  # tokens in the packed stream (what the spans were cut from)

    @property
    def held_out_ids(self) -> list[str]:
        return [doc_id for doc_id, _ in self.held_out]


def bookend(tokens: Any, bos: int | None, eos: int | None) -> Any:
    """``tokens`` starting with BOS and ending with EOS (each only where the tokenizer has one and it is missing)."""
    import numpy as np

    out = np.asarray(tokens, dtype=np.int64)
    if bos is not None and (len(out) == 0 or out[0] != bos):
        out = np.concatenate([[bos], out])
    if eos is not None and (len(out) == 0 or out[-1] != eos):
        out = np.concatenate([out, [eos]])
    return out


def choose_held_out(lengths: Sequence[int], k: int, need: int, seed: int) -> list[int]:
    """``k`` document indices, drawn seeded among those of at least ``need`` tokens first, then the longest others."""
    import numpy as np

    rng = np.random.default_rng([seed, 1])
    order = [int(i) for i in rng.permutation(len(lengths))]
    long_enough = [i for i in order if lengths[i] >= need]
    rest = sorted((i for i in order if lengths[i] < need), key=lambda i: -lengths[i])
    return sorted((long_enough + rest)[:k])


def named_held_out(doc_ids: Sequence[str], names: Sequence[str], corpus: str) -> list[int]:
    """Indices of the documents ``names`` (as the corpus names them); an unknown name is refused."""
    index = {doc_id: i for i, doc_id in enumerate(doc_ids)}
    unknown = [n for n in names if n not in index]
    if unknown:
        raise DataError(f"the corpus '{corpus}' has no document '{unknown[0]}'",
                        f"name documents as the corpus does, e.g. {', '.join(list(index)[:3])}")
    return sorted(index[n] for n in names)


def split(documents: Sequence[Any], span: int, held_out: int, eval_length: int, seed: int,
          bos: int | None, eos: int | None, corpus: str = "corpus", names: Sequence[str] = ()) -> Split:
    """Bookend, hold out ``held_out`` documents (or those ``names``), pack the rest in a seeded order and cut
    ``span``-token spans."""
    import numpy as np

    docs = [(d.doc_id, bookend(d.tokens, bos, eos)) for d in documents]
    held_out = len(names) or held_out
    if held_out >= len(docs):
        raise DataError(f"the corpus '{corpus}' has {len(docs)} documents, and --held-out {held_out} would leave "
                        "none to train on", "pass a smaller --held-out (or 0), or a corpus with more documents")
    chosen = named_held_out([d for d, _ in docs], names, corpus) if names else \
        choose_held_out([len(t) for _, t in docs], held_out, eval_length, seed)
    keep = set(chosen)
    train = [docs[i][1] for i in range(len(docs)) if i not in keep]
    order = np.random.default_rng([seed, 2]).permutation(len(train))
    stream = np.concatenate([train[i] for i in order])
    n = len(stream) // span
    if n == 0:
        raise DataError(f"the corpus '{corpus}' has {len(stream):,} training tokens after holding out {held_out} "
                        f"documents, fewer than one {span:,}-token training span",
                        "pass a larger corpus (--dataset), a smaller --held-out, or a shorter --window / target")
    spans = tuple(stream[i * span:(i + 1) * span] for i in range(n))
    return Split(spans, tuple(docs[i] for i in sorted(keep)), len(train), int(len(stream)))


class PackedExamples:
    """A map-style dataset of ``length`` examples; example ``j`` is a pure function of (seed, j).

    Each pass over the spans uses its own seeded permutation; PoSE draws its chunks and skip from
    ``default_rng([seed, 3, j])``. The trainer reads it in order (no sampler shuffle), so resuming skips exactly
    the examples already trained on and data-parallel ranks split each global batch.
    """

    def __init__(self, spans: Sequence[Any], length: int, seed: int, window: int, target: int, pose: bool) -> None:
        self.spans, self.length, self.seed = spans, length, seed
        self.window, self.target, self.pose = window, target, pose
        self._perms: dict[int, Any] = {}

    def __len__(self) -> int:
        return self.length

    def span_index(self, j: int) -> int:
        import numpy as np

        n = len(self.spans)
        epoch = j // n
        if epoch not in self._perms:
            self._perms[epoch] = np.random.default_rng([self.seed, 4, epoch]).permutation(n)
        return int(self._perms[epoch][j % n])

    def __getitem__(self, j: int) -> dict[str, Any]:
        import numpy as np

        if not 0 <= j < self.length:
            raise IndexError(j)
        span = self.spans[self.span_index(j)]
        if not self.pose:
            return {"input_ids": span}
        ids, positions = pose_example(span, np.random.default_rng([self.seed, 3, j]), self.window, self.target)
        return {"input_ids": ids, "position_ids": positions}


def collate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Equal-length rows stacked into tensors (no padding, no attention mask: every token is real)."""
    import numpy as np
    import torch

    return {key: torch.as_tensor(np.stack([r[key] for r in rows])) for key in rows[0]}
