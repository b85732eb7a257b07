"""Token-exact prompts for the RULER-style tasks: a generator describes a sample (instruction, haystack units,
needles at depths, question with RULER's answer prefix, the references); ``assemble`` turns it into exactly
``length - SLACK`` token ids, answer included, and records where each reference sits in the answer; greedy decoding
has the answer's tokens and the ``SLACK`` after them, so nothing runs past ``length``.

RULER sizes a prompt by whole haystack units and stops below the length minus its generation budget; ropectl fills
to the exact length instead (the last unit may be cut), so every trial of a cell has the same length for every
method and a batch needs no padding. Needles go in at unit boundaries, at the depth nearest the one drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ropectl.errors import UsageError

# The answer's pieces: (text, index of the reference it carries, or None for a separator)
Pieces = tuple[tuple[str, int | None], ...]


def comma_pieces(refs: tuple[str, ...]) -> Pieces:
    """`` a, b, c``: RULER's NIAH references as a list after the answer prefix."""
    out: list[tuple[str, int | None]] = []
    for i, ref in enumerate(refs):
        if i:
            out.append((",", None))
        out.append((" " + ref, i))
    return tuple(out)


def space_pieces(refs: tuple[str, ...]) -> Pieces:
    """`` a b c``: variable tracking's and frequent words' answers."""
    return tuple((" " + ref, i) for i, ref in enumerate(refs))


@dataclass(frozen=True)
class Layout:
    """One sample before fitting. ``filler`` yields haystack units (each with its own leading separator);
    ``answer_from`` (common/frequent words) derives the references from the units that end up visible."""

    head: str
    filler: Iterator[str]
    tail: str
    references: tuple[str, ...] = ()
    needles: tuple[str, ...] = ()
    depths: tuple[float, ...] = ()
    answer_from: Callable[[list[str]], tuple[str, ...]] | None = None
    pieces: Callable[[tuple[str, ...]], Pieces] = comma_pieces


# Positions a trial leaves free at the end of its length, for greedy decoding to write a few more tokens than the
# canonical answer (RULER's models often open with ":" or a newline) without running past the cell's length.
SLACK = 8


@dataclass(frozen=True)
class Trial:
    """``ids`` has exactly ``length - SLACK`` tokens and ends with the answer (``answer_len`` tokens); ``spans`` are
    each reference's [start, end) inside the answer, in the canonical order teacher forcing uses."""

    task: str
    length: int
    index: int
    ids: tuple[int, ...]
    answer_len: int
    references: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    needles_at: tuple[int, ...] = ()  # token index where each needle starts

    @property
    def prompt_len(self) -> int:
        return len(self.ids) - self.answer_len


@dataclass
class Tokens:
    """Tokenizes pieces once per text (haystack units repeat across trials)."""

    tokenizer: Any
    cache: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def __call__(self, text: str, special: bool = False) -> tuple[int, ...]:
        key = ("\0" if special else "") + text
        if key not in self.cache:
            ids = self.tokenizer(text, add_special_tokens=special, verbose=False)["input_ids"]
            if len(self.cache) < 200_000:
                self.cache[key] = tuple(ids)
            else:
                return tuple(ids)
        return self.cache[key]


def answer_ids(tok: Tokens, pieces: Pieces) -> tuple[list[int], list[tuple[int, int]]]:
    ids: list[int] = []
    spans: dict[int, tuple[int, int]] = {}
    for text, ref in pieces:
        piece = tok(text)
        if ref is not None:
            spans[ref] = (len(ids), len(ids) + len(piece))
        ids += piece
    return ids, [spans[i] for i in sorted(spans)]


def assemble(tok: Tokens, layout: Layout, task: str, length: int, index: int) -> Trial:
    head, tail = list(tok(layout.head, special=True)), list(tok(layout.tail))
    needles = [list(tok(n)) for n in layout.needles]
    fixed = len(head) + len(tail) + sum(map(len, needles))
    units: list[tuple[str, tuple[int, ...]]] = []
    refs = layout.references
    n_fill = length - fixed
    for _ in range(8):  # answer_from: the references depend on what fits, the fit on the answer's length
        _take(units, layout.filler, tok, n_fill)
        if layout.answer_from is not None:
            refs = layout.answer_from(_visible(units, n_fill))
        answer, spans = answer_ids(tok, layout.pieces(refs))
        wanted = length - SLACK - fixed - len(answer)
        if wanted == n_fill:
            break
        n_fill = wanted
    else:
        raise RuntimeError(f"{task}: the answer does not settle at length {length}")
    if n_fill < 8:
        need = fixed + len(answer) + 8 + SLACK
        raise UsageError(f"length {length} is too short for task {task} (its prompt without haystack needs "
                         f"{need - 8} tokens)", f"pass lengths of at least {need}, or leave {task} out")
    filler, bounds = _fill(units, n_fill)
    ids, needles_at = _insert(head, filler, bounds, needles, layout.depths)
    ids += tail + answer
    assert len(ids) == length - SLACK, (task, len(ids), length)
    return Trial(task, length, index, tuple(ids), len(answer), tuple(refs), tuple(map(tuple, spans)),
                 tuple(needles_at))


def _take(units: list[tuple[str, tuple[int, ...]]], source: Iterator[str], tok: Tokens, n: int) -> None:
    """Draw units until they hold at least ``n`` tokens (kept across settling rounds)."""
    have = sum(len(ids) for _, ids in units)
    while have < n:
        text = next(source)
        units.append((text, tok(text)))
        have += len(units[-1][1])


def _visible(units: list[tuple[str, tuple[int, ...]]], n: int) -> list[str]:
    """The units wholly inside the first ``n`` filler tokens."""
    out, used = [], 0
    for text, ids in units:
        if used + len(ids) > n:
            break
        out.append(text)
        used += len(ids)
    return out


def _fill(units: list[tuple[str, tuple[int, ...]]], n: int) -> tuple[list[int], list[int]]:
    ids: list[int] = []
    bounds = [0]
    for _, piece in units:
        if len(ids) >= n:
            break
        ids += piece
        bounds.append(min(len(ids), n))
    return ids[:n], [b for b in bounds if b < n] or [0]


def _insert(head: list[int], filler: list[int], bounds: list[int], needles: list[list[int]],
            depths: tuple[float, ...]) -> tuple[list[int], list[int]]:
    """Needles in ``depths`` order, each at the unit boundary nearest its depth of the filler."""
    cuts = [min(bounds, key=lambda b: (abs(b - d * len(filler)), b)) for d in depths]
    ids, at, last = list(head), [], 0
    for cut, needle in sorted(zip(cuts, needles), key=lambda x: x[0]):
        ids += filler[last:cut]
        at.append(len(ids))
        ids += needle
        last = cut
    return ids + filler[last:], at
