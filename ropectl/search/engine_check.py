"""The winner, checked on the serving engines that do not run trials, by ``ropectl verify`` (one check, one
implementation: ``ropectl.verify.run.verify_ids``). vLLM restarts its engine for every RoPE, so it never scores
trials; once the search has written what ships, every such engine (where it is installed) scores it on the held-out
documents, in-window and at the target, against transformers on the same ids, and the report says whether it agrees.

What is scored: the written folder as configured (what a user serves), or with ``--emit`` (or nothing to write) the
model with the shipped spec, which each engine runs as ``patch --emit ENGINE`` prints it. The engines checked are
chosen by capability, never by name (those whose method switch is not cheap, :func:`check_engines`); one that is
not importable here, or that refuses the model (vLLM takes no GGUF), leaves a "not checked" line with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.verify.compare import TOLERANCE  # noqa: F401  (the tolerance search's docs quote)

STATUS = {"same": "agrees", "differs": "differs", "not checked": "not checked", "reference": "reference"}


@dataclass(frozen=True)
class EngineCheck:
    engine: str
    status: str  # "agrees", "differs", "not checked", "failed"
    why: str
    scored: str = ""  # what was scored: the written folder, or the model with the shipped spec
    docs: int = 0
    max_diff: float | None = None  # verify's largest band mean |ΔNLL| per token
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


def check_winner(setup: Any, report: Any, output: dict[str, Any] | None, say: Callable[[str], None],
                 only: tuple[str, ...] | None = None) -> list[EngineCheck]:
    """Each check engine's verdict on what ships, from ``ropectl verify`` on the held-out documents: every check
    engine, or those in ``only`` (a caller that verifies its serving engines itself passes none)."""
    import time

    from ropectl.verify.plan import REFERENCE, Plan
    from ropectl.verify.run import verify_ids
    from ropectl.verify.spec import VerifySpec

    engines = tuple(e for e in check_engines() if only is None or e in only)
    if not engines:
        return []
    path = (output or {}).get("path")
    if path and Path(path).is_dir():
        model, method, scored = str(path), None, "the written folder"
    else:
        model, method, scored = str(setup.ev.source.resolved.path), report.ships, f"the model with {report.ships.label}"
    target = setup.plan.target
    ids = tuple(tuple(int(t) for t in d.tokens[:target]) for d in setup.held)
    plan = Plan(engines=(REFERENCE, *engines), trained=int(setup.trained), target=target,
                lengths=tuple(sorted({int(setup.trained), target})), dtype=setup.ev.dtype, device=setup.ev.device)
    say(f"checking {scored} on {', '.join(engines)}: {len(ids)} held-out documents at {target} tokens")
    started = time.perf_counter()
    result = verify_ids(VerifySpec(model=model, engines=engines), plan, ids, say, method)
    seconds = round(time.perf_counter() - started, 2)
    rows = {row.engine: row for row in result.rows}
    reference = rows.pop(REFERENCE).ppl.get(target) if REFERENCE in rows else None
    return [EngineCheck(row.engine, STATUS[row.verdict], row.why, scored, len(ids) if row.ppl else 0,
                        row.mean_abs_dnll, row.tolerance,
                        {row.engine: row.ppl[target], REFERENCE: reference} if target in row.ppl else None,
                        seconds) for row in rows.values()]


def check_engines() -> list[str]:
    """The engines that check the winner: every registered engine whose method switch is not cheap (it restarts
    for each RoPE, so trials never run on it and it has not measured what ships). The trials' engine switches
    cheaply, so it is never among them."""
    from ropectl.eval.engines import engine_names, get_engine

    return [name for name in engine_names() if not get_engine(name).cheap_method_switch]
