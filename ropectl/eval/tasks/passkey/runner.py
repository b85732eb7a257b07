"""``eval-passkey`` core, on eval-ppl's machinery: weights loaded once, a method switch rebuilds only the
rotary module, methods with equal rotary signatures share forwards, trials split across ranks, resume.

Everything cheap is checked before the weight load: flags, the output folder, methods, and every
prompt (a length too short for the prompt is an error before any forward).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.eval import dist
from ropectl.eval.interrupt import SweepInterrupted, pause_for_tests
from ropectl.eval.model import (
    LoadedModel,
    MethodState,
    activate,
    load_model,
    load_tokenizer,
    method_states,
    model_source,
    resolve_device,
    resolve_dtype_choice,
    trained_context,
    verify_after_forward,
)
from ropectl.eval.options import DEFAULT_OUT_ROOT
from ropectl.eval.progress import Progress
from ropectl.eval.tasks.passkey.prompt import PROMPT_VERSION, PromptBuilder, Trial
from ropectl.eval.tasks.passkey.results import PLOT, Accuracy, Row, accuracies, append_rows, read_rows, write_outputs
from ropectl.eval.tasks.passkey.spec import PasskeySpec
from ropectl.fsutil import atomic_write_text

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


def run_passkey(spec: PasskeySpec, progress: Callable[[Progress], None] | None = None) -> PasskeyResult:
    started = time.time()
    world = dist.world_from_env()
    device = resolve_device(spec.device, world.local_rank)
    world = dist.init(world, device)
    clean = False
    try:
        out = dist.broadcast(world, _output_dir(spec))
        path, kwargs, label, config = model_source(spec.model)
        states = method_states(config, spec.methods, spec.replace_existing)
        builder = PromptBuilder(load_tokenizer(path, kwargs), max(spec.lengths))
        units = [(n, d, i) for n in spec.lengths for d in spec.depths for i in range(spec.trials)]
        trials = {u: builder.trial(*u, spec.seed, spec.key_digits) for u in units}  # bad lengths fail here
        if world.is_main:
            _check_output(out, spec)  # creates the folder: only once every input is known to be good
        dtype, why = resolve_dtype_choice(spec.dtype, device)
        ident = {"model": label, "dtype": dtype, "seed": spec.seed, "key_digits": spec.key_digits,
                 "prompt": PROMPT_VERSION}
        if world.is_main:
            _write_run_file(out, ident, spec.resume)
        loaded = load_model(path, kwargs, builder.tok, device, dtype)
        done = {r.ident for r in read_rows(out)} if spec.resume else set()
        new = _execute(loaded, states, trials, world.shard(units), done, label, out, spec, progress)
        meta = _meta(spec, label, states, trained_context(config), dtype, why, device, world, len(new),
                     time.time() - started)
        result = _finish(out, spec, states, dist.all_gather(world, new), meta, world)
        clean = True
        return result
    finally:
        dist.finish(world, clean)


def _output_dir(spec: PasskeySpec) -> Path:
    if spec.out is not None:
        return Path(spec.out)
    if spec.resume:
        runs = sorted(DEFAULT_OUT_ROOT.glob("eval-passkey-*"))
        if not runs:
            raise UsageError("--resume found no earlier passkey run under runs/", "pass --out DIR of the run to resume")
        return runs[-1]
    return DEFAULT_OUT_ROOT / f"eval-passkey-{datetime.now():%Y%m%d-%H%M%S}"


def _check_output(out: Path, spec: PasskeySpec) -> None:
    from ropectl.eval.tasks.ppl.runner import _check_output as check_ppl_output

    check_ppl_output(out, spec)  # type: ignore[arg-type]  # same rules: resume, --force, writable


def _write_run_file(out: Path, ident: dict[str, Any], resume: bool) -> None:
    path = out / RUN_FILE
    if resume and path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        diff = [k for k in ident if old.get(k) != ident[k]]
        if diff:
            raise UsageError(f"--resume: '{out}' holds passkey results of a different run ({diff[0]}: "
                             f"{old.get(diff[0])!r} there, {ident[diff[0]]!r} now)",
                             "resume with the same model, dtype, --seed and --key-digits, or use a new --out")
    atomic_write_text(path, json.dumps(ident, indent=2) + "\n")


def plan_batches(states: list[MethodState], units: list[Unit], done: set[Any], batch_tokens: int,
                 ) -> list[tuple[MethodState, list[str], list[Unit]]]:
    """(state that runs, labels it fills, units) per forward; equal rotary signatures share one forward."""
    out = []
    for length in sorted({u[0] for u in units}):
        groups: dict[Any, list[MethodState]] = {}
        for state in states:
            groups.setdefault(state.signature(length), []).append(state)
        size = max(1, batch_tokens // length)
        for members in groups.values():
            labels = [s.label for s in members]
            todo = [u for u in units if u[0] == length and any((m, *u) not in done for m in labels)]
            out += [(members[0], labels, todo[i:i + size]) for i in range(0, len(todo), size)]
    order = {s.label: i for i, s in enumerate(states)}
    return sorted(out, key=lambda b: (order[b[0].label], b[2][0][0]))


def _execute(loaded: LoadedModel, states: list[MethodState], trials: dict[Unit, Trial], units: list[Unit],
             done: set[Any], label: str, out: Path, spec: PasskeySpec,
             progress: Callable[[Progress], None] | None) -> list[Row]:
    from ropectl.eval.tasks.passkey.score import score_trials

    batches = plan_batches(states, units, done, spec.batch_tokens)
    total = sum(len(b[2]) * b[2][0][0] for b in batches)
    tokens, new = 0, []
    try:
        for i, (state, labels, todo) in enumerate(batches):
            length = todo[0][0]
            current = f"{state.label} @ {length} · {len(todo)} trial{'s' * (len(todo) != 1)}"
            if progress:
                progress(Progress(tokens, total, i, len(batches), current))
            if loaded.active != state.label or state.length_dependent:
                activate(loaded, state)
            outcomes = score_trials(loaded.model, [trials[u] for u in todo], loaded.input_device())
            verify_after_forward(loaded, state, length)
            params = {s.label: s.params() for s in states}
            rows = [Row(label, m, *u, trials[u].key, o.success, o.answer_nll,
                        loaded.tokenizer.decode(list(o.predicted)), trials[u].key_at, params[m])
                    for u, o in zip(todo, outcomes, strict=True) for m in labels if (m, *u) not in done]
            append_rows(out, rows)
            pause_for_tests(len(rows))
            new += rows
            tokens += length * len(todo)
            if progress:
                progress(Progress(tokens, total, i + 1, len(batches), current))
    except KeyboardInterrupt:
        raise SweepInterrupted(out, len(read_rows(out))) from None
    return new


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
    import torch
    import transformers

    return {
        "model": label, "methods": [s.label for s in states], "method_params": {s.label: s.params() for s in states},
        "lengths": list(spec.lengths), "depths": list(spec.depths), "trials": spec.trials, "seed": spec.seed,
        "key_digits": spec.key_digits, "prompt": PROMPT_VERSION, "trained_context": trained, "dtype": dtype,
        "dtype_choice": why, "device": device, "world_size": world.size, "batch_tokens": spec.batch_tokens,
        "new_trials": new, "wall_s": round(wall_s, 2),
        "scoring": "teacher forcing: success when the argmax at every answer position is the answer token",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
    }
