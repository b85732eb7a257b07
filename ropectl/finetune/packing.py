"""Document masking and short documents in packed training sequences (ProLong, Gao et al. 2024, arXiv 2410.02660).

ProLong trains Llama-3-8B at 64k with about 40 % of its tokens from short documents, and finds retention of short-
context ability needs them; it packs documents into each sequence with *document masking*: a token attends only to
earlier tokens of its own document. Here, both as options of ``ropectl finetune``:

- **Segments.** Every packed sequence carries ``segment_ids`` (one id per token: which document it came from). With
  ``--doc-mask`` attention stays inside a segment, positions restart at each segment's first token, and the target
  that would predict a segment's first token from the previous document is dropped from the loss (as transformers'
  ``DataCollatorWithFlattening`` drops it). Without it, one sequence is one segment, as before.
- **PoSE.** A document inside a PoSE window keeps PoSE's skip (the skipped positions are the point of PoSE); only its
  first position is moved to 0. RoPE scores depend on position differences alone, so inside a segment this is the
  same attention as leaving the positions alone; it keeps every position below the target.
- **Short examples** (``--short-mix F``): exactly floor(n x F) of any run's first n examples are short, evenly
  spread. A short example packs short documents: those of at most the trained context, and the longer training
  documents cut into trained-context pieces (a corpus of long documents, such as the plays, has no short ones of
  its own). Each piece is its own segment, always masked, with positions 0, 1, ... (no skip): what keeps a short
  example inside the trained context however long the sequence is.

The mask: transformers reads position jumps as packed-sequence boundaries only when no attention mask is given
(``masking_utils.find_packed_sequence_indices``, transformers 5), which PoSE's skip would trip, and 4.x had no such
reading for eager/SDPA. A 4D additive mask (0 where a token may attend, the dtype's minimum elsewhere) is what every
transformers from 4.43 takes as a custom mask for eager and SDPA attention, so it is built here: [batch, 1, T, T]
in the run's compute dtype (2 or 4 bytes x T^2 per sequence, the size of transformers' own SDPA mask for packing).
A batch whose rows each hold one document builds none (``loss.training_loss``): SDPA keeps its causal kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def cut(docs: Sequence[Any], span: int) -> tuple[tuple[Any, ...], tuple[Any, ...], int]:
    """``docs`` (1-D token arrays, in packing order) concatenated and cut into ``span``-token spans: (token spans,
    segment-id spans, tokens in the stream). Segment ids number the documents in order."""
    import numpy as np

    if not docs:
        return (), (), 0
    stream = np.concatenate(docs)
    segments = np.repeat(np.arange(len(docs), dtype=np.int32), [len(d) for d in docs])
    n = len(stream) // span
    return (tuple(stream[i * span:(i + 1) * span] for i in range(n)),
            tuple(segments[i * span:(i + 1) * span] for i in range(n)), int(len(stream)))


def short_pieces(docs: Sequence[Any], limit: int) -> list[Any]:
    """Every document of at most ``limit`` tokens, and every longer one cut into ``limit``-token pieces."""
    return [doc[i:i + limit] for doc in docs for i in range(0, len(doc), limit)]


def is_short(j: int, fraction: float) -> bool:
    """Example ``j`` is short: exactly floor(n x fraction) of examples 0..n-1 are, evenly spread."""
    import math

    return math.floor((j + 1) * fraction) > math.floor(j * fraction)


def restart_positions(positions: Any, segments: Any) -> Any:
    """``positions`` less the position of each segment's first token: 0 at every segment start, the gaps kept."""
    import numpy as np

    starts = np.flatnonzero(np.r_[True, segments[1:] != segments[:-1]])
    first = np.repeat(positions[starts], np.diff(np.r_[starts, len(segments)]))
    return (positions - first).astype(np.int64)


def document_mask(segments: Any, dtype: Any) -> Any:
    """The 4D additive causal mask of ``segments`` [batch, T]: 0 where query i may attend key j (j <= i, same
    segment), ``finfo(dtype).min`` elsewhere; [batch, 1, T, T]."""
    import torch

    same = segments[:, :, None] == segments[:, None, :]
    causal = torch.ones(segments.shape[-1], segments.shape[-1], dtype=torch.bool, device=segments.device).tril()
    allowed = (same & causal)[:, None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=segments.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)


def kept_targets(segments: Any) -> Any:
    """[batch, T - 1] bools: target t + 1 is scored (it is in the same segment as the token that predicts it)."""
    return segments[:, 1:] == segments[:, :-1]
