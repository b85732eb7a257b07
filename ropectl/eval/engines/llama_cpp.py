"""The llama.cpp engine (``--engine llama.cpp``): a GGUF file run by llama-cpp-python, each method with exactly the
RoPE that ``ropectl patch MODEL.gguf -m METHOD --emit llama.cpp`` prints (``llama_cpp_plan``).

A method switch is a new ``llama_context`` on the already-loaded ``llama_model``: llama.cpp keeps RoPE in the
context's parameters, so no weight is read again (``cheap_method_switch``; only a yarn attention factor, which
llama.cpp takes from the GGUF's metadata through ``--override-kv``, loads the mmapped model once more). The three
scoring calls run on ``llama_decode`` with logits read per batch of 512 tokens (``llama_cpp_run``): per-token NLL
through ropectl's chunked loss (``hf.loss.token_nll``), answer log-probs at the answer positions only, and greedy
decoding that reuses the teacher-forced pass of the reference answer as long as greedy follows it.

Every refusal comes before a weight loads: no llama-cpp-python (the pip line), a Hugging Face folder (the
conversion), torchrun, and a method llama.cpp has no form of (dynamic, per ``readers.llama_cpp``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import Any

from ropectl.errors import EngineError, UsageError, VerificationError
from ropectl.eval.engines import Engine, check_launch, register_engine
from ropectl.eval.engines import llama_cpp_plan as plan
from ropectl.eval.engines import llama_cpp_run as run
from ropectl.eval.engines.requests import (
    AnswerLogprobs,
    AnswerScore,
    Continuation,
    GreedyContinuation,
    SequenceNLL,
    SequenceScore,
    sequence_score,
)
from ropectl.runtime.model import MethodState, ModelSource, load_tokenizer

ROPE_RTOL = 1e-5  # llama.cpp prints its context's float32 freq_base / freq_scale


@register_engine("llama.cpp")
class LlamaCppEngine(Engine):
    cheap_method_switch = True  # a switch is a new llama_context on the loaded model: no weight is read again
    loads_gguf = True
    quantized_weights = True  # a GGUF's tensors may be Q4_1 and the like: verify measures the file's floor

    def __init__(self, source: ModelSource, device: str, dtype: str, device_map: str | None = None,
                 command: str = "eval-ppl") -> None:
        super().__init__(source, device, dtype, device_map, command)
        check_launch(self.name, int(os.environ.get("WORLD_SIZE", "1") or 1))
        if device_map:
            raise UsageError("--device-map is a transformers option; llama.cpp places the model itself",
                             "drop --device-map")
        plan.check_source(source)
        if importlib.util.find_spec("llama_cpp") is None:
            raise plan.missing_llama_cpp()
        self.lib: Any = None
        self.settings: dict[str, plan.Setting] = {}
        self.trained: int | None = None
        self.longest = 0  # the longest prompt the sweep scores: every context holds it
        self.threads = 1
        self.extra_buffers = True
        self._model: tuple[Any, Any] | None = None  # (model key, llama_model)
        self._context: tuple[Any, run.Context] | None = None  # (setting key, context)
        self._version = ""
        self.own: set[str] = set()  # labels run with the user's own flags: no planned RoPE to check them against

    @property
    def model(self) -> Any:
        return None if self._model is None else self._model[1]

    def check(self, sweep: Any) -> None:
        """Every method's printed line, read into parameters (and refused where llama.cpp has none)."""
        self.trained = sweep.trained
        self.longest = max(tuple(getattr(sweep.spec, "lengths", ()) or ()) or (0,))
        for state in sweep.states:
            setting = self.settings[state.label] = plan.setting_for(state, self.source, self.trained)
            sweep.warnings += [f"{state.label}: llama.cpp: {note}" for note in setting.notes]

    def serve(self, state: MethodState, args: str | None, target: int) -> str:
        """The printed line for ``state`` (the GGUF as it ships), or the user's own flags read as llama.cpp's
        argument parser reads them (``plan.own_setting``), with the context holding ``target``."""
        self.longest = max(self.longest, target)
        if args:
            setting = self.settings[state.label] = plan.own_setting(state.label, args, str(self.source.resolved.path))
            self.own.add(state.label)
        else:
            setting = self._setting(state)
            if setting.printed_ctx and setting.printed_ctx < target:  # the printed -c is the GGUF's own context
                return f"{setting.command} (run with -c {target}, the longest length scored)"
        return setting.command

    def load_tokenizer(self) -> Any:
        self.tokenizer = load_tokenizer(self.source.path, self.source.kwargs)  # the same ids as transformers
        return self.tokenizer

    def load(self) -> None:
        """Import llama-cpp-python and load the GGUF (mmapped) with no overrides."""
        import torch

        try:
            import llama_cpp
        except ImportError as exc:
            raise plan.missing_llama_cpp(f"{type(exc).__name__}: {exc}") from None
        except OSError as exc:  # its shared library does not load on this platform
            raise plan.missing_llama_cpp(f"its library does not load: {exc}") from None
        self.lib, self._version = llama_cpp, llama_cpp.__version__
        run.quiet_logs(llama_cpp)
        self.threads = max(1, torch.get_num_threads())  # what the transformers engine would use here
        self.extra_buffers = not run.has_amx()
        self._load_model(())

    def _load_model(self, key: Any) -> Any:
        if self._model is not None and self._model[0] == key:
            return self._model[1]
        self._close_context()
        if self._model is not None:
            self._model[1].close()
        path = str(self.source.resolved.path)
        try:
            model = run.load_model(self.lib, path, dict(key), self.extra_buffers)
        except (ValueError, OSError) as exc:
            raise EngineError(f"llama.cpp could not load '{path}' ({exc})",
                              "check that the file is a GGUF llama.cpp supports (llama-cli -m FILE says why)") from None
        self._model = (key, model)
        return model

    def activate(self, state: MethodState) -> None:
        self.state = state
        self._ensure(min(self.longest, self._own_ctx(state) or self.longest))

    def _own_ctx(self, state: MethodState) -> int:
        """The user's own -c (verify's --serve llama.cpp=...): the context exactly as they serve it; 0 otherwise."""
        return self.settings[state.label].printed_ctx if state.label in self.own else 0

    def _setting(self, state: MethodState) -> plan.Setting:
        if state.label not in self.settings:  # a method the sweep did not plan (timing's as-is forward)
            self.settings[state.label] = plan.setting_for(state, self.source, self.trained)
        return self.settings[state.label]

    def _ensure(self, length: int) -> run.Context:
        """The context of the active method that holds ``length`` tokens (new where the method changed or it is
        too short)."""
        assert self.state is not None and self.lib is not None, "load and activate a method before scoring"
        setting = self._setting(self.state)
        own = self._own_ctx(self.state)
        if own and length > own:
            raise UsageError(f"{length} tokens are past what this llama.cpp serving holds (-c {own})",
                             "raise -c in --serve llama.cpp=..., or pass a lower -t")
        key = (setting.model_key, tuple(sorted(setting.context.items())))
        if self._context is not None and self._context[0] == key and self._context[1].n_ctx >= length:
            return self._context[1]
        model = self._load_model(setting.model_key)
        self._close_context()
        n_ctx = own or max(setting.printed_ctx, self.longest, length)
        context = run.new_context(self.lib, model, setting.context, n_ctx, self.threads)
        self._context = (key, context)
        self.verify_after_forward(self.state, length)
        return context

    def verify_after_forward(self, state: MethodState, length: int) -> None:
        """The context llama.cpp built reports the planned RoPE (ropectl's own, not the flags) and holds ``length``."""
        if self._context is None:
            return
        context = self._context[1]
        if length > context.n_ctx:
            raise VerificationError(f"llama.cpp's context holds {context.n_ctx} tokens, not {length}",
                                    "report it: a ropectl bug")
        if state.label in self.own:  # the user's own flags are what is being measured, not checked against a plan
            return
        base, scale = plan.expected_rope(state)
        got = (context.report.get("freq_base"), context.report.get("freq_scale"))
        if None in got or abs(got[0] - base) > ROPE_RTOL * base or abs(got[1] - scale) > ROPE_RTOL * scale:
            raise VerificationError(f"llama.cpp's context runs freq_base {got[0]}, freq_scale {got[1]}, not the "
                                    f"planned {base:g} and {scale:g} for '{state.label}'",
                                    "report it: llama.cpp did not take the printed flags as ropectl reads them")

    def forward_shape(self) -> tuple[int, int, int]:
        """(vocabulary, weights used per token, layers x heads x head size) for recommend's time estimate
        (``timing.Shape``): llama.cpp's parameter count, the input embedding left out and a tied head counted once
        (as ``timing.model_shape`` counts a torch module)."""
        from ropectl.schema.read import text_config

        assert self.model is not None, "load the model first"
        cfg = text_config(self.source.config)
        vocab, embed = int(self.model.n_vocab()), int(self.model.n_vocab()) * int(self.model.n_embd())
        params = int(self.model.n_params()) - (0 if cfg.get("tie_word_embeddings") else embed)
        heads = int(cfg.get("num_attention_heads") or 0)
        head_dim = int(cfg.get("head_dim") or (int(cfg.get("hidden_size") or 0) // heads if heads else 0))
        return vocab, params, int(cfg.get("num_hidden_layers") or 0) * heads * head_dim

    def versions(self) -> dict[str, str]:
        import torch
        import transformers

        return {"llama-cpp-python": self._version, "torch": torch.__version__, "transformers": transformers.__version__}

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "versions": self.versions(), "threads": self.threads,
                "extra_buffers": self.extra_buffers, "batch": run.N_BATCH,
                "methods": {label: s.to_dict() for label, s in sorted(self.settings.items())}}

    def close(self) -> None:
        self._close_context()
        if self._model is not None:
            self._model[1].close()
            self._model = None

    def _close_context(self) -> None:
        if self._context is not None:
            self._context[1].close()
            self._context = None

    # scoring ----------------------------------------------------------------------------------------------------

    def sequence_nll(self, requests: Sequence[SequenceNLL]) -> list[SequenceScore]:
        return [sequence_score(r, self._nll(list(r.tokens), r.score_from)) for r in requests]

    def _nll(self, tokens: list[int], score_from: int) -> Any:
        """Per-token NLL of ``tokens[score_from + 1:]``: each batch's logits through the chunked loss, then gone."""
        import torch

        from ropectl.eval.engines.hf.loss import token_nll

        context = self._ensure(len(tokens))
        run.clear(self.lib, context)
        out = torch.empty(max(0, len(tokens) - 1 - score_from), dtype=torch.float32)
        targets = torch.as_tensor(tokens, dtype=torch.long)
        for first, logits in run.decode(context, tokens, 0, range(score_from, len(tokens) - 1)):
            n = logits.shape[0]
            out[first - score_from:first - score_from + n] = token_nll(logits, targets[first + 1:first + 1 + n],
                                                                       lambda x: x, run.N_BATCH)
        return out

    def answer_logprobs(self, requests: Sequence[AnswerLogprobs]) -> list[AnswerScore]:
        out = []
        for r in requests:
            argmax, logprobs = self._forced(list(r.prompt), list(r.answer), extra=0)
            out.append(AnswerScore(tuple(argmax), tuple(logprobs), -sum(logprobs)))
        return out

    def _forced(self, prompt: list[int], answer: list[int], extra: int) -> tuple[list[int], list[float]]:
        """Teacher forcing of ``answer`` after ``prompt`` (the cache then holds both): the argmax at each answer
        position (and ``extra`` more: the one after the answer), and each answer token's log-prob."""
        import torch

        if not prompt:
            raise UsageError("an answer needs a prompt of at least one token", "report it: a task built an empty prompt")
        tokens = prompt + answer
        context = self._ensure(len(tokens) + extra)
        run.clear(self.lib, context)
        argmax: list[int] = []
        logprobs: list[float] = []
        stop = len(tokens) - 1 + extra
        for first, logits in run.decode(context, tokens, 0, range(len(prompt) - 1, stop)):
            logp = torch.log_softmax(logits.float(), dim=-1)
            argmax += logp.argmax(dim=-1).tolist()
            rows = range(first, min(first + logp.shape[0], len(tokens) - 1))
            logprobs += [float(logp[i - first, tokens[i + 1]]) for i in rows]
        return argmax, logprobs

    def greedy(self, requests: Sequence[GreedyContinuation]) -> list[Continuation]:
        """Greedy decoding: one teacher-forced pass over prompt + answer gives the answer's NLL and greedy's tokens
        while they follow the answer; from where they leave it, the cache is cut there and decoding goes on."""
        assert self.state is not None, "activate a method before scoring"
        eos = {t for t in (getattr(self.tokenizer, "eos_token_id", None),
                           self.lib.llama_vocab_eos(self.model.vocab)) if t is not None and t >= 0}
        return [self._greedy_one(r, eos) for r in requests]

    def _greedy_one(self, r: GreedyContinuation, eos: set[int]) -> Continuation:
        prompt, answer = list(r.prompt), list(r.answer)
        self._ensure(len(prompt) + max(len(answer) + 1, r.budget))
        argmax, logprobs = self._forced(prompt, answer, extra=1)
        assert self.state is not None
        self.verify_after_forward(self.state, len(prompt))
        nll, tokens = -sum(logprobs), []
        if r.budget < 1:
            return Continuation((), nll)
        context, following, token = self._ensure(0), True, argmax[0]
        while True:
            tokens.append(token)
            if token in eos or (r.stop is not None and r.stop(tokens)) or len(tokens) >= r.budget:
                return Continuation(tuple(tokens), nll)
            k = len(tokens)
            if following and k <= len(answer) and token == answer[k - 1]:
                token = argmax[k]  # the forced pass predicted the token after answer[:k]
                continue
            if following:  # greedy left the answer: the cells from here on hold the answer's tokens
                following = False
                run.clear(self.lib, context, len(prompt) + k - 1)
            ((_, logits),) = run.decode(context, [token], len(prompt) + k - 1, range(1))
            token = int(logits[0].argmax())
