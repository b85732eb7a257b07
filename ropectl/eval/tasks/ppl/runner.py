"""The ``ppl`` task (``eval-ppl``): perplexity of documents cut to each length, per RoPE method.

A cell is (method, length, document); a batch is documents of one length (truncate mode) or one document's
windows (sliding mode) sharing a forward, methods with equal rotary signatures filled from one forward. Cells are
aggregated token-weighted (``results``), with loss by position (``positions``) and plots (``plot``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropectl.errors import DataError
from ropectl.eval import identity
from ropectl.eval.progress import Progress
from ropectl.eval.tasks import Batch, register_task
from ropectl.eval.tasks.ppl.plan import Job, batch_jobs, by_serving, job_tokens, plan_jobs, run_batch
from ropectl.eval.tasks.ppl.results import LOG, Cell, append_cells, read_cells
from ropectl.eval.tasks.ppl.spec import EvalSpec
from ropectl.eval.tasks.ppl.summary import EvalResult, finish_run
from ropectl.eval.tasks.sweep import Sweep, run_sweep
from ropectl.io.files import atomic_write_text
from ropectl.output import dumps
from ropectl.runtime.corpus import Corpus, load_corpus, make_source, tokenizer_identity

RUN_FILE = "run.json"


@register_task("ppl")
class PplTask:
    name, command, run_file, log_file, unit = "ppl", "eval-ppl", RUN_FILE, LOG, "cells"

    def __init__(self) -> None:
        self.corpus: Corpus | None = None
        self.run_id = ""

    def prepare(self, sweep: Sweep) -> dict[str, Any]:
        spec, engine, source = sweep.spec, sweep.engine, sweep.source
        assert engine is not None and source is not None
        data = make_source(spec.dataset, spec.split, spec.text_field)
        self.corpus = load_corpus(data, engine.tokenizer, spec.docs, spec.cache_dir)
        check_corpus(self.corpus, spec.lengths)
        ident = identity.run_identity(identity.model_identity(source.resolved), tokenizer_identity(engine.tokenizer),
                                      data.identity, spec.docs, spec.mode, spec.stride, sweep.dtype)
        ident.update(engine.identity())  # another engine's cells are other numbers; transformers' ids stay as they were
        self.run_id = identity.run_id(ident)
        return ident

    def write_run_file(self, sweep: Sweep, ident: dict[str, Any]) -> None:
        path = sweep.out / RUN_FILE
        if sweep.spec.resume:
            sweep.warnings += identity.check_resume(path, ident)
        atomic_write_text(path, dumps({"run": self.run_id, "model": sweep.model_label, "identity": ident},
                                      indent=2) + "\n")

    def done(self, sweep: Sweep) -> set[Any]:
        found = read_cells(sweep.out, self.run_id)
        sweep.warnings += found.warnings()
        return {c.key for c in found.cells}

    def plan(self, sweep: Sweep, done: set[Any]) -> list[Batch]:
        spec = sweep.spec
        assert self.corpus is not None
        docs = sweep.world.shard(list(self.corpus.documents))
        shortest = min(spec.lengths)
        screened = {(m, n, d.doc_id) for m in spec.screened_out for n in spec.lengths if n > shortest for d in docs}
        jobs = plan_jobs(sweep.states, list(spec.lengths), docs, spec.mode, done | screened)
        batched = batch_jobs(jobs, spec.mode, spec.batch_tokens)
        if sweep.engine is not None and not sweep.engine.cheap_method_switch:
            batched = by_serving(batched, sweep.states)  # a method switch there reloads the weights
        return [Batch(b[0].state, b[0].length, sum(job_tokens(j, spec.mode, spec.stride_for(j.length)) for j in b),
                      b[0].label, b) for b in batched]

    def score(self, sweep: Sweep, batch: Batch, on_tokens: Callable[[int], None]) -> list[Cell]:
        spec, engine = sweep.spec, sweep.engine
        assert engine is not None
        jobs: list[Job] = batch.items  # a batch shares one method and length
        stride = spec.stride_for(batch.length)
        scores = run_batch(jobs, engine, spec.mode, stride, spec.bucket, on_tokens)
        by_label = {s.label: s for s in sweep.states}
        cells = [Cell(sweep.model_label, label, length, one.doc.doc_id, sc.tokens, sc.nll_sum, spec.mode,
                      stride if spec.mode == "sliding" else None, by_label[label].params(), spec.bucket,
                      sc.bucket_nll, sc.bucket_tokens, run=self.run_id)
                 for one, per_job in zip(jobs, scores, strict=True) for (label, length), sc in per_job.items()]
        for bad in [c for c in cells if not c.finite]:  # a diverged forward is reported, never averaged in
            sweep.warnings.append(f"{bad.method} at {bad.length} tokens on '{bad.doc}' gave a non-finite loss; "
                                  "left out of the table (try --dtype fp32)")
        return [c for c in cells if c.finite]

    def log(self, sweep: Sweep, records: list[Any]) -> None:
        append_cells(sweep.out, records)

    def kept(self, sweep: Sweep) -> int:
        return len(read_cells(sweep.out, self.run_id).cells)

    def finish(self, sweep: Sweep, new: list[Any], wall_s: float) -> EvalResult:
        assert self.corpus is not None
        return finish_run(sweep, self.corpus, self.run_id, new, wall_s)


def run_eval(spec: EvalSpec, progress: Callable[[Progress], None] | None = None) -> EvalResult:
    """Run the sweep and return the aggregated result (rank 0 also writes the files)."""
    return run_sweep(PplTask(), spec, progress, engine=spec.engine)


def check_corpus(corpus: Corpus, lengths: tuple[int, ...]) -> None:
    longest = max(d.n_tokens for d in corpus.documents)
    missing = [n for n in lengths if not corpus.usable(n)]
    if missing:
        raise DataError(
            f"no document of '{corpus.name}' has {missing[0]} tokens ({len(corpus.documents)} documents, "
            f"the longest has {longest})",
            f"pass lengths of at most {longest}, more --docs, or a corpus with longer documents",
        )
