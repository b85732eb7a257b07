"""``eval-ppl`` core: validate everything cheap first, load weights once, run the planned forwards, write results.

Order matters for users: bad flags, output folder, device, methods, RoPE presence and the corpus are
checked before the (slow) weight load. Each finished cell is appended to ``results.jsonl`` at once,
so an interrupted sweep keeps its work and ``--resume`` skips it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ropectl.errors import CheckpointError, DataError, OutputError, UsageError, pickle_refused
from ropectl.eval import dist, identity, lock
from ropectl.eval.interrupt import SweepInterrupted, Terminated, pause_for_tests, sigterm_as_interrupt
from ropectl.eval.lock import OutLock
from ropectl.eval.model import (
    DEFAULT_MODEL_LABEL,
    LoadedModel,
    MethodState,
    activate,
    default_model_path,
    load_model,
    load_tokenizer,
    method_states,
    resolve_device,
    resolve_dtype,
    verify_after_forward,
)
from ropectl.eval.options import DEFAULT_OUT_ROOT
from ropectl.eval.progress import Progress
from ropectl.eval.tasks.ppl.data import Corpus, load_corpus, make_source, tokenizer_identity
from ropectl.eval.tasks.ppl.plan import Job, batch_jobs, job_tokens, plan_jobs, run_batch
from ropectl.eval.tasks.ppl.results import Cell, append_cells, read_cells
from ropectl.eval.tasks.ppl.spec import EvalSpec
from ropectl.eval.tasks.ppl.summary import EvalResult, finish_run
from ropectl.fsutil import atomic_write_text, check_output_dir, why_not_writable
from ropectl.jsonio import dumps

RUN_FILE = "run.json"


@dataclass
class _Run:
    spec: EvalSpec
    world: dist.World
    out: Path
    device: str = "cpu"
    dtype: str = "fp32"
    model_label: str = ""
    states: list[MethodState] = field(default_factory=list)
    corpus: Corpus | None = None
    trained: int | None = None
    loaded: LoadedModel | None = None
    run_id: str = ""
    lock: OutLock | None = None
    warnings: list[str] = field(default_factory=list)


def run_eval(spec: EvalSpec, progress: Callable[[Progress], None] | None = None) -> EvalResult:
    """Run the sweep and return the aggregated result (rank 0 also writes the files)."""
    started = time.time()
    world = dist.world_from_env()
    device = resolve_device(spec.device, world.local_rank)
    world = dist.init(world, device)
    clean, run = False, None
    try:
        with sigterm_as_interrupt():
            run = _prepare(spec, world, device)
            cells = _execute(run, progress)
            result = finish_run(run, cells, world, time.time() - started)
        clean = True
        return result
    finally:
        if run is not None and run.lock is not None:
            run.lock.release()
        dist.finish(world, clean)


def _prepare(spec: EvalSpec, world: dist.World, device: str) -> _Run:
    out = dist.broadcast(world, _output_dir(spec))
    created = _missing_root(out) if world.is_main else None
    run = _Run(spec, world, out, device, resolve_dtype(spec.dtype, device))
    if world.is_main:
        _check_output(out, spec)
        run.lock = lock.acquire(out)
    try:
        return _load(run)
    except BaseException:
        if run.lock is not None:
            run.lock.release()
            run.lock = None
        if created is not None and out.is_dir() and {p.name for p in out.iterdir()} <= {RUN_FILE}:
            shutil.rmtree(out)  # a run that failed before scoring anything leaves no folder behind
            for parent in out.parents:
                if parent == created.parent or any(parent.iterdir()):
                    break
                parent.rmdir()
        raise


def _missing_root(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what mkdir -p would create)."""
    root = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        root = candidate
    return root


def _load(run: _Run) -> _Run:
    spec, world, device = run.spec, run.world, run.device
    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(device)
    _check_factors(spec)
    resolved, path, kwargs, run.model_label, config = _model_source(spec)
    run.states = method_states(config, spec.methods, spec.replace_existing)
    run.trained = _trained_context(config)
    tokenizer = _tokenizer(path, kwargs)
    source = make_source(spec.dataset, spec.split, spec.text_field)
    run.corpus = load_corpus(source, tokenizer, spec.docs, spec.cache_dir)
    _check_corpus(run.corpus, spec.lengths)
    ident = identity.run_identity(identity.model_identity(resolved), tokenizer_identity(tokenizer), source.identity,
                                  spec.docs, spec.mode, spec.stride, run.dtype)
    run.run_id = identity.run_id(ident)
    if world.is_main:
        _write_run_file(run, ident)
    run.loaded = _weights(path, kwargs, tokenizer, device, run.dtype, spec.device_map)
    return run


