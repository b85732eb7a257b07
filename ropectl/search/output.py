"""A whole search, start to end, and what it leaves in OUT: the study database, every trial as JSON and CSV, the
closed-form grid's measurements, ``search.json`` (the report, the documents, the seed), the plots, and the winner
written through ``patch``'s one write path (every reader's verdict comes back with it) or printed as ``--emit``
lines. The result is a method spec every command accepts: ``best.spec``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.io.files import atomic_write_text
from ropectl.output import dumps
from ropectl.rope.methods import MethodSpec
from ropectl.search.evolution import FACTORS
from ropectl.search.run import MODEL_DIR, PLOTS, SUMMARY, SearchRequest, Setup, prepare


@dataclass(frozen=True)
class SearchResult:
    out: Path
    summary: dict[str, Any]
    lines: tuple[str, ...]

    @property
    def spec(self) -> str:
        return str(self.summary["best"]["spec"])


def run_search(req: SearchRequest, say: Callable[[str], None] | None = None) -> SearchResult:
    """The search ``req`` asks for; ``say`` gets the progress lines (the CLI: stderr)."""
    from ropectl.runtime.interrupt import sigterm_as_interrupt
    from ropectl.runtime.reuse import reusing

    say = say or (lambda line: None)
    with reusing(), sigterm_as_interrupt():  # SIGTERM unwinds as Ctrl-C: Optuna marks the running trial failed
        setup = prepare(req, say)
        started = time.monotonic()
        found, trials = _search(req, setup, say)
        stopped = stop_reason(req, time.monotonic() - started, trials)
        from ropectl.search.report import held_out_report, report_lines

        report = held_out_report(setup, found)
    lines = [*stopped_lines(req, stopped), *report_lines(report, setup.trained, req.target)]
    summary = _summary(req, setup, report, trials) | {"stopped": stopped}
    summary["output"] = write_winner(req, report.ships, summary)
    _claim_model(req.out)
    from ropectl.search.engine_check import check_winner

    checks = check_winner(setup, report, summary["output"], say, req.check_with)  # vLLM, where installed: agrees?
    summary["engine_checks"] = [c.to_dict() for c in checks]
    lines += [c.line() for c in checks]
    atomic_write_text(req.out / SUMMARY, dumps(summary, indent=2) + "\n")  # kept even if a plot fails below
    summary["plots"] = _plots(req.out, trials, setup)
    atomic_write_text(req.out / SUMMARY, dumps(summary, indent=2) + "\n")
    return SearchResult(req.out, summary, tuple(lines))


def stop_reason(req: SearchRequest, seconds: float, trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Why this run's trials ended: its --budget (minutes) had passed (the trial running then finished first), or
    its trials (--trials or, for stage 2, population x iterations) were spent."""
    timed = req.minutes is not None and seconds >= req.minutes * 60
    return {"reason": "time" if timed else "trials", "minutes": req.minutes, "seconds": round(seconds, 2),
            "trials": len(trials)}


def stopped_lines(req: SearchRequest, stopped: dict[str, Any]) -> list[str]:
    if stopped["reason"] != "time":
        return []
    return [f"stopped on time: --budget {req.minutes:g} min had passed after {stopped['seconds']:.0f} s; the study "
            f"holds {stopped['trials']} trials (--resume continues it)"]


def _search(req: SearchRequest, setup: Setup, say: Callable[[str], None]
            ) -> tuple[MethodSpec | None, list[dict[str, Any]]]:
    """(the best feasible spec or None, every trial as a row), from the one loop whatever the space; the space
    writes what its spec needs beside it (longrope: the factors file its ``file=`` names)."""
    from ropectl.search.optimize import best_trial, run_trials
    from ropectl.search.study import trial_rows, write_trials

    study = run_trials(req, setup, say)
    rows = trial_rows(study, setup.space.row_params)
    write_trials(req.out, rows)
    best = best_trial(study)
    if best is None:
        return None, rows
    return setup.space.ship(setup.space.spec_of(best.params), req.out), rows


def _summary(req: SearchRequest, setup: Setup, report: Any, trials: list[dict[str, Any]]) -> dict[str, Any]:
    plan = setup.plan
    return {
        "model": str(setup.ev.source.resolved.path), "space": setup.space.name, "bounds": setup.space.describe(),
        "target": req.target, "trained": setup.trained, "lengths": list(plan.lengths), "seed": req.seed,
        "sampler": setup.space.sampler_name(req.loop), "answer_loss": req.answer_loss, "max_regression": req.max_regression,
        "in_window_limit_ppl": None if plan.limit is None else math.exp(plan.limit),
        "search_docs": [d.doc_id for d in setup.docs], "held_out_docs": [d.doc_id for d in setup.held],
        "trials": len(trials), "feasible_trials": sum(1 for t in trials if t.get("state") == "complete"),
        "reference": {k: m.to_dict(setup.trained, req.target) | {"nll": None, "tokens": None}
                      for k, m in setup.reference.items()},
        "best": {"spec": report.ships.label, "found": report.found.label if report.found else None,
                 "closed_form": report.closed.label, "beats": report.beats},
        "report": report.to_dict(setup.trained, req.target),
    }


def write_winner(req: SearchRequest, spec: MethodSpec, summary: dict[str, Any]) -> dict[str, Any] | None:
    """The shipped spec through ``patch``: a folder (a GGUF: a .gguf file) in OUT, or ``--emit`` flags."""
    from ropectl.patch import PatchSpec, patch_checkpoint
    from ropectl.rope.methods import get_method

    if get_method(spec.name).unscaled:
        return {"note": "the model as trained ships: nothing to write"}
    model = summary["model"]
    if req.emit:
        result = patch_checkpoint(PatchSpec(model=model, method=spec, emit=req.emit))
        return {"emit": result.emit, "warnings": list(result.warnings)}
    target = req.out / (MODEL_DIR + ".gguf" if model.lower().endswith(".gguf") else MODEL_DIR)
    result = patch_checkpoint(PatchSpec(model=model, method=spec, output=target, force=req.resume or req.force))
    return {"path": str(target), "warnings": list(result.warnings), "readers": list(result.readers),
            "verification": result.verification}


def _claim_model(out: Path) -> None:
    """The written model folder's files join OUT's manifest (they are ropectl's: a later --force may replace them)."""
    from ropectl.io.ownership import claim, entries_under

    folder = out / MODEL_DIR
    if folder.is_dir():
        claim(out, "search", [MODEL_DIR + "/", *(f"{MODEL_DIR}/{e}" for e in entries_under(folder))])


def _plots(out: Path, trials: list[dict[str, Any]], setup: Setup) -> list[str]:
    """The fitness over trials, and for a longrope search the found factors per dimension pair against the closed
    forms' (``ropectl.search.plot``)."""
    from ropectl.search import plot

    paths = [out / PLOTS[0]]
    closed = setup.best_closed.label
    best = setup.reference.get(closed)
    level = None if best is None else best.fitness(setup.plan.target, setup.plan.answer_loss)
    plot.plot_trials(trials, paths[0], references={closed: level} if level is not None else None)
    factors = out / FACTORS
    if setup.space.seeds and factors.is_file():  # the found factors (shipped or not) against the closed forms'
        from ropectl.rope.factors_file import read_factors_file

        found = read_factors_file(factors, ("long_factor",))["long_factor"]
        paths.append(out / PLOTS[1])
        plot.plot_factors(found, dict(setup.space.seeds), paths[1])
    return [str(p) for p in paths]
