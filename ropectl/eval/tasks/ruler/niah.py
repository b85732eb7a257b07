"""Needle in a haystack, RULER's eight variants (lm-evaluation-harness ``lm_eval/tasks/ruler/niah_utils.py`` and
``prepare_niah.py``): needles "One of the special magic {numbers} for {key} is: {value}." in a haystack of
repeated noise (``repeat``), the corpus (``essay``) or distractor needles (``needle``); the prompt template, the
singular rewording for one answer and the answer prefix (``gen_prefix``) are RULER's, word for word.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from ropectl.eval.tasks.ruler import Generator, register_generator
from ropectl.eval.tasks.ruler.build import Layout, Tokens
from ropectl.eval.tasks.ruler.haystack import Haystack

NEEDLE = "One of the special magic {type_v} for {key} is: {value}."
TEMPLATE = ("Some special magic {type_v} are hidden within the following text. Make sure to memorize it. I will quiz "
            "you about the {type_v} afterwards.\n{context}\nWhat are all the special magic {type_v} for {query} "
            "mentioned in the provided text?")
DEPTHS = tuple(round(100 * i / 39) / 100 for i in range(40))  # RULER: 40 depths, 0 to 100 %
SOURCE = "RULER niah (lm-eval lm_eval/tasks/ruler/niah_utils.py)"


@dataclass(frozen=True)
class Niah:
    haystack: str  # repeat | essay | needle
    type_k: str  # words | numbers | uuids
    type_v: str
    num_k: int = 1
    num_v: int = 1
    num_q: int = 1


VARIANTS = {
    "niah_single_1": Niah("repeat", "words", "numbers"),
    "niah_single_2": Niah("essay", "words", "numbers"),
    "niah_single_3": Niah("essay", "words", "uuids"),
    "niah_multikey_1": Niah("essay", "words", "numbers", num_k=4),
    "niah_multikey_2": Niah("needle", "words", "numbers"),
    "niah_multikey_3": Niah("needle", "uuids", "uuids"),
    "niah_multivalue": Niah("essay", "words", "numbers", num_v=4),
    "niah_multiquery": Niah("essay", "words", "numbers", num_q=4),
}


def draw(rng: random.Random, kind: str, words: tuple[str, ...]) -> str:
    if kind == "numbers":
        return str(rng.randint(10**6, 10**7 - 1))
    if kind == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return f"{rng.choice(words)}-{rng.choice(words)}"  # RULER: adjective-noun


def make(v: Niah, rng: random.Random, hay: Haystack, length: int, tok: Tokens) -> Layout:
    num_k = max(v.num_k, v.num_q)
    keys, values, needles = [], [], []
    for _ in range(num_k):
        keys.append(draw(rng, v.type_k, hay.words))
        values.append([draw(rng, v.type_v, hay.words) for _ in range(v.num_v)])
        needles += [NEEDLE.format(type_v=v.type_v, key=keys[-1], value=x) for x in values[-1]]
    rng.shuffle(needles)
    depths = sorted(d for d in rng.sample(DEPTHS, len(needles)))
    queried = rng.sample(range(num_k), v.num_q)
    queries = [keys[i] for i in queried]
    answers = tuple(a for i in queried for a in values[i])
    query = ", ".join(queries[:-1]) + ", and " + queries[-1] if len(queries) > 1 else queries[0]
    template, type_v = TEMPLATE, v.type_v
    if v.num_q * v.num_v == 1:  # RULER's singular wording, replacement for replacement
        for old, new in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
            template = template.replace(old, new)
        type_v = type_v[:-1]
    head, tail = template.format(type_v=type_v, context="\0", query=query).split("\0")
    prefix = (f"The special magic {v.type_v[:-1]} for {query} mentioned in the provided text is"
              if v.num_q * v.num_v == 1 else
              f"The special magic {v.type_v} for {query} mentioned in the provided text are")
    sep = " " if v.haystack == "essay" else "\n"
    return Layout(head, _filler(v, rng, hay, set(keys)), f"{tail} {prefix}", answers,
                  tuple(sep + n for n in needles), tuple(depths))


def _filler(v: Niah, rng: random.Random, hay: Haystack, keys: set[str]) -> Iterator[str]:
    if v.haystack == "essay":
        return hay.essay()
    if v.haystack == "repeat":
        return hay.repeat("\n")
    return _distractors(v, random.Random(rng.random()), hay, keys)


def _distractors(v: Niah, rng: random.Random, hay: Haystack, keys: set[str]) -> Iterator[str]:
    """RULER's haystack of needles: other keys, other values (a drawn key equal to a real one is skipped, so the
    question keeps one answer)."""
    while True:
        key = draw(rng, v.type_k, hay.words)
        if key not in keys:
            yield "\n" + NEEDLE.format(type_v=v.type_v, key=key, value=draw(rng, v.type_v, hay.words))


for _name, _variant in VARIANTS.items():
    _family = _name.rsplit("_", 1)[0] if _name[-1].isdigit() else _name
    register_generator(Generator(_name, partial(make, _variant), 128, SOURCE), groups=("ruler", "niah", _family))
