"""Training data as the references build it: documents with BOS/EOS, a held-out split by document, packed windows.

- Every document is one token sequence bookended by BOS (where the tokenizer has one) and EOS, as YaRN's PG19
  chunks are. Documents are concatenated in a seeded order and cut into equal spans with no padding, so by default
  attention DOES cross document boundaries inside a span (YaRN and PoSE do the same); the EOS between them marks the
  seam. ``--doc-mask`` keeps attention inside each document, and ``--short-mix`` mixes in examples of short
  documents (ProLong; ``packing`` says how).
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
from ropectl.finetune.packing import cut, is_short, restart_positions, short_pieces
from ropectl.finetune.positions import sample as pose_sample


@dataclass(frozen=True)
class Split:
    """Training spans and held-out documents (token arrays), with what the record keeps about them."""

    spans: tuple[Any, ...]  # 1-D int64 arrays of ``span`` tokens each
    held_out: tuple[tuple[str, Any], ...]  # (doc id, tokens)
    train_docs: int
    train_tokens: int  # tokens in the packed stream (what the spans were cut from)
    segments: tuple[Any, ...] = ()  # per span, each token's document number (int32)
    short_spans: tuple[Any, ...] = ()  # short documents packed into training-length sequences (--short-mix)
    short_segments: tuple[Any, ...] = ()

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
          bos: int | None, eos: int | None, corpus: str = "corpus", names: Sequence[str] = (),
          short: tuple[int, int] | None = None) -> Split:
    """Bookend, hold out ``held_out`` documents (or those ``names``), pack the rest in a seeded order and cut
    ``span``-token spans; ``short`` = (piece limit, sequence length) also packs short documents (``packing``)."""
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
    spans, segments, total = cut([train[i] for i in order], span)
    if not spans:
        raise DataError(f"the corpus '{corpus}' has {total:,} training tokens after holding out {held_out} "
                        f"documents, fewer than one {span:,}-token training span",
                        "pass a larger corpus (--dataset), a smaller --held-out, or a shorter --window / target")
    short_spans: tuple[Any, ...] = ()
    short_segments: tuple[Any, ...] = ()
    if short is not None:
        pieces = short_pieces(train, short[0])
        shuffled = np.random.default_rng([seed, 5]).permutation(len(pieces))
        short_spans, short_segments, _ = cut([pieces[i] for i in shuffled], short[1])
        if not short_spans:
            raise DataError(f"--short-mix packs short documents into {short[1]:,}-token sequences, and the corpus "
                            f"'{corpus}' has too few training tokens to fill one",
                            "pass a larger corpus (--dataset), or --short-mix 0")
    return Split(spans, tuple(docs[i] for i in sorted(keep)), len(train), total, segments, short_spans,
                 short_segments)


class PackedExamples:
    """A map-style dataset of ``length`` examples; example ``j`` is a pure function of (seed, j).

    Each pass over the spans uses its own seeded permutation; PoSE draws its chunks and skip from
    ``default_rng([seed, 3, j])``. The trainer reads it in order (no sampler shuffle), so resuming skips exactly
    the examples already trained on and data-parallel ranks split each global batch. With ``short_mix`` example j
    is short when ``packing.is_short(j)`` says so (then a short span, by its own seeded permutation); with
    ``doc_mask`` or ``short_mix`` every example has ``segment_ids`` and ``position_ids``.
    """

    def __init__(self, spans: Sequence[Any], length: int, seed: int, window: int, target: int, pose: bool, *,
                 segments: Sequence[Any] = (), short_spans: Sequence[Any] = (), short_segments: Sequence[Any] = (),
                 short_mix: float = 0.0, doc_mask: bool = False) -> None:
        self.spans, self.length, self.seed = spans, length, seed
        self.window, self.target, self.pose = window, target, pose
        self.segments, self.doc_mask = segments, doc_mask
        self.short_spans, self.short_segments, self.short_mix = short_spans, short_segments, short_mix
        self._perms: dict[tuple[int, int], Any] = {}

    def __len__(self) -> int:
        return self.length

    def _index(self, j: int, n: int, stream: int) -> int:
        import numpy as np

        epoch = j // n
        if (stream, epoch) not in self._perms:
            key = [self.seed, 4, epoch] if stream == 0 else [self.seed, 6, epoch]  # stream 0: the seeds before mixing
            self._perms[(stream, epoch)] = np.random.default_rng(key).permutation(n)
        return int(self._perms[(stream, epoch)][j % n])

    def span_index(self, j: int) -> int:
        return self._index(j, len(self.spans), 0)

    def __getitem__(self, j: int) -> dict[str, Any]:
        import numpy as np

        if not 0 <= j < self.length:
            raise IndexError(j)
        if self.short_mix and is_short(j, self.short_mix):
            k = self._index(j, len(self.short_spans), 1)
            segs = self.short_segments[k]
            positions = restart_positions(np.arange(len(segs), dtype=np.int64), segs)
            return {"input_ids": self.short_spans[k], "position_ids": positions, "segment_ids": segs}
        i = self.span_index(j)
        span = self.spans[i]
        segs = self.segments[i] if self.doc_mask else np.zeros(len(span), dtype=np.int32)
        if self.pose:
            drawn = pose_sample(np.random.default_rng([self.seed, 3, j]), self.window, self.target, len(span))
            ids, positions, segs = span[drawn.token_index], drawn.position_ids, segs[drawn.token_index]
        else:
            ids, positions = span, np.arange(len(span), dtype=np.int64)
        if not (self.doc_mask or self.short_mix):
            return {"input_ids": ids, "position_ids": positions} if self.pose else {"input_ids": ids}
        if self.doc_mask:
            positions = restart_positions(positions, segs)
        return {"input_ids": ids, "position_ids": positions, "segment_ids": segs}


def collate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Equal-length rows stacked into tensors (no padding, no attention mask: every token is real)."""
    import numpy as np
    import torch

    return {key: torch.as_tensor(np.stack([r[key] for r in rows])) for key in rows[0]}
