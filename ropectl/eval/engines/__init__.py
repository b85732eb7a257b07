"""Engines: the model that scores a batch. A sweep asks its engine to load the tokenizer and the weights once,
to switch the RoPE method (checked against ropectl's own frequencies), and hands the loaded model to the task's
scoring code. ``transformers`` (alias ``hf``) and ``vllm`` are built in; another registers itself here.

An engine whose ``model`` is not a transformers module (vLLM) offers ``token_logprobs(prompts)`` (per prompt,
the log-prob of each token after the first), ``teacher_forced(prompts, answer_starts)`` (per prompt, the argmax
token at each answer position and the answer's NLL) and ``answer_logprobs(prompts, spans)`` (per answer
position, the argmax token and the actual token's log-prob); tasks call them instead of running the model.
Optional:
``check(sweep)``, called before the tokenizer and weights load; ``check_launch(world_size)`` on the class, called
before a torchrun process group starts; ``record()``, what the results files keep; ``close()``, at the end."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ropectl.errors import UsageError

if TYPE_CHECKING:
    from ropectl.eval.model import MethodState, ModelSource

DEFAULT_ENGINE = "transformers"
ALIASES = {"hf": "transformers"}
BUILT_IN = {"transformers": "ropectl.eval.engines.transformers", "vllm": "ropectl.eval.engines.vllm"}


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


def engine_name(name: str) -> str:
    """The registry name of ``name`` (``hf`` is transformers)."""
    return ALIASES.get(name, name)


def get_engine(name: str = DEFAULT_ENGINE) -> EngineFactory:
    name = engine_name(name)
    if name in BUILT_IN and name not in ENGINES:
        import importlib

        importlib.import_module(BUILT_IN[name])  # registers itself; never imports the engine's own package
    if name not in ENGINES:
        known = sorted({*ENGINES, *BUILT_IN})
        raise UsageError(f"unknown engine '{name}'", f"use one of: {', '.join(known)} (hf = transformers)")
    return ENGINES[name]


def check_engine_options(engine: str, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                         distributed_executor_backend: str | None = None) -> None:
    """A spec's engine settings, checked when the spec is built (eval-ppl, eval-passkey, recommend alike)."""
    if engine_name(engine) not in BUILT_IN:
        raise UsageError(f"unknown engine '{engine}'", f"use one of: {', '.join(BUILT_IN)} (hf = transformers)")
    parallel = (tensor_parallel_size, pipeline_parallel_size) != (1, 1) or distributed_executor_backend
    if parallel and engine_name(engine) != "vllm":
        raise UsageError("--tensor-parallel-size, --pipeline-parallel-size and --distributed-executor-backend are "
                         "vLLM options", "add --engine vllm, or drop them")


def engine_record(engine: Engine) -> dict[str, Any]:
    """What the results keep about the engine: its name and versions, and whatever more it records."""
    record = getattr(engine, "record", None)
    return record() if callable(record) else {"name": engine.name, "versions": engine.versions()}
