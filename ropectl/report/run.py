"""``report``'s run: check the inputs, plan and size by the budget, then eval-tasks' and eval-ppl's own sweeps on
each model as it ships (no second scorer), then the analysis, the verdict and the card.

The sweeps write under DIR: base/tasks, base/ppl, extended/tasks, extended/ppl (each a complete eval-tasks or eval-ppl
results folder). Both models get the same trials (same seed, haystack and tokenizer) and the same documents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.report.inputs import Inputs, preflight
from ropectl.report.plan import Plan, fit_budget, minimum_minutes, plan_lines
from ropectl.report.spec import ReportSpec

Say = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Measured:
    screen: tuple[Any, ...]  # the base's rows at the reference length, every candidate
    base_rows: tuple[Any, ...]
    ext_rows: tuple[Any, ...]
    base_ppl: tuple[Any, ...]  # eval-ppl cells
    ext_ppl: tuple[Any, ...]


def run_report(spec: ReportSpec, say: Say | None = None, progress: Callable[[Any], None] | None = None) -> Any:
    """Everything ``ropectl report`` does; returns the Card (``ropectl.report.card``)."""
    from ropectl.report.card import build_card, write_card
    from ropectl.runtime.folder import output_dir
    from ropectl.runtime.reuse import reusing

    say = say or (lambda line: None)
    with reusing():  # the probe and the sweeps share one load of each model
        inputs = preflight(spec)
        plan = sized(spec, inputs, say)
        out = output_dir(spec.out, spec.resume, "report")
        check_fresh(out, spec.resume)
        measured = resumable(lambda: measure(spec, inputs, plan, out, progress, say), out)
    card = build_card(spec, inputs, plan, measured)
    write_card(out, card)
    return card


def check_fresh(out: Path, resume: bool) -> None:
    """A card folder with results in it is continued only when asked: its sweeps would otherwise be reused silently,
    whatever run wrote them (--resume still refuses sweeps of another run, by their identity)."""
    if not resume and out.is_dir() and any(out.iterdir()):
        raise UsageError(f"'{out}' already holds a report's results", "pass --resume to continue that report, or "
                         "another --out")


def resumable(work: Callable[[], Measured], out: Path) -> Measured:
    """A stopped sweep (Ctrl-C, SIGTERM) keeps what it logged; its one line resumes the whole report."""
    from ropectl.runtime.interrupt import SweepInterrupted, resume_line

    try:
        return work()
    except SweepInterrupted as exc:
        raise exc.retold(f"{exc.what}: {exc.kept} finished cells kept in {exc.out}", resume_line(out)) from None


def sized(spec: ReportSpec, inputs: Inputs, say: Say) -> Plan:
    """The plan at the asked samples, cut to --budget by two timed forwards; refused when one sample per length
    does not fit."""
    from ropectl.eval.engines import DEFAULT_ENGINE, get_engine
    from ropectl.eval.timing import timed_forward

    plan = Plan(tasks=inputs.candidates, reference=inputs.reference, lengths=inputs.lengths, samples=spec.max_samples,
                docs=spec.docs, ppl_lengths=inputs.ppl_lengths)
    engine = spec.engine or DEFAULT_ENGINE
    timing = None
    if get_engine(engine).cheap_method_switch:  # a torch module to time and to measure (recommend's condition)
        timing = timed_forward(spec.extended, spec.device, spec.dtype, inputs.trained, engine)
    if spec.budget_min is not None and timing is not None:
        fitted = fit_budget(plan, timing, spec.budget_min * 60)
        if fitted is None:
            need = minimum_minutes(plan, timing)
            raise UsageError(f"--budget {spec.budget_min:g} min is too small for one sample per length: the plan "
                             f"needs at least {need:.1f} min", f"pass --budget {need * 1.1:.1f} or more, or fewer "
                             "--lengths or --task")
        plan = fitted
    for line in plan_lines(plan, timing, spec.budget_min, spec.max_samples):
        say(line)
    return plan


def measure(spec: ReportSpec, inputs: Inputs, plan: Plan, out: Path, progress: Callable[[Any], None] | None,
            say: Say) -> Measured:
    from ropectl.report.analysis import kept_tasks

    def tasks(model: str, who: str, names: tuple[str, ...], lengths: tuple[int, ...], samples: int) -> Any:
        return _tasks(spec, model, out / who / "tasks", names, lengths, samples, progress)

    ref = (inputs.reference,)
    screen = tasks(spec.base, "base", inputs.candidates, ref, plan.reference_samples).rows
    kept, _ = kept_tasks(screen, inputs.candidates, inputs.reference)
    say(f"kept {len(kept)} of {len(inputs.candidates)} tasks at the reference length: {', '.join(kept) or 'no task'}")
    # The base is measured at the reference length only: the rule divides by its reference score, and its scores
    # past its own window would double the long trials (the costliest part) to fill a column no criterion reads.
    base_rows, ext_rows = list(screen), []
    if kept:
        if plan.reference_samples == plan.samples:  # one sweep (and one set of its plots) where the sizes agree
            ext_rows += tasks(spec.extended, "extended", tuple(kept), ref + inputs.lengths, plan.samples).rows
        else:
            ext_rows += tasks(spec.extended, "extended", tuple(kept), ref, plan.reference_samples).rows
            ext_rows += tasks(spec.extended, "extended", tuple(kept), inputs.lengths, plan.samples).rows
    base_ppl = _ppl(spec, spec.base, out / "base" / "ppl", inputs, plan, progress)
    ext_ppl = _ppl(spec, spec.extended, out / "extended" / "ppl", inputs, plan, progress)
    return Measured(screen=tuple(screen), base_rows=tuple(_unique(base_rows)), ext_rows=tuple(_unique(ext_rows)),
                    base_ppl=base_ppl, ext_ppl=ext_ppl)


def _unique(rows: list[Any]) -> list[Any]:
    return list({r.ident: r for r in rows}.values())


def _tasks(spec: ReportSpec, model: str, out: Path, names: tuple[str, ...], lengths: tuple[int, ...], samples: int,
           progress: Callable[[Any], None] | None) -> Any:
    """eval-tasks on ``model`` as it ships; a second call into the same folder adds to it (--resume)."""
    from ropectl.eval.tasks.ruler.runner import run_tasks
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec

    return run_tasks(build_tasks_spec(model=model, tasks=",".join(names), lengths=list(lengths), samples=samples,
                                      seed=spec.seed, dataset=spec.dataset, dtype=spec.dtype, device=spec.device,
                                      out=out, resume=True if out.exists() else None, engine=spec.engine), progress)


def _ppl(spec: ReportSpec, model: str, out: Path, inputs: Inputs, plan: Plan,
         progress: Callable[[Any], None] | None) -> tuple[Any, ...]:
    from ropectl.eval.tasks.ppl import build_spec, run_eval

    result = run_eval(build_spec(model=model, lengths=list(inputs.ppl_lengths), docs=plan.docs,
                                 dataset=inputs.retention, dtype=spec.dtype, device=spec.device, out=out,
                                 resume=True if out.exists() else None, engine=spec.engine), progress)
    return tuple(result.cells)

