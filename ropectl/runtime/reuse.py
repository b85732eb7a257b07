"""Loads one process may share between sweeps: ``recommend`` runs a PPL screen, the PPL sweep and the task sweep
on one model, and each would otherwise read the config, the tokenizer and the weights again (about 25 s for the
embedded GGUF on 2 CPU cores, most of it dequantizing the weights).

Sharing is opt-in, inside ``with reusing():`` only: outside it every sweep loads afresh, so a checkpoint changed
on disk between two commands is always read again. Inside, a sweep switches the shared model to each of its own
methods before scoring (the engine rebuilds the rotary module whenever the active method differs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
_shared: dict[Hashable, Any] | None = None


@contextlib.contextmanager
def reusing() -> Iterator[None]:
    """Share loads between the sweeps run inside; everything shared is dropped on exit."""
    global _shared
    outer, _shared = _shared, ({} if _shared is None else _shared)
    try:
        yield
    finally:
        if outer is None:
            _shared = None


def shared(key: Hashable, build: Callable[[], T]) -> T:
    """``build()``, or inside ``reusing()`` the value an earlier call with the same key built."""
    if _shared is None:
        return build()
    if key not in _shared:
        _shared[key] = build()
    return _shared[key]


def freeze(kwargs: Any) -> Hashable:
    """A hashable key for from_pretrained keyword arguments (str, numbers, None, nested dicts)."""
    if isinstance(kwargs, dict):
        return tuple(sorted((k, freeze(v)) for k, v in kwargs.items()))
    if isinstance(kwargs, (list, tuple)):
        return tuple(freeze(v) for v in kwargs)
    return kwargs if isinstance(kwargs, Hashable) else repr(kwargs)
