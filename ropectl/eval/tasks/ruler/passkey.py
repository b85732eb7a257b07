"""Passkey retrieval as one task of ``eval-tasks``: the YaRN / LongLoRA prompt of ``eval-passkey`` (its wording
lives in ``ropectl.eval.tasks.passkey.prompt``), the key at a depth drawn from RULER's 40 depths."""

from __future__ import annotations

import random

from ropectl.eval.tasks.passkey_text import FILLER, KEY_LINE, QUESTION, TASK
from ropectl.eval.tasks.ruler import Generator, register_generator
from ropectl.eval.tasks.ruler.build import Layout, Tokens
from ropectl.eval.tasks.ruler.haystack import Haystack
from ropectl.eval.tasks.ruler.niah import DEPTHS


def _filler():
    while True:
        yield " " + FILLER


def make(rng: random.Random, hay: Haystack, length: int, tok: Tokens) -> Layout:
    key = str(rng.randint(10**4, 10**5 - 1))
    return Layout(TASK + "\n", _filler(), "\n" + QUESTION, (key,), ("\n" + KEY_LINE.format(key=key) + "\n",),
                  (rng.choice(DEPTHS),))


register_generator(Generator("passkey", make, 10, "YaRN / LongLoRA passkey (Mohtashami & Jaggi 2023)"))
