"""The ``passkey`` task (``eval-passkey``): passkey retrieval over lengths x depths x RoPE methods.

A cell is (method, length, depth, trial); a batch is trials of one length sharing a forward, methods with equal
rotary signatures filled from one forward. Scored by teacher forcing (``score``); accuracy per method x length x
depth and pooled over depths (``results``), heatmap (``plot``). Every prompt is built before the weight load, so a
length too short for the prompt is an error before any forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.eval.engines import engine_record
from ropectl.eval.progress import Progress
from ropectl.eval.tasks import Batch, register_task
from ropectl.eval.tasks.passkey.prompt import PROMPT_VERSION, PromptBuilder, Trial
from ropectl.eval.tasks.passkey.results import LOG, PLOT, Accuracy, Row, accuracies, append_rows, read_rows, write_outputs
from ropectl.eval.tasks.passkey.spec import PasskeySpec
from ropectl.eval.tasks.sweep import Sweep, run_sweep
from ropectl.eval.tasks.trials import trial_batches, with_engine, write_run_file
from ropectl.runtime import dist
from ropectl.runtime.model import MethodState
from ropectl.runtime.packages import library_versions

RUN_FILE = "passkey-run.json"
Unit = tuple[int, float, int]  # (length, depth, trial)


@dataclass(frozen=True)
class PasskeyResult:
    out: Path
    meta: dict[str, Any]
    rows: tuple[Row, ...]
    table: tuple[Accuracy, ...]  # per (method, length, depth)
    by_length: tuple[Accuracy, ...]  # per (method, length), every depth pooled
    plot: Path | None

    def accuracy(self, method: str, length: int) -> float | None:
        hit = next((a for a in self.by_length if a.method == method and a.length == length), None)
        return None if hit is None else hit.accuracy

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "meta": self.meta, "table": [a.to_dict() for a in self.table],
                "by_length": [a.to_dict() for a in self.by_length], "plot": str(self.plot) if self.plot else None}


@register_task("passkey")
class PasskeyTask:
    name, command, run_file, log_file, unit = "passkey", "eval-passkey", RUN_FILE, LOG, "trials"

    def __init__(self) -> None:
        self.trials: dict[Unit, Trial] = {}
        self.units: list[Unit] = []
        self.done_keys: set[Any] = set()

    def prepare(self, sweep: Sweep) -> dict[str, Any]:
        spec, engine = sweep.spec, sweep.engine
        assert engine is not None
        builder = PromptBuilder(engine.tokenizer, max(spec.lengths))
        self.units = [(n, d, i) for n in spec.lengths for d in spec.depths for i in range(spec.trials)]
        self.trials = {u: builder.trial(*u, spec.seed, spec.key_digits) for u in self.units}  # bad lengths fail here
        return with_engine({"model": sweep.model_label, "dtype": sweep.dtype, "seed": spec.seed,
                            "key_digits": spec.key_digits, "prompt": PROMPT_VERSION}, engine)

    def write_run_file(self, sweep: Sweep, ident: dict[str, Any]) -> None:
        write_run_file(sweep, RUN_FILE, ident, "passkey results",
                       "resume with the same model, dtype, --seed and --key-digits, or use a new --out")

    def done(self, sweep: Sweep) -> set[Any]:
        return {r.ident for r in read_rows(sweep.out)}

    def plan(self, sweep: Sweep, done: set[Any]) -> list[Batch]:
        self.done_keys = done
        return trial_batches(sweep, self.units, done)

    def score(self, sweep: Sweep, batch: Batch, on_tokens: Callable[[int], None]) -> list[Row]:
        from ropectl.eval.tasks.passkey.score import score_with

        engine, (labels, todo) = sweep.engine, batch.items
        assert engine is not None
        trials = [self.trials[u] for u in todo]
        outcomes = score_with(engine, trials)
        params = {s.label: s.params() for s in sweep.states}
        rows = [Row(sweep.model_label, m, *u, self.trials[u].key, o.success, o.answer_nll,
                    engine.tokenizer.decode(list(o.predicted)), self.trials[u].key_at, params[m])
                for u, o in zip(todo, outcomes, strict=True) for m in labels if (m, *u) not in self.done_keys]
        on_tokens(batch.tokens)
        return rows

    def log(self, sweep: Sweep, records: list[Any]) -> None:
        append_rows(sweep.out, records)

    def kept(self, sweep: Sweep) -> int:
        return len(read_rows(sweep.out))

    def finish(self, sweep: Sweep, new: list[Any], wall_s: float) -> PasskeyResult:
        meta = _meta(sweep.spec, sweep.model_label, sweep.states, sweep.trained, sweep.dtype, sweep.dtype_choice,
                     sweep.device, sweep.world, len(new), wall_s)
        if sweep.engine is not None:
            meta["engine"] = engine_record(sweep.engine)
        return _finish(sweep.out, sweep.spec, sweep.states, dist.all_gather(sweep.world, new), meta, sweep.world)


def run_passkey(spec: PasskeySpec, progress: Callable[[Progress], None] | None = None) -> PasskeyResult:
    return run_sweep(PasskeyTask(), spec, progress, engine=spec.engine)


def _finish(out: Path, spec: PasskeySpec, states: list[MethodState], gathered: list[Row], meta: dict[str, Any],
            world: dist.World) -> PasskeyResult:
    by_ident = {r.ident: r for r in read_rows(out)} if spec.resume else {}
    by_ident.update({r.ident: r for r in gathered})
    methods, lengths, depths = [s.label for s in states], list(spec.lengths), list(spec.depths)
    order = {m: i for i, m in enumerate(methods)}
    rows = sorted((r for r in by_ident.values() if r.method in order and r.length in lengths and r.depth in depths
                   and r.trial < spec.trials), key=lambda r: (order[r.method], r.length, r.depth, r.trial))
    table = tuple(accuracies(rows, methods, lengths, depths))
    by_length = tuple(accuracies(rows, methods, lengths, depths, by_depth=False))
    plot = out / PLOT if rows else None
    if world.is_main:
        write_outputs(out, rows, {"meta": meta, "table": [a.to_dict() for a in table],
                                  "by_length": [a.to_dict() for a in by_length]})
        if plot is not None:
            from ropectl.eval.tasks.passkey.plot import plot_passkey

            plot_passkey(list(table), methods, lengths, depths, meta["trained_context"], plot,
                         title=f"{meta['model']} · {meta['dtype']} · {spec.trials} trial(s) per cell")
    return PasskeyResult(out, meta, tuple(rows), table, by_length, plot)


def _meta(spec: PasskeySpec, label: str, states: list[MethodState], trained: int | None, dtype: str, why: str,
          device: str, world: dist.World, new: int, wall_s: float) -> dict[str, Any]:
    return {
        "model": label, "methods": [s.label for s in states], "method_params": {s.label: s.params() for s in states},
        "lengths": list(spec.lengths), "depths": list(spec.depths), "trials": spec.trials, "seed": spec.seed,
        "key_digits": spec.key_digits, "prompt": PROMPT_VERSION, "trained_context": trained, "dtype": dtype,
        "dtype_choice": why, "device": device, "world_size": world.size, "batch_tokens": spec.batch_tokens,
        "new_trials": new, "wall_s": round(wall_s, 2),
        "scoring": "teacher forcing: success when the argmax at every answer position is the answer token",
        "versions": library_versions(),
    }
