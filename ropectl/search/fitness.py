"""A candidate's fitness, measured through the evaluation engine protocol on one load of the model.

The transformers engine loads the weights once; each candidate is a ``MethodState`` (the config ``patch`` would
write, ``ropectl.runtime.model.method_states``), put in place by ``activate`` (only the rotary modules are rebuilt and
checked against ropectl's frequencies), then scored with ``SequenceNLL`` (perplexity) and ``AnswerLogprobs`` (the
needle's answer tokens, teacher forced: LongRoPE2's fitness, arXiv 2502.20082).

Fitness, lower is better: the token-weighted mean NLL per token at the target (log PPL) on the search documents,
plus, by default, the mean NLL per answer token of RULER niah trials at the target. PPL alone ranks ntk above yarn
on SmolLM2 at 30k while ntk retrieves nothing (docs/reference/search.md), so the answer loss is on unless
``--no-answer-loss``. Lengths are measured shortest first, all above the trained context (in-window lengths rank
methods the other way, so nothing is pruned on them); the first forward also gives the in-window PPL as a prefix
(a causal forward of n tokens holds every shorter prefix's NLL), which is the constraint.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ropectl.errors import DataError
from ropectl.rope.methods import MethodSpec

NEEDLE_TASK = "niah_single_1"


@dataclass(frozen=True)
class Plan:
    trained: int
    target: int
    lengths: tuple[int, ...]  # measured in this order, all above trained, the last the target
    answer_loss: bool = True
    limit: float | None = None  # the largest in-window log PPL a feasible candidate may have


@dataclass(frozen=True)
class Measured:
    """One candidate on one document set. NLL sums and token counts per document, by length."""

    spec: str
    feasible: bool
    nll: dict[int, list[float]] = field(default_factory=dict)
    tokens: dict[int, list[int]] = field(default_factory=dict)
    answer: float | None = None  # mean NLL per answer token over the needle trials
    accuracy: float | None = None  # fraction of needle trials whose every answer token is the argmax

    def log_ppl(self, length: int) -> float | None:
        if length not in self.nll:
            return None
        return math.fsum(self.nll[length]) / sum(self.tokens[length])

    def fitness(self, target: int, answer_loss: bool = True) -> float | None:
        value = self.log_ppl(target)
        if value is None or not self.feasible:
            return None
        return value + ((self.answer or 0.0) if answer_loss else 0.0)

    def to_dict(self, trained: int, target: int) -> dict[str, Any]:
        return {"spec": self.spec, "feasible": self.feasible, "log_ppl_inside": self.log_ppl(trained),
                "log_ppl_target": self.log_ppl(target), "answer_nll": self.answer, "niah_accuracy": self.accuracy,
                "nll": {str(k): v for k, v in self.nll.items()}, "tokens": {str(k): v for k, v in self.tokens.items()}}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Measured:
        return Measured(data["spec"], bool(data["feasible"]), {int(k): list(v) for k, v in data["nll"].items()},
                        {int(k): list(v) for k, v in data["tokens"].items()}, data.get("answer_nll"),
                        data.get("niah_accuracy"))


@dataclass
class EngineSweep:
    """What an engine's ``check`` reads of a sweep (vLLM plans one serving per method and length from it)."""

    spec: Any  # has ``lengths``
    states: list[Any]
    trained: int | None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Lengths:
    lengths: tuple[int, ...]


class Evaluator:
    """One model, loaded once; documents and needle trials; a candidate's measurements on them. Trials run on the
    transformers engine (a method switch rebuilds only the rotary modules); another engine checks the winner."""

    def __init__(self, model: str | None, device: str, dtype: str, engine: str = "transformers") -> None:
        from ropectl.eval.engines import get_engine
        from ropectl.runtime.model import model_source, resolve_device, resolve_dtype_choice

        self.source = model_source(model)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype_choice(dtype, self.device)[0]
        self.engine = get_engine(engine)(self.source, self.device, self.dtype, None, "search")
        self._states: dict[str, Any] = {}
        self.forwards = 0

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def load_tokenizer(self) -> None:
        self.engine.load_tokenizer()

    def load(self) -> None:
        self.engine.load()

    def state(self, spec: MethodSpec | None) -> Any:
        """``spec``'s method state; None: the model's RoPE as its config states it (a written folder)."""
        from ropectl.runtime.model import method_states

        key = label(spec)
        if key not in self._states:
            self._states[key] = method_states(self.source.config, (spec,) if spec is not None else ())[0]
        return self._states[key]

    def plan(self, specs: Sequence[MethodSpec | None], lengths: tuple[int, ...], trained: int | None) -> list[str]:
        """The engine's own refusals for these methods and lengths, before it loads (its warnings returned)."""
        sweep = EngineSweep(Lengths(lengths), [self.state(s) for s in specs], trained)
        self.engine.check(sweep)
        return sweep.warnings

    def check(self, spec: MethodSpec) -> None:
        """Refuse a spec the config cannot take, before any weight loads."""
        self.state(spec)

    def nll(self, spec: MethodSpec | None, docs: Sequence[Any], length: int, cuts: tuple[int, ...]
            ) -> dict[int, tuple[list[float], list[int]]]:
        """Per-document NLL sums and token counts of the first ``length`` tokens, at each of ``cuts``."""
        state = self.state(spec)
        if state.length_dependent:  # its frequencies at a prefix are not those of the full forward
            out = {}
            for cut in cuts:
                out.update(self._forward(state, docs, cut, (cut,)))
            return out
        return self._forward(state, docs, length, cuts)

    def _forward(self, state: Any, docs: Sequence[Any], length: int, cuts: tuple[int, ...]
                 ) -> dict[int, tuple[list[float], list[int]]]:
        from ropectl.eval.engines.requests import SequenceNLL

        self.engine.activate(state)
        got = self.engine.sequence_nll([SequenceNLL(d.tokens[:length].tolist(), cuts) for d in docs])
        self.engine.verify_after_forward(state, length)
        self.forwards += 1
        return {cut: ([g.sums[i] for g in got], [g.counts[i] for g in got]) for i, cut in enumerate(cuts)}

    def needles(self, spec: MethodSpec, trials: Sequence[Any]) -> tuple[float, float]:
        """(mean NLL per answer token, fraction of trials whose answer is the argmax throughout)."""
        from ropectl.eval.engines.requests import AnswerLogprobs

        state = self.state(spec)
        self.engine.activate(state)
        got = self.engine.answer_logprobs([AnswerLogprobs(t.ids[:t.prompt_len], t.ids[t.prompt_len:]) for t in trials])
        self.engine.verify_after_forward(state, len(trials[0].ids))
        self.forwards += 1
        per_token = [g.nll / max(1, len(g.argmax)) for g in got]
        hits = [tuple(g.argmax) == tuple(t.ids[t.prompt_len:]) for g, t in zip(got, trials, strict=True)]
        return math.fsum(per_token) / len(got), sum(hits) / len(hits)


