"""Frequent words extraction (RULER ``fwe``; lm-evaluation-harness ``lm_eval/tasks/ruler/fwe_utils.py``): coded
words of 6 random letters drawn with Zipf frequencies (alpha 2, the top rank being the noise word "..."); the
answer is the three most frequent coded words. Template and answer prefix are RULER's.

ropectl sizes the text to the length with the tokenizer, shuffles it once, and counts the answer from the
words wholly visible, most frequent first (RULER's order).
"""

from __future__ import annotations

import math
import random
import string
from collections import Counter
from collections.abc import Iterator

from ropectl.eval.tasks.ruler import Generator, register_generator
from ropectl.eval.tasks.ruler.build import Layout, Tokens, space_pieces
from ropectl.eval.tasks.ruler.haystack import Haystack

TEMPLATE = ("Read the following coded text and track the frequency of each coded word. Find the three most frequently "
            "appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. "
            "What are the three most frequently appeared words in the above coded text?")
ANSWER_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"
ALPHA, WORD_LEN, NOISE = 2.0, 6, "..."
ZETA_2 = math.pi**2 / 6  # zeta(alpha) for alpha = 2


def make(rng: random.Random, hay: Haystack, length: int, tok: Tokens) -> Layout:
    size = max(16, length // 50)  # RULER: vocabulary of max_seq_length // 50
    vocab: list[str] = []
    while len(vocab) < size:
        word = "".join(rng.choices(string.ascii_lowercase, k=WORD_LEN))
        if word not in vocab:
            vocab.append(word)
    vocab[0] = NOISE
    # expected tokens per drawn word: the noise word is 1/zeta(2) = 61 % of the draws
    coded = sum(len(tok(" " + w)) for w in vocab[1:51]) / len(vocab[1:51])
    per_word = len(tok(" " + NOISE)) / ZETA_2 + coded * (1 - 1 / ZETA_2)
    head, tail = TEMPLATE.format(context="\0").split("\0")
    total = max(64, int((length - len(tok(head + tail + ANSWER_PREFIX)) - 32) / per_word * 1.02))
    counts = [int(total * k**-ALPHA / ZETA_2) for k in range(1, len(vocab) + 1)]
    words = [w for w, c in zip(vocab, counts) for _ in range(c)]
    rng.shuffle(words)
    return Layout(head, _words(words, vocab, rng), tail + ANSWER_PREFIX, answer_from=_answer, pieces=space_pieces)


def _words(words: list[str], vocab: list[str], rng: random.Random) -> Iterator[str]:
    yield from (" " + w for w in words)
    while True:  # past the sized text (an estimate): the noise word
        yield " " + NOISE


def _answer(units: list[str]) -> tuple[str, ...]:
    counts = Counter(u.strip() for u in units if u.strip() != NOISE)
    return tuple(sorted(counts, key=lambda w: (-counts[w], w))[:3])


register_generator(Generator("fwe", make, 50, "RULER fwe (lm-eval lm_eval/tasks/ruler/fwe_utils.py)"),
                   groups=("ruler",))
