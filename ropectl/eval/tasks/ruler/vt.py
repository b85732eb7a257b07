"""Variable tracking (RULER ``vt``; lm-evaluation-harness ``lm_eval/tasks/ruler/vt_utils.py``): one chain of
``VAR X = 12345``, ``VAR Y = VAR X``, ... (4 hops, 5-letter names) hidden in repeated noise; the question asks for
every variable that holds the value. Template and answer prefix are RULER's (its typo "assgined" included).
RULER also puts a short solved example before the prompt; ropectl leaves it out (a base model is scored by
teacher forcing on the answer, so it needs no demonstration of the output format).
"""

from __future__ import annotations

import random
import string

from ropectl.eval.tasks.ruler import Generator, register_generator
from ropectl.eval.tasks.ruler.build import Layout, Tokens, space_pieces
from ropectl.eval.tasks.ruler.haystack import Haystack

TEMPLATE = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
            "Question: Find all variables that are assigned the value {query} in the text above.")
ANSWER_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
                 "assgined the value {query}, they are:")
HOPS, CHAINS = 4, 1


def make(rng: random.Random, hay: Haystack, length: int, tok: Tokens) -> Layout:
    names: list[str] = []
    while len(names) < (HOPS + 1) * CHAINS:
        name = "".join(rng.choices(string.ascii_uppercase, k=5))
        if name not in names:
            names.append(name)
    value = str(rng.randint(10000, 99998))  # numpy's randint(10000, 99999) excludes the top
    chain = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]}" for j in range(HOPS)]
    depths = sorted(rng.random() for _ in chain)  # RULER: sorted random positions among the noise sentences
    head, tail = TEMPLATE.format(context="\0", query=value).split("\0")
    prefix = ANSWER_PREFIX.format(num_v=HOPS + 1, query=value)
    return Layout(head, hay.repeat(" "), tail + prefix, tuple(names), tuple(" " + c for c in chain), tuple(depths),
                  pieces=space_pieces)


register_generator(Generator("vt", make, 30, "RULER vt (lm-eval lm_eval/tasks/ruler/vt_utils.py)"), groups=("ruler",))
