"""The plan before the work: two timed forwards (``eval.timing``, the time model recommend and report use), each
stage's size and minutes fitted to --budget, its peak memory and the longest length this device holds for it, and
what the plan cut.

Minutes per stage: zero-shot is recommend's own plan (``recommend.run.plan_grid``, cut by its ``fit_budget``);
a search trial is its documents and needles at the target, one forward each (search's own estimate); a fine-tune
step is finetune's FLOPs per token (``finetune.plan.flops_per_token``) times its tokens at the FLOP rate the two
forwards measured (training runs at most that fast: an optimistic figure); acceptance is report's plan
(``report.plan``, cut by its ``fit_budget``). The budget is shared out by ``spec.SHARES``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ropectl.errors import UsageError
from ropectl.eval.timing import Timing
from ropectl.extend import memory
from ropectl.extend.spec import DEFAULT_TRIALS, MIN_STEPS, MIN_TRIALS, SEARCH_DOCS, SHARES, ExtendSpec, zero_shot_sizes


@dataclass(frozen=True, kw_only=True)
class Stage:
    name: str
    runs: str  # "yes", "auto" (decided after zero-shot), "cut" (the budget cannot hold it), "never"
    size: dict[str, Any]
    minutes: float
    peak_bytes: int
    longest: int  # the longest length this device holds for the stage
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "runs": self.runs, "size": self.size, "minutes": round(self.minutes, 2),
                "peak_bytes": self.peak_bytes, "longest": self.longest, "note": self.note}


@dataclass(frozen=True, kw_only=True)
class Plan:
    trained: int
    target: int
    dtype: str
    device: str
    available_bytes: int
    timing: dict[str, Any]
    stages: tuple[Stage, ...]
    budget_min: float | None
    cut: tuple[str, ...] = field(default_factory=tuple)

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {"trained": self.trained, "target": self.target, "dtype": self.dtype, "device": self.device,
                "available_bytes": self.available_bytes, "timing": self.timing, "budget_min": self.budget_min,
                "stages": [s.to_dict() for s in self.stages], "cut": list(self.cut),
                "minutes": round(sum(s.minutes for s in self.stages if s.runs in ("yes", "auto")), 2)}


def acceptance_plan(spec: ExtendSpec, trained: int, timing: Timing, seconds: float | None) -> Any:
    """report's plan (every candidate task counted as kept), cut to ``seconds`` (its share of the budget: 30 %, more
    with a stage set to never); refused below one sample."""
    from ropectl.eval.tasks.ruler import resolve_tasks
    from ropectl.report import plan as rp
    from ropectl.report.spec import CANDIDATES, DEFAULT_DOCS, DEFAULT_SAMPLES, default_lengths, reference_length

    ref = reference_length(trained)
    plan = rp.Plan(tasks=resolve_tasks(spec.tasks or CANDIDATES), reference=ref, lengths=default_lengths(trained, spec.target),
                   samples=spec.samples or DEFAULT_SAMPLES, docs=spec.docs or DEFAULT_DOCS,
                   ppl_lengths=tuple(sorted({ref, trained, spec.target})))
    if seconds is None or spec.samples is not None:
        return plan
    fitted = rp.fit_budget(plan, timing, seconds)
    if fitted is None:
        fraction = seconds / (spec.budget_min * 60) if spec.budget_min else SHARES["acceptance"]
        need = rp.minimum_minutes(plan, timing) / fraction
        raise UsageError(f"--budget {spec.budget_min:g} min is smaller than acceptance alone needs: at least "
                         f"{need:.1f} min (its share, {fraction:.0%}, must hold one sample per length)",
                         f"pass --budget {need * 1.1:.1f} or more")
    return fitted


def zero_shot_plan(spec: ExtendSpec, timing: Timing, seconds: float | None) -> Any:
    from ropectl.recommend.plan import fit_budget
    from ropectl.recommend.run import Request, plan_grid

    plan, _, _ = plan_grid(Request(model=spec.model, target=spec.target, factor=spec.factor, device=spec.device,
                                   dtype=spec.dtype, serve_with=spec.serve_with, sizes=zero_shot_sizes(spec)))
    return fit_budget(plan, timing, seconds) if seconds is not None else plan


def trial_seconds(timing: Timing, target: int) -> float:
    """One search trial: its documents and one needle trial at the target (pruning lengths cost less)."""
    return timing.estimate([(target, SEARCH_DOCS + 1)])


def step_seconds(config: dict[str, Any], timing: Timing, window: int) -> float:
    from ropectl.finetune.plan import flops_per_token, shape_of
    from ropectl.finetune.spec import DEFAULT_SEQUENCES

    return timing.per_flop * flops_per_token(shape_of(config), window) * DEFAULT_SEQUENCES * window


def sized_count(asked: int | None, unit_s: float, seconds: float | None, default: int) -> int:
    if asked is not None:
        return asked
    return default if seconds is None else int(seconds // unit_s) if unit_s > 0 else default


def make_plan(spec: ExtendSpec, config: dict[str, Any], trained: int, timing: Timing, dtype: str, device: str
              ) -> Plan:
    from ropectl.finetune.spec import DEFAULT_STEPS

    budget = None if spec.budget_min is None else spec.budget_min * 60
    on = {"search": spec.search != "never", "finetune": spec.finetune != "never"}
    share = {k: None if budget is None else budget * v for k, v in SHARES.items()}
    if budget is not None:  # a stage that cannot run gives its share to acceptance
        share["acceptance"] += sum(budget * SHARES[k] for k, v in on.items() if not v)
    accept = acceptance_plan(spec, trained, timing, share["acceptance"])
    zero = zero_shot_plan(spec, timing, share["zero-shot"])
    avail = memory.available_bytes(device)
    holds = lambda n: memory.eval_bytes(config, n, dtype) <= avail  # noqa: E731
    upper = 4 * spec.target
    eval_peak, eval_longest = memory.eval_bytes(config, spec.target, dtype), memory.longest(holds, upper)
    if eval_longest < spec.target:
        raise UsageError(f"this device ({device}, {avail / 2**30:.1f} GiB free) cannot hold the target "
                         f"{spec.target:,} tokens for any stage: every stage evaluates there, and the longest length "
                         f"it holds is {eval_longest:,}", f"pass -t {eval_longest} or less, or run on a larger device")
    trial_s, window = trial_seconds(timing, spec.target), trained
    train_fits = lambda n: memory.train_bytes(config, n, dtype) <= avail  # noqa: E731
    train_longest = memory.longest(train_fits, upper)
    window = min(window, train_longest)
    step_s = step_seconds(config, timing, window) if window else 0.0
    trials = sized_count(spec.trials, trial_s, share["search"], DEFAULT_TRIALS)
    steps = sized_count(spec.steps, step_s, share["finetune"], DEFAULT_STEPS)
    stages, cut = [], []
    zero_s = timing.estimate(zero.forwards())
    if share["zero-shot"] is not None and zero_s > share["zero-shot"]:  # recommend's smallest sweep, still over
        cut.append(f"zero-shot: its smallest sweep ({len(zero.methods)} methods, {zero.docs} documents, "
                   f"{zero.samples} samples per task) needs ~{zero_s / 60:.0f} min, over its share "
                   f"({share['zero-shot'] / 60:.0f} min): it runs whole"
                   + ("" if spec.factor else "; -f sweeps one factor per method"))
    stages.append(Stage(name="zero-shot", runs="yes", size={"methods": list(zero.methods), "docs": zero.docs,
                                                           "samples": zero.samples, "tasks": list(zero.tasks)},
                        minutes=zero_s / 60, peak_bytes=eval_peak, longest=eval_longest))
    stages.append(_gated("search", spec.search, {"trials": trials}, trials, spec.trials or MIN_TRIALS, trials * trial_s,
                         eval_peak, eval_longest, cut))
    note = "" if window == trained else f"PoSE window cut to {window:,} (the device holds no longer training length)"
    if not window:
        cut.append("finetune: the device cannot hold one training sequence")
    stages.append(_gated("finetune", spec.finetune if window else "never", {"steps": steps, "window": window,
                                                                           "mode": "pose"},
                         steps, spec.steps or MIN_STEPS, steps * step_s,
                         memory.train_bytes(config, window, dtype) if window else 0, train_longest, cut, note))
    stages.append(Stage(name="acceptance", runs="yes", size={"samples": accept.samples, "docs": accept.docs,
                                                            "lengths": list(accept.lengths)},
                        minutes=timing.estimate(accept.forwards()) / 60, peak_bytes=eval_peak,
                        longest=eval_longest))
    return Plan(trained=trained, target=spec.target, dtype=dtype, device=device, available_bytes=avail,
                timing={"tokens": timing.tokens, "seconds": timing.seconds, "short": timing.short,
                        "short_s": timing.short_s}, stages=tuple(stages), budget_min=spec.budget_min, cut=tuple(cut))


def _gated(name: str, choice: str, size: dict[str, Any], count: int, least: int, seconds: float, peak: int,
           longest: int, cut: list[str], note: str = "") -> Stage:
    """A stage --search/--finetune gates: cut when ``auto`` and the budget holds fewer than ``least``; ``always``
    runs at least ``least``, over the budget if need be."""
    runs = {"never": "never", "always": "yes", "auto": "auto"}[choice]
    if count < least and runs == "auto":
        cut.append(f"{name}: its share of the budget holds {count} (fewer than {least}); the card cannot say what "
                   f"{name} would have gained")
        runs = "cut"
    elif count < least and runs == "yes":
        size = {**size, next(iter(size)): least}
        note = (note + "; " if note else "") + f"--{name} always: {least}, over its share of the budget"
        seconds = seconds / max(count, 1) * least
    return Stage(name=name, runs=runs, size=size, minutes=seconds / 60, peak_bytes=peak, longest=longest, note=note)


def plan_lines(plan: Plan) -> list[str]:
    from ropectl.runtime.lengths import length_label as label

    t = plan.timing
    lines = [f"plan: {label(plan.trained)} -> {label(plan.target)} on {plan.device} ({plan.dtype}), "
             f"{plan.available_bytes / 2**30:.1f} GiB free; forwards of {t['tokens']} and {t['short']} tokens took "
             f"{t['seconds']:.2f} s and {t['short_s']:.2f} s"]
    for s in plan.stages:
        if s.runs == "never":  # nothing to size or time: its share went to acceptance
            lines.append(f"  {s.name:<11} never" + (f"; {s.note}" if s.note else ""))
            continue
        size = ", ".join(f"{k} {v if not isinstance(v, list) else len(v)}" for k, v in s.size.items())
        lines.append(f"  {s.name:<11} {s.runs:<5} {size}; ~{s.minutes:.1f} min; peak {s.peak_bytes / 2**30:.2f} GiB,"
                     f" longest held {held(s.longest, 4 * plan.target)}" + (f"; {s.note}" if s.note else ""))
    total = plan.to_dict()["minutes"]
    budget = "" if plan.budget_min is None else f" of a {plan.budget_min:g} min budget"
    lines.append(f"  total ~{total:.1f} min{budget} (auto stages counted; ship and engines not timed)")
    return lines + [f"  cut: {c}" for c in plan.cut]


def held(n: int, upper: int) -> str:
    """The longest length a stage holds, as the bisection found it (it looks no further than ``upper``)."""
    from ropectl.runtime.lengths import length_label as label

    return "no length" if not n else f">= {label(n)}" if n >= upper else label(n)


def with_stage(plan: Plan, stage: Stage) -> Plan:
    return replace(plan, stages=tuple(stage if s.name == stage.name else s for s in plan.stages))


def plan_from_dict(d: dict[str, Any]) -> Plan:
    """A stored plan (record.json): a resumed run keeps its sizes."""
    stages = tuple(Stage(name=s["name"], runs=s["runs"], size=s["size"], minutes=s["minutes"],
                         peak_bytes=s["peak_bytes"], longest=s["longest"], note=s.get("note", ""))
                   for s in d["stages"])
    return Plan(trained=d["trained"], target=d["target"], dtype=d["dtype"], device=d["device"],
                available_bytes=d["available_bytes"], timing=d["timing"], stages=stages, budget_min=d["budget_min"],
                cut=tuple(d["cut"]))
