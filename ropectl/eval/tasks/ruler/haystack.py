"""What the generators draw from, taken from the eval corpus (by default the embedded Shakespeare, so every task
runs offline): the corpus as RULER's "essay" haystack, split into sentences, and a word list.

RULER's essay haystack is Paul Graham's essays, any long text serving; its key words come from the
``wonderwords`` lists (adjective-noun pairs) and its common-words task from the same lists. ropectl takes both
kinds of word from the corpus instead: distinct lower-case alphabetic words of 3 to 12 letters, sorted, so a
seed gives the same draw on every machine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[a-z]{3,12}")


@dataclass(frozen=True)
class Haystack:
    sentences: tuple[str, ...]
    words: tuple[str, ...]

    def essay(self) -> Iterator[str]:
        """The corpus sentence by sentence, from its start, over and over (RULER joins essays with spaces)."""
        while True:
            for s in self.sentences:
                yield " " + s

    def repeat(self, sep: str = "\n") -> Iterator[str]:
        while True:
            yield sep + NOISE


def from_texts(texts: Iterable[str], max_chars: int) -> Haystack:
    """Sentences of the first ``max_chars`` characters (whitespace collapsed, as RULER does), and the words."""
    parts, size = [], 0
    for text in texts:
        parts.append(text)
        size += len(text)
        if size >= max_chars:
            break
    joined = re.sub(r"\s+", " ", " ".join(parts)).strip()
    sentences = tuple(s for s in _SENTENCE.split(joined) if s)
    words = tuple(sorted({w for w in _WORD.findall(joined.lower()) if w.isascii()}))
    return Haystack(sentences, words)