def label(spec: MethodSpec | None) -> str:
    from ropectl.runtime.model import AS_IS

    return AS_IS if spec is None else spec.label


def measure(ev: Evaluator, spec: MethodSpec | None, docs: Sequence[Any], trials: Sequence[Any], plan: Plan,
            on_length: Callable[[int, float], None] | None = None) -> Measured:
    """Measure ``spec`` at the plan's lengths, shortest first. Infeasible (in-window PPL above the plan's limit):
    returned at once, unmeasured at the target. ``on_length(step, log_ppl)`` after each length may raise to
    stop (Optuna's pruning)."""
    nll: dict[int, list[float]] = {}
    tokens: dict[int, list[int]] = {}
    for step, length in enumerate(plan.lengths):
        cuts = (plan.trained, length) if step == 0 else (length,)
        for cut, (sums, counts) in ev.nll(spec, docs, length, cuts).items():
            nll[cut], tokens[cut] = sums, counts
        if step == 0 and plan.limit is not None:
            inside = math.fsum(nll[plan.trained]) / sum(tokens[plan.trained])
            if inside > plan.limit:
                return Measured(label(spec), False, nll, tokens)
        if on_length is not None:
            on_length(step, math.fsum(nll[length]) / sum(tokens[length]))
    answer = accuracy = None
    if trials:
        answer, accuracy = ev.needles(spec, trials)
    return Measured(label(spec), True, nll, tokens, answer, accuracy)


def split_documents(ev: Evaluator, dataset: str | None, search: int, held_out: int, target: int, seed: int,
                    held_ids: tuple[str, ...] = ()) -> tuple[list[Any], list[Any]]:
    """Search and held-out documents, disjoint, drawn with ``seed`` from the corpus documents at least ``target``
    tokens long; the held-out ones are ``held_ids`` where given (the search's are drawn from the rest)."""
    from ropectl.runtime.corpus import load_corpus, make_source

    source = make_source(dataset)
    corpus = load_corpus(source, ev.tokenizer, 4 * (search + held_out) + 8)
    usable = list(corpus.usable(target))
    if len(usable) < search + held_out:
        longest = max(d.n_tokens for d in corpus.documents)
        raise DataError(f"'{corpus.name}' has {len(usable)} documents of at least {target} tokens (the target), and "
                        f"the search needs {search} + {held_out} held out (the longest has {longest} tokens)",
                        "pass fewer --docs / --held-out, a lower --target-length, or --dataset with longer documents")
    named = {d.doc_id: d for d in usable}
    missing = [i for i in held_ids if i not in named]
    if missing:
        raise DataError(f"held-out document(s) not among '{corpus.name}''s documents of at least {target} tokens: "
                        f"{', '.join(missing)}", "name them as the corpus does (search.json lists held_out_docs), "
                        "or pass a count")
    held = [named[i] for i in held_ids]  # named ones held out; the rest drawn as a count would draw them all
    rest = [d for d in usable if d.doc_id not in held_ids]
    random.Random(f"ropectl-search:{seed}").shuffle(rest)
    return rest[:search], held or rest[search:search + held_out]


def needle_trials(ev: Evaluator, dataset: str | None, target: int, samples: int, seed: int) -> list[Any]:
    """RULER niah trials at the target (the eval-tasks generator; ``seed`` keeps search and held-out apart)."""
    from ropectl.eval.tasks.ruler import GENERATORS, generator_names, trial_rng
    from ropectl.eval.tasks.ruler.build import Tokens, assemble
    from ropectl.eval.tasks.ruler.haystack import from_texts
    from ropectl.runtime.corpus import make_source

    if samples <= 0:
        return []
    generator_names()  # registers the built-in generators
    hay = from_texts((t for _, t in make_source(dataset).texts()), 8 * target + 200_000)
    tok = Tokens(ev.tokenizer)
    make = GENERATORS[NEEDLE_TASK].make
    return [assemble(tok, make(trial_rng(NEEDLE_TASK, seed, target, i), hay, target, tok), NEEDLE_TASK, target, i)
            for i in range(samples)]
