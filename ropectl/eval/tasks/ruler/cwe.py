"""Common words extraction (RULER ``cwe``; lm-evaluation-harness ``lm_eval/tasks/ruler/cwe_utils.py``): a numbered
list where 10 words appear 30 times and the rest 3 times (6 and 1 below 4096 tokens), with RULER's one solved
example first; the answer is the 10 common words. Template, example sizes and answer prefix are RULER's.

ropectl sizes the list to the length with the tokenizer and counts the answer from the items that are wholly
visible. The references' canonical order, which teacher forcing needs, is the order of first appearance in
the list (RULER's reference order is the order of its random draw, which a model cannot know).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

from ropectl.errors import DataError
from ropectl.eval.tasks.ruler import Generator, register_generator
from ropectl.eval.tasks.ruler.build import Layout, Pieces, Tokens
from ropectl.eval.tasks.ruler.haystack import Haystack

TEMPLATE = ("Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
            "that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?")
ANSWER_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
COMMON = 10


def numbered(pairs: list[str]) -> str:
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(pairs))


def _example(rng: random.Random, words: list[str], length: int) -> tuple[str, list[str]]:
    n, fc, fu = (20, 3, 1) if length < 4096 else (40, 10, 3)
    if len(words) < n:  # RULER's solved example draws n distinct words
        raise DataError(f"task cwe needs at least {n} distinct words in its haystack at length {length}; this "
                        f"corpus has {len(words)}", "pass a --dataset of more varied text, or leave cwe out of --task")
    chosen = rng.sample(words, n)
    items = chosen[:COMMON] * fc + chosen[COMMON:] * fu
    rng.shuffle(items)
    return numbered(items), chosen[:COMMON]


def make(rng: random.Random, hay: Haystack, length: int, tok: Tokens) -> Layout:
    words = list(hay.words)
    fc, fu = (6, 1) if length < 4096 else (30, 3)
    ex_context, ex_answer = _example(rng, words, length)
    example = TEMPLATE.format(context=ex_context) + ANSWER_PREFIX + " " + numbered(ex_answer)
    head, tail = TEMPLATE.format(context="\0").split("\0")
    per_item = max(1.0, sum(len(tok(f" {900 + i}. {w}")) for i, w in enumerate(words[:50])) / min(50, len(words)))
    room = length - 3 * len(tok(example)) // 2 - 64
    n_uncommon = max(COMMON, int(room / per_item - COMMON * fc) // fu)
    chosen = rng.sample(words, min(len(words), COMMON + n_uncommon))
    items = chosen[:COMMON] * fc + chosen[COMMON:] * fu
    rng.shuffle(items)
    return Layout(example + "\n" + head, _items(items, chosen, rng), tail + ANSWER_PREFIX,
                  answer_from=_answer, pieces=_pieces)


def _items(items: list[str], chosen: list[str], rng: random.Random) -> Iterator[str]:
    for i, word in enumerate(items):
        yield f"{' ' if i else ''}{i + 1}. {word}"
    i = len(items)
    while True:  # past the sized list (an estimate): rare words once each
        i += 1
        yield f" {i}. {rng.choice(chosen[COMMON:] or chosen)}"


def _answer(units: list[str]) -> tuple[str, ...]:
    """The 10 most frequent visible words, in order of first appearance."""
    seen = [u.split(". ", 1)[1] for u in units]
    counts = Counter(seen)
    top = sorted(counts, key=lambda w: (-counts[w], seen.index(w)))[:COMMON]
    return tuple(sorted(top, key=seen.index))


def _pieces(refs: tuple[str, ...]) -> Pieces:
    out: list[tuple[str, int | None]] = []
    for i, ref in enumerate(refs):
        out += [(f" {i + 1}.", None), (" " + ref, i)]
    return tuple(out)


register_generator(Generator("cwe", make, 120, "RULER cwe (lm-eval lm_eval/tasks/ruler/cwe_utils.py)"),
                   groups=("ruler",))
