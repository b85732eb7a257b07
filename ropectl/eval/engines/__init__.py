"""Engines: the model that scores a batch. A sweep asks its engine to load the tokenizer and the weights once,
to switch the RoPE method (checked against ropectl's own frequencies), and hands the loaded model to the task's
scoring code. ``transformers`` is the engine today; another (vLLM, llama.cpp) registers itself here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ropectl.errors import UsageError

if TYPE_CHECKING:
    from ropectl.eval.model import MethodState, ModelSource

DEFAULT_ENGINE = "transformers"


@runtime_checkable
class Engine(Protocol):
    """What a sweep needs of the model that scores its batches."""

    name: str
    tokenizer: Any  # set by load_tokenizer
    model: Any  # the loaded model the task's scoring code runs; None until load
    active: str | None  # label of the method whose RoPE is in place

    def load_tokenizer(self) -> Any: ...

    def load(self) -> None:
        """Load the weights (once per sweep), after every cheap check has passed."""

    def activate(self, state: MethodState) -> None:
        """Put ``state``'s RoPE in place for the next forward (a no-op when it already is)."""

    def verify_after_forward(self, state: MethodState, length: int) -> None:
        """Raise if the RoPE the forward used at ``length`` is not the one planned."""

    def input_device(self) -> Any: ...

    def versions(self) -> dict[str, str]:
        """Library versions for the results' metadata."""


# name -> factory(source, device, dtype, device_map, command)
EngineFactory = Callable[["ModelSource", str, str, "str | None", str], Engine]
ENGINES: dict[str, EngineFactory] = {}


def register_engine(name: str) -> Callable[[EngineFactory], EngineFactory]:
    """Decorator: ``@register_engine("vllm")`` on a class (or factory) taking (source, device, dtype,
    device_map, command)."""

    def add(factory: EngineFactory) -> EngineFactory:
        ENGINES[name] = factory
        return factory

    return add


def get_engine(name: str = DEFAULT_ENGINE) -> EngineFactory:
    if name == DEFAULT_ENGINE and name not in ENGINES:
        import ropectl.eval.engines.transformers  # noqa: F401  registers itself
    if name not in ENGINES:
        raise UsageError(f"unknown engine '{name}'", f"use one of: {', '.join(sorted(ENGINES)) or DEFAULT_ENGINE}")
    return ENGINES[name]
