"""The end of a sweep: gather cells from every rank, aggregate, write results/summary/plot on rank 0."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.eval.engines import engine_record
from ropectl.eval.tasks.ppl.positions import PositionCurve, curves
from ropectl.eval.tasks.ppl.results import PLOT, Aggregate, Cell, order_cells, read_cells, summarize, write_outputs
from ropectl.eval.tasks.ppl.spec import EvalSpec
from ropectl.runtime import dist
from ropectl.runtime.corpus import Corpus
from ropectl.runtime.model import MethodState, ships
from ropectl.runtime.packages import library_versions

POSITIONS_PLOT = "loss-by-position.png"


@dataclass(frozen=True)
class EvalResult:
    out: Path
    meta: dict[str, Any]
    aggregates: tuple[Aggregate, ...]
    cells: tuple[Cell, ...]
    plot: Path | None
    positions: tuple[PositionCurve, ...] = ()

    @property
    def methods(self) -> list[str]:
        return list(self.meta["methods"])

    @property
    def lengths(self) -> list[int]:
        return list(self.meta["lengths"])

    def cell(self, method: str, length: int) -> Aggregate | None:
        return next((a for a in self.aggregates if a.method == method and a.length == length), None)

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "meta": self.meta, "table": [a.to_dict() for a in self.aggregates],
                "plot": str(self.plot) if self.plot else None, "positions": [c.to_dict() for c in self.positions]}


def finish_run(sweep: Any, corpus: Corpus, run_id: str, new_cells: list[Cell], wall_s: float) -> EvalResult:
    """``sweep`` is the driver's state (out, spec, model_label, states, trained, device, dtype, world, warnings)."""
    out, spec, model_label, states, world = sweep.out, sweep.spec, sweep.model_label, sweep.states, sweep.world
    gathered = dist.all_gather(world, new_cells)
    # Only cells of this run, each with a finite loss, reach the table: read_cells checks both.
    by_key = {c.key: c for c in read_cells(out, run_id).cells} if spec.resume else {}
    by_key.update({c.key: c for c in gathered if c.finite})  # this run's numbers win over an older log line
    methods = [s.label for s in states]
    lengths = list(spec.lengths)
    cells = order_cells(list(by_key.values()), methods, lengths, [d.doc_id for d in corpus.documents])
    aggregates = tuple(summarize(cells, methods, lengths))
    meta = _meta(spec, model_label, states, corpus, sweep.trained, wall_s, sweep.device, sweep.dtype, world, len(gathered))
    meta["run"] = run_id
    meta["ships"] = ships(sweep.source.config)  # what as-is is beside none (None: the same), for recommend
    if sweep.engine is not None:
        meta["engine"] = engine_record(sweep.engine)
    meta["warnings"] = list(dict.fromkeys(sweep.warnings))
    plot = out / PLOT if aggregates else None
    positions = position_curves(cells, spec.bucket)
    if world.is_main:
        write_outputs(out, cells, {"meta": meta, "table": [a.to_dict() for a in aggregates],
                                   "positions": [c.to_dict() for c in positions]})
        if plot is not None:
            from ropectl.eval.tasks.ppl.plot import plot_positions, plot_ppl

            title = f"{model_label} · {corpus.name} · {spec.mode}"
            plot_ppl(list(aggregates), methods, sweep.trained, plot, title=title)
            if positions:
                plot_positions(positions, methods, sweep.trained, out / POSITIONS_PLOT, spec.mode, title=title)
    return EvalResult(out, meta, aggregates, tuple(cells), plot, tuple(positions))


def position_curves(cells: list[Cell], bucket: int) -> list[PositionCurve]:
    """Loss by position per (method, length), in the table's order."""
    found = curves(cells, bucket)
    order = {(c.method, c.length): i for i, c in enumerate(cells)}
    return sorted(found, key=lambda c: order[(c.method, c.length)])


def _meta(spec: EvalSpec, model_label: str, states: list[MethodState], corpus: Corpus, trained: int | None,
          wall_s: float, device: str, dtype: str, world: dist.World, new_cells: int) -> dict[str, Any]:
    return {
        "model": model_label,
        "dataset": corpus.name,
        "mode": spec.mode,
        "stride": spec.stride if spec.mode == "sliding" else None,
        "methods": [s.label for s in states],
        "method_params": {s.label: s.params() for s in states},
        "lengths": list(spec.lengths),
        "screened_out": list(spec.screened_out),  # scored at the shortest length only
        "trained_context": trained,
        "docs_total": len(corpus.documents),
        "docs_used": {str(n): len(corpus.usable(n)) for n in spec.lengths},
        "doc_tokens": {d.doc_id: d.n_tokens for d in corpus.documents},
        "dtype": dtype,
        "dtype_choice": _dtype_choice(spec.dtype, device),
        "device": device,
        "world_size": world.size,
        "chunk_size": spec.chunk_size,
        "bucket": spec.bucket,
        "batch_tokens": spec.batch_tokens,
        "new_cells": new_cells,
        "wall_s": round(wall_s, 2),
        "aggregation": "token-weighted: exp(sum NLL / sum tokens); s.e. across documents by the delta method",
        "versions": library_versions(),
    }


def _dtype_choice(asked: str, device: str) -> str:
    from ropectl.runtime.model import resolve_dtype_choice

    return resolve_dtype_choice(asked, device.split(":")[0])[1]
