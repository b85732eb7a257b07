"""The ``tasks`` sweep task (``eval-tasks``): RULER-style tasks x methods x lengths x samples.

A cell is (task, method, length, trial); a batch is trials of one length (any tasks) sharing a forward, methods
with equal rotary signatures filled from one forward. Every prompt is built before the weight load (a length too
short for a task fails first), from the eval corpus; the same trials go to every method, so results are paired.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropectl.eval.engines import engine_record
from ropectl.eval.progress import Progress
from ropectl.eval.tasks import Batch, register_task
from ropectl.eval.tasks.ruler import GENERATORS, trial_rng
from ropectl.eval.tasks.ruler.build import Tokens, Trial, assemble
from ropectl.eval.tasks.ruler.results import (
    LOG,
    PLOT,
    Row,
    Score,
    append_rows,
    comparisons,
    effective_lengths,
    read_rows,
    samples_to_decide_cell,
    scores,
    write_outputs,
)
from ropectl.eval.tasks.ruler.spec import TasksSpec
from ropectl.eval.tasks.sweep import Sweep, run_sweep
from ropectl.eval.tasks.trials import trial_batches, with_engine, write_run_file
from ropectl.runtime import dist
from ropectl.runtime.packages import library_versions

RUN_FILE = "tasks-run.json"
PROMPT_VERSION = "ruler-v3"  # a run's identity: another generator or scorer (v3: greedy, SLACK) is another run
Unit = tuple[int, str, int]  # (length, task, trial): plan_batches groups by the first field


@dataclass(frozen=True)
class TasksResult:
    out: Path
    meta: dict[str, Any]
    rows: tuple[Row, ...]
    table: tuple[Score, ...]
    comparisons: tuple[dict[str, Any], ...]
    effective: dict[str, int | None]  # the longest counted length (ropectl.eval.effective)
    plot: Path | None
    decided: dict[str, dict[str, Any]] = field(default_factory=dict)  # method -> determined, samples_to_decide

    def score(self, task: str, method: str, length: int) -> Score | None:
        return next((s for s in self.table if (s.task, s.method, s.length) == (task, method, length)), None)

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "meta": self.meta, "table": [s.to_dict() for s in self.table],
                "comparisons": list(self.comparisons), "effective_length": self.effective,
                "plot": str(self.plot) if self.plot else None}


def build_trials(tokenizer: Any, spec: TasksSpec, texts: Any) -> dict[Unit, Trial]:
    """Every trial of the run, from the haystack text (an iterable of documents)."""
    from ropectl.eval.tasks.ruler.haystack import from_texts

    hay = from_texts(texts, 8 * max(spec.lengths) + 200_000)
    tok = Tokens(tokenizer)
    out = {}
    for n in spec.lengths:
        for task in spec.tasks:
            for i in range(spec.samples):
                rng = trial_rng(task, spec.seed, n, i)
                out[(n, task, i)] = assemble(tok, GENERATORS[task].make(rng, hay, n, tok), task, n, i)
    return out


@register_task("tasks")
class TasksTask:
    # a trial's forward is its prompt (shorter than the cell), then greedy decoding past it: the engine checks
    # length-dependent RoPE after each prompt's forward, at its length, not once at the cell's
    verifies_itself = True
    name, command, run_file, log_file, unit = "tasks", "eval-tasks", RUN_FILE, LOG, "trials"

    def __init__(self) -> None:
        self.trials: dict[Unit, Trial] = {}
        self.done_keys: set[Any] = set()

    def prepare(self, sweep: Sweep) -> dict[str, Any]:
        from ropectl.runtime.corpus import make_source

        spec, engine = sweep.spec, sweep.engine
        assert engine is not None
        source = make_source(spec.dataset)
        self.trials = build_trials(engine.tokenizer, spec, (t for _, t in source.texts()))
        return with_engine({"model": sweep.model_label, "dtype": sweep.dtype, "seed": spec.seed,
                            "prompt": PROMPT_VERSION, "haystack": source.identity}, engine)

    def write_run_file(self, sweep: Sweep, ident: dict[str, Any]) -> None:
        write_run_file(sweep, RUN_FILE, ident, "task results",
                       "resume with the same model, dtype, --seed and --dataset, or use a new --out")

    def done(self, sweep: Sweep) -> set[Any]:
        return {r.ident for r in read_rows(sweep.out)}

    def plan(self, sweep: Sweep, done: set[Any]) -> list[Batch]:
        # plan_batches keys a unit's cells as (method, *unit); ours are logged as (task, method, length, trial)
        self.done_keys = {(m, n, t, i) for t, m, n, i in done}
        return trial_batches(sweep, sorted(self.trials), self.done_keys)

    def score(self, sweep: Sweep, batch: Batch, on_tokens: Callable[[int], None]) -> list[Row]:
        from ropectl.eval.tasks.ruler.score import score_trials

        engine, (labels, todo) = sweep.engine, batch.items
        assert engine is not None
        trials = [self.trials[u] for u in todo]
        outcomes = score_trials(engine, trials)
        params = {s.label: s.params() for s in sweep.states}
        decode = engine.tokenizer.decode
        rows = [Row(sweep.model_label, m, t.task, t.length, t.index, o.score, o.found, len(t.references), o.answer_nll,
                    decode(list(o.predicted)), decode(list(t.ids[t.prompt_len:])), params[m])
                for u, t, o in zip(todo, trials, outcomes, strict=True) for m in labels
                if (m, *u) not in self.done_keys]
        on_tokens(batch.tokens)
        return rows

    def log(self, sweep: Sweep, records: list[Any]) -> None:
        append_rows(sweep.out, records)

    def kept(self, sweep: Sweep) -> int:
        return len(read_rows(sweep.out))

    def finish(self, sweep: Sweep, new: list[Any], wall_s: float) -> TasksResult:
        meta = _meta(sweep, len(new), wall_s)
        return finish_run(sweep.out, sweep.spec, [s.label for s in sweep.states], dist.all_gather(sweep.world, new),
                          meta, sweep.world.is_main)


def run_tasks(spec: TasksSpec, progress: Callable[[Progress], None] | None = None) -> TasksResult:
    return run_sweep(TasksTask(), spec, progress, engine=spec.engine)


def finish_run(out: Path, spec: TasksSpec, methods: list[str], gathered: list[Row], meta: dict[str, Any],
               main: bool) -> TasksResult:
    by_ident = {r.ident: r for r in read_rows(out)} if spec.resume else {}
    by_ident.update({r.ident: r for r in gathered})
    tasks, lengths = list(spec.tasks), list(spec.lengths)
    order = {m: i for i, m in enumerate(methods)}
    rows = sorted((r for r in by_ident.values() if r.method in order and r.task in tasks and r.length in lengths
                   and r.trial < spec.samples), key=lambda r: (tasks.index(r.task), order[r.method], r.length, r.trial))
    table = scores(rows, tasks, methods, lengths)
    pairs = comparisons(rows, tasks, methods, lengths)
    overall = "average" if len(tasks) > 1 else tasks[0]
    found = effective_lengths(table, methods, lengths, spec.threshold, overall)
    effective = {m: e.length for m, e in found.items()}
    decided = {m: {"determined": e.determined, "samples_to_decide":
                   samples_to_decide_cell(table, m, overall, e, spec.threshold)} for m, e in found.items()}
    plot = out / PLOT if rows else None
    if main:
        write_outputs(out, rows, {"meta": meta, "table": [s.to_dict() for s in table], "comparisons": pairs,
                                  "effective_length": {"threshold": spec.threshold, "over": overall,
                                                       "rule": "95 % Wilson lower bound", **effective},
                                  "effective_decided": decided})
        if plot is not None:
            from ropectl.eval.tasks.ruler.plot import plot_tasks

            plot_tasks(table, methods, [*tasks, *(["average"] if len(tasks) > 1 else [])], meta["trained_context"],
                       spec.threshold, plot, title=f"{meta['model']} · {meta['dtype']} · {spec.samples} per cell")
    return TasksResult(out, meta, tuple(rows), tuple(table), tuple(pairs), effective, plot, decided)


def _meta(sweep: Sweep, new: int, wall_s: float) -> dict[str, Any]:
    spec, states, world = sweep.spec, sweep.states, sweep.world
    return {
        "model": sweep.model_label, "tasks": list(spec.tasks), "methods": [s.label for s in states],
        "method_params": {s.label: s.params() for s in states}, "lengths": list(spec.lengths),
        "samples": spec.samples, "seed": spec.seed, "threshold": spec.threshold, "prompt": PROMPT_VERSION,
        "sources": {t: GENERATORS[t].source for t in spec.tasks}, "trained_context": sweep.trained,
        "dtype": sweep.dtype, "dtype_choice": sweep.dtype_choice, "device": sweep.device, "world_size": world.size,
        "engine": engine_record(sweep.engine) if sweep.engine else None, "new_trials": new, "wall_s": round(wall_s, 2),
        "scoring": "teacher forcing with RULER's answer prefix: a reference is found when greedy decoding would give "
                   "the canonical answer up to and including it (string_match_all for one reference)",
        "intervals": "95 %: Wilson on the summed scores over trials; paired differences: Newcombe's square-and-add "
                     "interval with the exact sign test (McNemar on 0/1 scores)",
        "versions": library_versions(),
    }