def _check_factors(spec: EvalSpec) -> None:
    """eval-ppl takes the factor in the method spec only: say so, rather than patch's --factor fix."""
    from ropectl.errors import MethodError
    from ropectl.rope.methods import get_method

    for method in spec.methods:
        if get_method(method.name).uses_factor and method.factor is None:
            raise MethodError(f"method '{method.name}' needs a factor",
                              f"write it into the method, e.g. -m {method.name}:4 (eval-ppl has no --factor)")


def _tokenizer(path: str, kwargs: dict[str, Any]) -> Any:
    try:
        return load_tokenizer(path, kwargs)
    except (OSError, ValueError, TypeError, KeyError) as exc:  # transformers' "no tokenizer here" varies by version
        raise CheckpointError(f"cannot load a tokenizer from '{path}' ({type(exc).__name__})",
                              "eval-ppl needs the model's tokenizer files (tokenizer.json or tokenizer.model) "
                              "beside config.json; copy them from the base model") from None


def _weights(path: str, kwargs: dict[str, Any], tokenizer: Any, device: str, dtype: str,
             device_map: str | None) -> LoadedModel:
    import pickle
    import warnings

    try:
        with warnings.catch_warnings():  # torch's note on a raw pickle's protocol would precede the one-line refusal
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return load_model(path, kwargs, tokenizer, device, dtype, device_map)
    except pickle.UnpicklingError as exc:
        raise pickle_refused(_weights_subject(path), exc) from None


def _weights_subject(path: str) -> str:
    """The pickle's own name where the folder has one .bin file (transformers does not say which it loaded)."""
    folder = Path(path)
    bins = sorted(folder.glob("*.bin")) if folder.is_dir() else []
    return f"'{bins[0].name}' in '{path}'" if len(bins) == 1 else f"the weights in '{path}'"


def _output_dir(spec: EvalSpec) -> Path:
    if spec.out is not None:
        return Path(spec.out)
    if spec.resume:
        runs = sorted(DEFAULT_OUT_ROOT.glob("eval-ppl-*"))
        if not runs:
            raise UsageError("--resume found no earlier run under runs/", "pass --out DIR of the run to resume")
        return runs[-1]
    return DEFAULT_OUT_ROOT / f"eval-ppl-{datetime.now():%Y%m%d-%H%M%S}"


def _check_output(out: Path, spec: EvalSpec) -> None:
    if out.is_dir():
        lock.check_free(out)  # a live writer is the problem to name, not a folder that is not empty
    model = Path(spec.model).expanduser() if spec.model else None
    model = model if model is not None and model.is_dir() else None  # results never go into the model folder
    if spec.resume and out.is_dir():
        check_output_dir(out, model, force=True, replaces=False)
        if not os.access(out, os.W_OK | os.X_OK):
            raise OutputError(f"cannot write to '{out}' ({why_not_writable(out)})", "choose a writable output folder")
        return
    check_output_dir(out, model, spec.force, replaces=False)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".ropectl-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"cannot write to '{out}' ({exc.strerror})", "choose a writable output folder") from None


def _model_source(spec: EvalSpec) -> tuple[Any, str, dict[str, Any], str, dict[str, Any]]:
    """from_pretrained arguments, a label for results, and the config transformers will build (no weights)."""
    from transformers import AutoConfig

    from ropectl.eval.model import quiet_transformers
    from ropectl.resolve import resolve_model

    quiet_transformers()
    resolved = resolve_model(spec.model or default_model_path(), weights=True)
    path, kwargs = resolved.from_pretrained_args()
    config = AutoConfig.from_pretrained(path, **kwargs).to_dict()
    return resolved, path, kwargs, spec.model or DEFAULT_MODEL_LABEL, config


