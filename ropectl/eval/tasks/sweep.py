"""The sweep driver every task runs through (its contract with the task: ``ropectl.eval.tasks.contract``):
validate everything cheap first, load weights once, run the
task's planned forwards, log each finished cell at once, write results.

Order matters for users: bad flags, the output folder (locked: one writer), device, methods and the task's own
inputs are checked before the (slow) weight load; a run that fails before scoring anything removes the folder it
created. Ctrl-C and SIGTERM keep the logged cells (exit 130 and 143) and ``--resume`` skips them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ropectl.errors import MethodError
from ropectl.eval.engines import DEFAULT_ENGINE, check_launch, get_engine
from ropectl.eval.progress import Progress
from ropectl.eval.tasks import Task, get_task
from ropectl.eval.tasks.contract import Sweep
from ropectl.runtime import dist, lock
from ropectl.runtime.folder import check_output, missing_root, output_dir, remove_unused
from ropectl.runtime.interrupt import SweepInterrupted, Terminated, pause_for_tests, sigterm_as_interrupt
from ropectl.runtime.model import (
    method_states,
    model_source,
    resolve_device,
    resolve_dtype_choice,
    trained_context,
)


def run_sweep(task: Task | str, spec: Any, progress: Callable[[Progress], None] | None = None,
              engine: str = DEFAULT_ENGINE) -> Any:
    """Run ``task`` (an instance or a registered name) over ``spec``; the task's result (rank 0 writes files)."""
    task = get_task(task)() if isinstance(task, str) else task
    started = time.time()
    world = dist.world_from_env()
    check_launch(engine, world.size)  # an engine with its own workers (vLLM) refuses torchrun before it starts
    device = resolve_device(spec.device, world.local_rank)
    world = dist.init(world, device)
    clean, sweep = False, None
    try:
        with sigterm_as_interrupt():
            sweep = _prepare(task, spec, world, device, engine)
            new = _execute(task, sweep, progress)
            result = task.finish(sweep, new, time.time() - started)
        clean = True
        return result
    finally:
        if sweep is not None and sweep.lock is not None:
            sweep.lock.release()
        if sweep is not None and sweep.engine is not None:  # an engine with its own workers (vLLM) stops them
            sweep.engine.close()
        dist.finish(world, clean)


def _prepare(task: Task, spec: Any, world: dist.World, device: str, engine: str) -> Sweep:
    what = "run" if task.command == "eval-ppl" else f"{task.name} run"
    out = dist.broadcast(world, output_dir(spec.out, spec.resume, task.command, what))
    created = missing_root(out) if world.is_main else None
    dtype, why = resolve_dtype_choice(spec.dtype, device)
    sweep = Sweep(spec, world, out, device, dtype, why)
    if world.is_main:
        check_output(out, spec.model, spec.resume, spec.force)
        sweep.lock = lock.acquire(out)
    try:
        return _load(task, sweep, engine)
    except BaseException:
        if sweep.lock is not None:
            sweep.lock.release()
            sweep.lock = None
        remove_unused(out, created, task.run_file)
        raise


def _load(task: Task, sweep: Sweep, engine: str) -> Sweep:
    from ropectl.io.gguf_once import parse_once

    with parse_once():  # the config, tokenizer and weights of a GGUF from one parse of its metadata
        return _load_parsed(task, sweep, engine)


def _load_parsed(task: Task, sweep: Sweep, engine: str) -> Sweep:
    spec = sweep.spec
    if sweep.device.startswith("cuda"):
        import torch

        torch.cuda.set_device(sweep.device)
    check_factors(spec.methods, task.command)
    sweep.source = model_source(spec.model)
    sweep.states = method_states(sweep.source.config, spec.methods, spec.replace_existing)
    sweep.trained = trained_context(sweep.source.config)
    sweep.engine = get_engine(engine)(sweep.source, sweep.device, sweep.dtype, getattr(spec, "device_map", None),
                                      task.command)
    sweep.engine.check(sweep)  # the engine's own refusals (vLLM: parallel sizes, methods it cannot build)
    sweep.engine.load_tokenizer()
    identity = task.prepare(sweep)
    if sweep.world.is_main:
        task.write_run_file(sweep, identity)
    sweep.engine.load()
    return sweep


def check_factors(methods: tuple[Any, ...], command: str) -> None:
    """Sweeps take the factor in the method spec only: say so, rather than patch's --factor fix."""
    from ropectl.rope.methods import get_method

    for method in methods:
        if get_method(method.name).uses_factor and method.factor is None:
            raise MethodError(f"method '{method.name}' needs a factor",
                              f"write it into the method, e.g. -m {method.name}:4 ({command} has no --factor)")


def _execute(task: Task, sweep: Sweep, progress: Callable[[Progress], None] | None) -> list[Any]:
    engine = sweep.engine
    assert engine is not None
    done = task.done(sweep) if sweep.spec.resume else set()
    batches = task.plan(sweep, done)
    total = sum(b.tokens for b in batches)
    tracker = {"tokens": 0}
    new: list[Any] = []
    try:
        for i, batch in enumerate(batches):
            def on_tokens(n: int, i: int = i, label: str = batch.label) -> None:
                tracker["tokens"] += n
                if progress:
                    progress(Progress(tracker["tokens"], total, i, len(batches), label))

            if progress:
                progress(Progress(tracker["tokens"], total, i, len(batches), batch.label))
            engine.activate(batch.state)
            records = task.score(sweep, batch, on_tokens)
            if not getattr(task, "verifies_itself", False):
                engine.verify_after_forward(batch.state, batch.length)
            task.log(sweep, records)
            pause_for_tests(len(records))
            new += records
            if progress:
                progress(Progress(tracker["tokens"], total, i + 1, len(batches), batch.label))
    except KeyboardInterrupt as exc:
        raise SweepInterrupted(sweep.out, task.kept(sweep), isinstance(exc, Terminated), task.log_file) from None
    return new
