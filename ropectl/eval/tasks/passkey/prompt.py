"""The passkey prompt of the YaRN and LongLoRA passkey tests (after Mohtashami & Jaggi, 2023), to an exact length.

The text is theirs, word for word: a task line, filler, the key line, more filler, the question, joined
by newlines. ropectl builds it in tokens rather than characters so every trial has exactly ``length``
tokens, answer included: the filler is one tokenized run of the repeated sentence, cut to the
number of tokens that is left, ``depth`` of it before the key line and the rest after it (both
cuts start at the run's beginning, as theirs do). The answer is `` {key}`` appended to the question.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ropectl.errors import UsageError
from ropectl.eval.tasks.passkey_text import FILLER, KEY_LINE, QUESTION, TASK

PROMPT_VERSION = "yarn-longlora-v1"  # part of a run's identity: another wording is another run


@dataclass(frozen=True)
class Trial:
    """One prompt: ``ids`` has exactly ``length`` tokens and ends with the ``answer_len`` answer tokens."""

    length: int
    depth: float
    index: int
    key: str
    ids: tuple[int, ...]
    answer_len: int
    key_at: int  # token index where the key line starts


class PromptBuilder:
    """Tokenizes the fixed pieces once per tokenizer; ``trial`` then only slices and concatenates."""

    def __init__(self, tokenizer: Any, longest: int) -> None:
        self.tok = tokenizer
        self.head = self._ids(TASK + "\n", special=True)
        self.tail = self._ids("\n" + QUESTION)
        unit = len(self._ids(FILLER + " "))
        self.filler = self._ids(" ".join([FILLER] * (longest // max(unit, 1) + 2)))

    def _ids(self, text: str, special: bool = False) -> list[int]:
        return list(self.tok(text, add_special_tokens=special, verbose=False)["input_ids"])

    def fixed_tokens(self, key: str) -> int:
        """Tokens of everything but the filler, for this key."""
        return len(self.head) + len(self._key_ids(key)) + len(self.tail) + len(self._ids(" " + key))

    def _key_ids(self, key: str) -> list[int]:
        return self._ids("\n" + KEY_LINE.format(key=key) + "\n")

    def trial(self, length: int, depth: float, index: int, seed: int, digits: int) -> Trial:
        key = make_key(seed, length, depth, index, digits)
        key_ids, answer = self._key_ids(key), self._ids(" " + key)
        n_filler = length - self.fixed_tokens(key)
        if n_filler < 0:
            raise UsageError(f"length {length} is too short for a passkey prompt with a {digits}-digit key "
                             f"(the prompt without filler needs {self.fixed_tokens(key)} tokens)",
                             f"pass lengths of at least {self.fixed_tokens(key) + 16}, or fewer --key-digits")
        before = round(depth * n_filler)
        ids = self.head + self.filler[:before] + key_ids + self.filler[:n_filler - before] + self.tail + answer
        return Trial(length, depth, index, key, tuple(ids), len(answer), len(self.head) + before)


def make_key(seed: int, length: int, depth: float, index: int, digits: int) -> str:
    """A key of ``digits`` digits (no leading zero), the same for every method: outcomes are paired."""
    rng = random.Random(f"ropectl-passkey:{seed}:{length}:{depth!r}:{index}")
    return str(rng.randint(10 ** (digits - 1), 10**digits - 1))