def _trained_context(config: dict[str, Any]) -> int | None:
    """The pretraining context: ropectl's record of the unscaled base if patched, else what the config says."""
    from ropectl.schema.read import read_model_rope
    from ropectl.schema.record import Record

    model = read_model_rope(config)
    base = Record.from_json(model.record).base
    return (base.trained_context if base else None) or model.rope.trained_context


def _check_corpus(corpus: Corpus, lengths: tuple[int, ...]) -> None:
    longest = max(d.n_tokens for d in corpus.documents)
    missing = [n for n in lengths if not corpus.usable(n)]
    if missing:
        raise DataError(
            f"no document of '{corpus.name}' has {missing[0]} tokens ({len(corpus.documents)} documents, "
            f"the longest has {longest})",
            f"pass lengths of at most {longest}, more --docs, or a corpus with longer documents",
        )


def _write_run_file(run: _Run, ident: dict[str, Any]) -> None:
    path = run.out / RUN_FILE
    if run.spec.resume:
        run.warnings += identity.check_resume(path, ident)
    atomic_write_text(path, dumps({"run": run.run_id, "model": run.model_label, "identity": ident}, indent=2) + "\n")


def _execute(run: _Run, progress: Callable[[Progress], None] | None) -> list[Cell]:
    spec, loaded = run.spec, run.loaded
    assert loaded is not None and run.corpus is not None
    if spec.resume:
        found = read_cells(run.out, run.run_id)
        run.warnings += found.warnings()
        done = {c.key for c in found.cells}
    else:
        done = set()
    docs = run.world.shard(list(run.corpus.documents))
    jobs = plan_jobs(run.states, list(spec.lengths), docs, spec.mode, done)
    total = sum(job_tokens(j, spec.mode, spec.stride_for(j.length)) for j in jobs)
    tracker = {"tokens": 0}
    new_cells: list[Cell] = []
    batches = batch_jobs(jobs, spec.mode, spec.batch_tokens)
    try:
        for i, batch in enumerate(batches):
            new_cells += _run_one(run, loaded, batch, progress, tracker, total, i, len(batches))
    except KeyboardInterrupt as exc:
        raise SweepInterrupted(run.out, len(read_cells(run.out, run.run_id).cells),
                               isinstance(exc, Terminated)) from None
    return new_cells


def _run_one(run: _Run, loaded: LoadedModel, batch: list[Job], progress: Callable[[Progress], None] | None,
             tracker: dict[str, int], total: int, index: int, n_jobs: int) -> list[Cell]:
    spec, job = run.spec, batch[0]  # a batch shares one method and length
    if loaded.active != job.state.label or job.state.length_dependent:
        activate(loaded, job.state)  # fresh module: dynamic's growth-only cache must not leak across lengths

    def on_tokens(n: int) -> None:
        tracker["tokens"] += n
        if progress:
            progress(Progress(tracker["tokens"], total, index, n_jobs, job.label))

    if progress:
        progress(Progress(tracker["tokens"], total, index, n_jobs, job.label))
    stride = spec.stride_for(job.length)
    scores = run_batch(batch, loaded.model, loaded.input_device(), spec.mode, stride, spec.chunk_size, spec.bucket,
                       on_tokens)
    verify_after_forward(loaded, job.state, job.length)
    by_label = {s.label: s for s in run.states}
    cells = [Cell(run.model_label, label, length, one.doc.doc_id, sc.tokens, sc.nll_sum, spec.mode,
                  stride if spec.mode == "sliding" else None, by_label[label].params(), spec.bucket, sc.bucket_nll,
                  sc.bucket_tokens, run=run.run_id)
             for one, per_job in zip(batch, scores, strict=True) for (label, length), sc in per_job.items()]
    for bad in [c for c in cells if not c.finite]:  # a diverged forward is reported, never averaged in
        run.warnings.append(f"{bad.method} at {bad.length} tokens on '{bad.doc}' gave a non-finite loss; "
                            "left out of the table (try --dtype fp32)")
    cells = [c for c in cells if c.finite]
    append_cells(run.out, cells)
    pause_for_tests(len(cells))
    if progress:
        progress(Progress(tracker["tokens"], total, index + 1, n_jobs, job.label))
    return cells
