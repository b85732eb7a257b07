"""Evaluation engines: what loads a model, switches its RoPE method and answers the three scoring calls of
``requests`` (``sequence_nll``, ``answer_logprobs``, ``greedy``). A sweep asks its engine to load the tokenizer and
the weights once, to put each method's RoPE in place (checked against ropectl's own frequencies), and tasks score
through the three calls only: no task, trial or recommend code asks which engine runs.

What a caller needs to know about an engine is a capability on its class, never its name:
``cheap_method_switch`` (a method switch costs no reload: recommend may screen, ppl need not order its batches by
method), ``data_parallel`` (it runs under torchrun, one copy per rank), ``tensor_parallel`` (it takes
--tensor-parallel-size and the other parallel options), ``loads_gguf`` (it runs a GGUF file: verify hands it
--gguf), ``quantized_weights`` (its weights may be quantized: verify measures its floor before judging it).

``serve(state, args, target)`` fixes how the engine runs ``state`` for verify: exactly what ``patch --emit`` prints
for the checkpoint as it ships, or the user's own serving flags (``--serve ENGINE=ARGS``) applied verbatim.

The registry follows ropectl's one scheme (methods, tasks, engines alike): ``BUILTIN`` (name -> module, imported
on first use), the live table ``ENGINES`` filled by ``@register_engine``, ``get_engine``, ``engine_names``, and
plugins through the ``ropectl.eval_engines`` entry-point group or ``ROPECTL_EVAL_ENGINES`` (comma-separated modules
that register themselves). ``transformers`` (alias ``hf``, ``engines.hf``), ``vllm`` and ``llama.cpp`` are built in.
docs/contributing/add-an-engine.md walks through adding one.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ropectl.errors import UsageError
from ropectl.eval.engines.requests import (
    AnswerLogprobs,
    AnswerScore,
    Continuation,
    GreedyContinuation,
    SequenceNLL,
    SequenceScore,
)

if TYPE_CHECKING:
    from ropectl.runtime.model import MethodState, ModelSource

DEFAULT_ENGINE = "transformers"
ALIASES = {"hf": "transformers"}
BUILTIN = {"transformers": "ropectl.eval.engines.hf", "vllm": "ropectl.eval.engines.vllm",
           "llama.cpp": "ropectl.eval.engines.llama_cpp"}
ENTRY_POINT_GROUP = "ropectl.eval_engines"
ENV_MODULES = "ROPECTL_EVAL_ENGINES"


class Engine:
    """What a sweep and its task need of the model that scores their requests. Subclass it; the three scoring
    calls and the loading hooks are required, the rest has defaults."""

    name: str = ""
    cheap_method_switch = False  # switching methods reloads nothing (recommend screens; ppl keeps document order)
    data_parallel = False  # runs under torchrun / accelerate launch, one copy of the model per rank
    tensor_parallel = False  # takes --tensor-parallel-size, --pipeline-parallel-size, --distributed-executor-backend
    loads_gguf = False  # it runs a GGUF file (verify hands it --gguf, or the model where that is one)
    quantized_weights = False  # its weights may be quantized: verify measures its floor inside the trained window
    tokenizer: Any = None  # set by load_tokenizer

    def __init__(self, source: ModelSource, device: str, dtype: str, device_map: str | None = None,
                 command: str = "eval-ppl") -> None:
        self.source, self.device, self.dtype, self.device_map, self.command = source, device, dtype, device_map, command
        self.state: MethodState | None = None  # the method whose RoPE is in place

    # loading and switching --------------------------------------------------------------------------------------

    @classmethod
    def from_loaded(cls, source: ModelSource, model: Any, tokenizer: Any, device: str, dtype: str,
                    command: str = "finetune") -> Engine:
        """An engine around a torch model already in memory (finetune's evaluation during training), so that a
        command that holds a model scores it through the protocol, never through an engine's internals. An engine
        that runs its own workers (vLLM) cannot."""
        raise UsageError(f"the {cls.name} engine cannot score a model already in memory",
                         "use the transformers engine")

    def check(self, sweep: Any) -> None:
        """Every refusal that needs the sweep, before the tokenizer and the weights load."""

    def load_tokenizer(self) -> Any:
        raise NotImplementedError

    def load(self) -> None:
        """Load the weights (once per sweep), after every cheap check has passed."""
        raise NotImplementedError

    def activate(self, state: MethodState) -> None:
        """Put ``state``'s RoPE in place for the next call (a no-op when it already is)."""
        raise NotImplementedError

    def verify_after_forward(self, state: MethodState, length: int) -> None:
        """Raise if the RoPE the last forward used at ``length`` is not the one planned."""

    def serve(self, state: MethodState, args: str | None, target: int) -> str:
        """Run ``state`` as a user serves it, at every length up to ``target``: with ``args`` (the user's own
        serving flags, verbatim) or, without, what ``patch --emit`` prints for it. Returns the serving line. Call it
        after ``check``; an engine with no serving flags of its own refuses ``args``."""
        if args:
            raise UsageError(f"the {self.name} engine takes no --serve settings", f"drop --serve {self.name}=...")
        return f"{self.name}: {self.source.label} as configured"

    @property
    def active(self) -> str | None:
        return None if self.state is None else self.state.label

    # scoring ----------------------------------------------------------------------------------------------------

    def sequence_nll(self, requests: Sequence[SequenceNLL]) -> list[SequenceScore]:
        raise NotImplementedError

    def answer_logprobs(self, requests: Sequence[AnswerLogprobs]) -> list[AnswerScore]:
        raise NotImplementedError

    def greedy(self, requests: Sequence[GreedyContinuation]) -> list[Continuation]:
        """Greedy continuations; an engine verifies the RoPE each prompt's forward used itself."""
        raise NotImplementedError

    # what the results keep ---------------------------------------------------------------------------------------

    def versions(self) -> dict[str, str]:
        import torch
        import transformers

        return {"torch": torch.__version__, "transformers": transformers.__version__}

    def identity(self) -> dict[str, Any]:
        """What joins a run's identity: another engine's rows are other outcomes, so its name."""
        return {"engine": self.name}

    def record(self) -> dict[str, Any]:
        """What the results files keep about the engine."""
        return {"name": self.name, "versions": self.versions()}

    def close(self) -> None:
        """Free what the engine holds (workers, caches) at the end of the sweep."""


EngineFactory = type[Engine]
ENGINES: dict[str, EngineFactory] = {}


def register_engine(name: str) -> Callable[[EngineFactory], EngineFactory]:
    """Decorator: ``@register_engine("NAME")`` on an ``Engine`` subclass; sets its ``name``."""

    def add(factory: EngineFactory) -> EngineFactory:
        factory.name = name
        ENGINES[name] = factory
        return factory

    return add


def load_plugins() -> None:
    """Import the engine modules named in ``ROPECTL_EVAL_ENGINES`` (each registers itself)."""
    for module_name in filter(None, (m.strip() for m in os.environ.get(ENV_MODULES, "").split(","))):
        importlib.import_module(module_name)


def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {entry.name: entry for entry in entry_points(group=ENTRY_POINT_GROUP)}


def engine_name(name: str) -> str:
    """The registry name of ``name`` (``hf`` is transformers)."""
    return ALIASES.get(name, name)


def engine_names() -> list[str]:
    """Every engine ``--engine`` takes: built in, registered, and plugins."""
    load_plugins()
    return [*BUILTIN, *sorted(({*ENGINES, *_entry_points()}) - set(BUILTIN))]


def get_engine(name: str = DEFAULT_ENGINE) -> EngineFactory:
    name = engine_name(name)
    if name not in ENGINES:
        load_plugins()
    if name not in ENGINES and name in BUILTIN:
        importlib.import_module(BUILTIN[name])  # registers itself; never imports the engine's own package
    if name not in ENGINES and name in (points := _entry_points()):
        importlib.import_module(points[name].value)
    if name not in ENGINES:
        raise UsageError(f"unknown engine '{name}'", f"use one of: {', '.join(engine_names())} (hf = transformers)")
    return ENGINES[name]


def check_engine_options(engine: str, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                         distributed_executor_backend: str | None = None) -> None:
    """A spec's engine settings, checked when the spec is built (eval-ppl, eval-passkey, recommend alike)."""
    factory = get_engine(engine)
    parallel = (tensor_parallel_size, pipeline_parallel_size) != (1, 1) or distributed_executor_backend
    if parallel and not factory.tensor_parallel:
        takers = [n for n in engine_names() if get_engine(n).tensor_parallel]
        raise UsageError("--tensor-parallel-size, --pipeline-parallel-size and --distributed-executor-backend are "
                         f"options of the {' and '.join(takers) or 'no'} engine, not {factory.name}",
                         f"add --engine {takers[0] if takers else 'NAME'}, or drop them")


def check_launch(name: str, world_size: int) -> None:
    """Before a torchrun process group starts: an engine that spreads a model over its own workers refuses it."""
    factory = get_engine(name)
    if world_size > 1 and not factory.data_parallel:
        spread = (" and spread the model with --tensor-parallel-size / --pipeline-parallel-size (multi-node: "
                  "--distributed-executor-backend ray)") if factory.tensor_parallel else ""
        raise UsageError(f"--engine {factory.name} runs under torchrun / accelerate launch (WORLD_SIZE={world_size}), "
                         f"which would start one {factory.name} engine per process", f"run it as one plain process{spread}")


def engine_record(engine: Engine) -> dict[str, Any]:
    """What the results keep about the engine: its name and versions, and whatever more it records."""
    return engine.record()
