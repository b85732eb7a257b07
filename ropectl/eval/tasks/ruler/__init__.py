"""RULER-style long-context tasks (Hsieh et al. 2024, NVIDIA/RULER; as lm-evaluation-harness's ``ruler`` group
implements them), generated offline from the eval corpus and scored in one forward per trial.

One module per task family registers its generators here: ``niah`` (single, multikey, multivalue, multiquery),
``vt``, ``cwe``, ``fwe`` and ``passkey``. A generator turns (rng, haystack) into a ``Layout``; ``build`` makes it
token-exact; the ``tasks`` sweep task (``runner``) scores it; ``eval-tasks`` is its command.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from ropectl.errors import UsageError
from ropectl.eval.tasks.ruler.build import Layout, Tokens
from ropectl.eval.tasks.ruler.haystack import Haystack

BUILTIN = ("niah", "vt", "cwe", "fwe", "passkey")  # generator modules, imported on first use


@dataclass(frozen=True)
class Generator:
    """A task: ``make(rng, haystack, length, tokens)`` gives one sample's layout. ``budget`` is RULER's generation budget
    (tokens to generate) for the greedy check; ``source`` cites the definition followed."""

    name: str
    make: Callable[[random.Random, Haystack, int, Tokens], Layout]
    budget: int
    source: str


GENERATORS: dict[str, Generator] = {}
GROUPS: dict[str, tuple[str, ...]] = {}


def register_generator(gen: Generator, groups: tuple[str, ...] = ()) -> Generator:
    GENERATORS[gen.name] = gen
    for group in groups:
        GROUPS[group] = (*GROUPS.get(group, ()), gen.name)
    return gen


def _load() -> None:
    if not GENERATORS:
        for module in BUILTIN:
            importlib.import_module(f"ropectl.eval.tasks.ruler.{module}")


def generator_names() -> list[str]:
    _load()
    return list(GENERATORS)


def resolve_tasks(values: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``niah_single,vt`` or a group (``ruler``, ``niah_single``, ...) -> task names, in order, each once."""
    _load()
    items = values.split(",") if isinstance(values, str) else [p for v in values for p in str(v).split(",")]
    out: list[str] = []
    for item in (i.strip() for i in items if i.strip()):
        names = GROUPS.get(item) or ((item,) if item in GENERATORS else None)
        if names is None:
            raise UsageError(f"unknown task '{item}'", f"use task names or groups: {', '.join(sorted(GROUPS))}, "
                             f"{', '.join(GENERATORS)}")
        out += [n for n in names if n not in out]
    if not out:
        raise UsageError("no task given", "pass --task, e.g. --task ruler or --task niah_single,vt")
    return tuple(out)


def trial_rng(task: str, seed: int, length: int, index: int) -> random.Random:
    """The same draw for every method: outcomes are paired across methods."""
    return random.Random(f"ropectl-ruler:{task}:{seed}:{length}:{index}")
