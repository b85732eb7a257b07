"""The transformers engine (``--engine transformers``, alias ``hf``): weights loaded once with from_pretrained
(``ropectl.runtime.load``), a method switch rebuilds only the rotary embedding module(s) and checks their
frequencies (``rotary``), and the three scoring calls run on the torch module: the decoder body once per batch of
equal-length requests, the lm_head in chunks for per-token NLL (``loss``: no [length, vocab] logits) or only at the
answer positions (``forward.teacher_forced``), greedy decoding with the KV cache (``greedy``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ropectl.errors import CheckpointError, pickle_refused
from ropectl.eval.engines import Engine, register_engine
from ropectl.eval.engines.hf.loss import DEFAULT_CHUNK
from ropectl.eval.engines.requests import (
    AnswerLogprobs,
    AnswerScore,
    Continuation,
    GreedyContinuation,
    SequenceNLL,
    SequenceScore,
    sequence_score,
)
from ropectl.runtime.load import LoadedModel, load_model
from ropectl.runtime.model import MethodState, ModelSource, load_tokenizer


@register_engine("transformers")
class TransformersEngine(Engine):
    cheap_method_switch = True  # only the rotary modules are rebuilt
    data_parallel = True

    def __init__(self, source: ModelSource, device: str, dtype: str, device_map: str | None = None,
                 command: str = "eval-ppl") -> None:
        super().__init__(source, device, dtype, device_map, command)
        self.loaded: LoadedModel | None = None
        self.chunk_size = DEFAULT_CHUNK

    @classmethod
    def from_loaded(cls, source: ModelSource, model: Any, tokenizer: Any, device: str, dtype: str,
                    command: str = "finetune") -> TransformersEngine:
        """An engine around a model already in memory (finetune's evaluation during training): the same scoring
        calls on the same weights, nothing loaded again. Its RoPE is the model's own; no method is activated."""
        engine = cls(source, device, dtype, command=command)
        engine.tokenizer = tokenizer
        engine.loaded = LoadedModel(model, tokenizer, device, dtype)
        return engine

    @property
    def model(self) -> Any:
        """The loaded torch module (None until load)."""
        return None if self.loaded is None else self.loaded.model

    @property
    def active(self) -> str | None:
        return None if self.loaded is None else self.loaded.active

    def check(self, sweep: Any) -> None:
        self.chunk_size = int(getattr(sweep.spec, "chunk_size", None) or DEFAULT_CHUNK)  # eval-ppl's --chunk-size

    def load_tokenizer(self) -> Any:
        path, kwargs = self.source.path, self.source.kwargs
        try:
            self.tokenizer = load_tokenizer(path, kwargs)
        except (OSError, ValueError, TypeError, KeyError) as exc:  # transformers' "no tokenizer here" varies
            raise CheckpointError(f"cannot load a tokenizer from '{path}' ({type(exc).__name__})",
                                  f"{self.command} needs the model's tokenizer files (tokenizer.json or "
                                  "tokenizer.model) beside config.json; copy them from the base model") from None
        return self.tokenizer

    def load(self) -> None:
        import pickle
        import warnings

        path, kwargs = self.source.path, self.source.kwargs
        try:
            with warnings.catch_warnings():  # torch's note on a raw pickle's protocol would precede the refusal
                warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
                self.loaded = load_model(path, kwargs, self.tokenizer, self.device, self.dtype, self.device_map)
        except pickle.UnpicklingError as exc:
            raise pickle_refused(weights_subject(path), exc) from None

    def activate(self, state: MethodState) -> None:
        from ropectl.eval.engines.hf.rotary import activate

        assert self.loaded is not None
        self.state = state
        if self.loaded.active != state.label or state.length_dependent:
            activate(self.loaded, state)  # fresh module: dynamic's growth-only cache must not leak across lengths

    def verify_after_forward(self, state: MethodState, length: int) -> None:
        from ropectl.eval.engines.hf.rotary import verify_after_forward

        assert self.loaded is not None
        verify_after_forward(self.loaded, state, length)

    def input_device(self) -> Any:
        assert self.loaded is not None
        return self.loaded.input_device()

    def identity(self) -> dict[str, Any]:
        """transformers' runs came first and keep their ids: no engine in the identity (a subclass has its own)."""
        return {} if self.name == TransformersEngine.name else super().identity()

    # scoring ----------------------------------------------------------------------------------------------------

    def sequence_nll(self, requests: Sequence[SequenceNLL]) -> list[SequenceScore]:
        """Requests of one length share a forward (the caller sizes the call)."""
        from ropectl.eval.engines.hf.loss import batch_nll

        out: dict[int, SequenceScore] = {}
        for group in _by_length(requests, lambda r: len(r.tokens)):
            nlls = batch_nll(self.model, [requests[i].tokens for i in group],
                             [requests[i].score_from for i in group], self.input_device(), self.chunk_size)
            out.update({i: sequence_score(requests[i], nll) for i, nll in zip(group, nlls, strict=True)})
        return [out[i] for i in range(len(requests))]

    def answer_logprobs(self, requests: Sequence[AnswerLogprobs]) -> list[AnswerScore]:
        """Requests of one total length share a forward; the head runs only at the answer positions."""
        from ropectl.eval.engines.hf.forward import teacher_forced

        out: dict[int, AnswerScore] = {}
        for group in _by_length(requests, lambda r: len(r.prompt) + len(r.answer)):
            got = teacher_forced(self.model, [requests[i].tokens for i in group],
                                 [len(requests[i].answer) for i in group], self.input_device())
            out.update(zip(group, got, strict=True))
        return [out[i] for i in range(len(requests))]

    def greedy(self, requests: Sequence[GreedyContinuation]) -> list[Continuation]:
        """One KV-cached decode per request; the RoPE each prompt's forward used is checked at its length."""
        from ropectl.eval.engines.hf.forward import end_tokens
        from ropectl.eval.engines.hf.greedy import continuation

        state = self.state
        assert state is not None, "activate a method before scoring"
        eos = end_tokens(self.model, self.tokenizer)
        out = []
        for r in requests:
            tokens, nll = continuation(self.model, tuple(r.prompt), r.budget, self.input_device(), eos, r.stop,
                                       tuple(r.answer), lambda n: self.verify_after_forward(state, n))
            out.append(Continuation(tokens, nll))
        return out


def _by_length(requests: Sequence[Any], length: Any) -> list[list[int]]:
    """Indices of ``requests`` grouped by ``length(request)``, in first-seen order."""
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault(length(r), []).append(i)
    return list(groups.values())


def weights_subject(path: str) -> str:
    """The pickle's own name where the folder has one .bin file (transformers does not say which it loaded)."""
    folder = Path(path)
    bins = sorted(folder.glob("*.bin")) if folder.is_dir() else []
    return f"'{bins[0].name}' in '{path}'" if len(bins) == 1 else f"the weights in '{path}'"
