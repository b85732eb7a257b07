"""The winner, checked on a serving engine that does not run trials: vLLM restarts its engine for every RoPE, so it
never scores trials; once the search has written what ships, vLLM (where it is installed) scores it on the held-out
documents and the report says whether it agrees with transformers, which measured it for the decision.

What is scored: the written folder as configured (what a user serves), or with ``--emit`` (or nothing to write) the
model with the shipped spec, which the vLLM engine runs with the overrides ``--emit vllm`` prints. It goes through
the evaluation engine protocol only: the engines checked are chosen by capability, never by name (those whose
method switch is not cheap, :func:`check_engines`), and an engine that is not importable here, or that refuses
the model (vLLM takes no GGUF), leaves a "not checked" line with its reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ropectl.search.fitness import Evaluator, Measured, measure

# |mean NLL per token| between the engines, per held-out document and length. fp32: the vLLM engine tiers measure at
# most 1.6e-7 (tests/compat/test_vllm_engine.py, test_search_vllm.py: 8.2e-8), so 1e-4 leaves room for longer
# documents and deeper models. Half precision rounds every activation to 8 (bf16) or 11 (fp16) bits in kernels that
# differ between the engines: 1.8e-3 measured in bf16 on the same tiny model, so a bf16 check catches a wrong RoPE
# only where it moves the PPL by whole percents (docs/reference/search.md); pass --dtype fp32 for a sharp one.
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 2e-2}


@dataclass(frozen=True)
class EngineCheck:
    engine: str
    status: str  # "agrees", "differs", "not checked", "failed"
    why: str
    scored: str = ""  # what was scored: the written folder, or the model with the shipped spec
    docs: int = 0
    max_diff: float | None = None  # the largest |mean NLL per token| difference, over documents and lengths
    tolerance: float | None = None
    ppl: dict[str, float] | None = None  # PPL at the target: this engine's and transformers'
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "status": self.status, "why": self.why, "scored": self.scored,
                "docs": self.docs, "max_nll_diff": self.max_diff, "tolerance": self.tolerance, "ppl_target": self.ppl,
                "seconds": self.seconds}

    def line(self) -> str:
        if self.status in ("not checked", "failed"):
            return f"{self.engine} check: {self.status} ({self.why})"
        return f"{self.engine} check ({self.scored}, {self.docs} held-out documents): {self.status} ({self.why})"


def check_winner(setup: Any, report: Any, output: dict[str, Any] | None,
                 say: Callable[[str], None]) -> list[EngineCheck]:
    """Each check engine's verdict on what ships, against transformers' held-out measurement of it."""
    reference = report.found_held if report.found_held is not None and report.ships == report.found else \
        report.closed_held
    path = (output or {}).get("path")
    if path and Path(path).is_dir():
        model, spec, scored = str(path), None, "the written folder"
    else:
        model, spec, scored = str(setup.ev.source.resolved.path), report.ships, f"the model with {report.ships.label}"
    return [check_on(name, model, spec, scored, setup, reference, say) for name in check_engines()]


def check_engines() -> list[str]:
    """The engines that check the winner: every registered engine whose method switch is not cheap (it restarts
    for each RoPE, so trials never run on it and it has not measured what ships). The trials' engine switches
    cheaply, so it is never among them."""
    from ropectl.eval.engines import engine_names, get_engine

    return [name for name in engine_names() if not get_engine(name).cheap_method_switch]


def check_on(name: str, model: str, spec: Any, scored: str, setup: Any, reference: Measured,
             say: Callable[[str], None]) -> EngineCheck:
    from ropectl.errors import RopectlError

    plan = replace(setup.plan, lengths=(setup.plan.target,), limit=None)
    try:  # everything before the weights: an engine not importable here, or refusing this model, checks nothing
        ev = Evaluator(model, setup.ev.device, setup.ev.dtype, name)
        ev.plan([spec], plan.lengths, setup.trained)
        ev.load()
    except RopectlError as exc:
        return EngineCheck(name, "not checked", exc.problem, scored)
    say(f"{name} check: scoring {scored} on {len(setup.held)} held-out documents at {plan.target} tokens")
    started = time.perf_counter()
    try:
        got = measure(ev, spec, setup.held, [], plan)
    except RopectlError as exc:  # the search's results stay; the report says the check failed and why
        return EngineCheck(name, "failed", exc.problem, scored)
    finally:
        ev.engine.close()
    return compare(name, got, reference, scored, ev.dtype, setup.plan.target, time.perf_counter() - started)


def compare(name: str, got: Measured, reference: Measured, scored: str, dtype: str, target: int,
            seconds: float) -> EngineCheck:
    """Per document and length (in-window and target), the mean NLL per token of both engines."""
    diffs = []
    for length in sorted(set(got.nll) & set(reference.nll)):
        if got.tokens[length] != reference.tokens[length]:
            return EngineCheck(name, "failed", f"it scored {got.tokens[length]} tokens at {length}, transformers "
                               f"{reference.tokens[length]}", scored)
        diffs += [abs(a - b) / n for a, b, n in zip(got.nll[length], reference.nll[length], got.tokens[length],
                                                      strict=True) if n]
    tolerance = TOLERANCE.get(dtype, TOLERANCE["bf16"])
    worst = max(diffs, default=math.inf)
    ppl = {name: _ppl(got, target), "transformers": _ppl(reference, target)}
    status = "agrees" if worst <= tolerance else "differs"
    why = (f"{'within' if worst <= tolerance else 'beyond'} {tolerance:g} ({dtype}): largest |mean NLL per token| "
           f"difference {worst:.2e}; PPL at {target} {ppl[name]:.4f} against transformers' {ppl['transformers']:.4f}")
    return EngineCheck(name, status, why, scored, len(got.nll[target]), worst, tolerance, ppl, round(seconds, 2))


def _ppl(m: Measured, length: int) -> float:
    value = m.log_ppl(length)
    return math.exp(value) if value is not None else math.nan
