"""What the trial tasks (passkey, the RULER-style tasks) share: batching trials of one length into forwards, methods
with equal rotary signatures filling their cells from one forward, and the run identity's engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ropectl.eval.tasks import Batch

if TYPE_CHECKING:
    from ropectl.eval.tasks.contract import Sweep
    from ropectl.runtime.model import MethodState

Unit = tuple[Any, ...]  # (length, ...): a trial's key, its length first


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



def trial_batches(sweep: Sweep, units: list[Unit], done: set[Any]) -> list[Batch]:
    """This rank's share of ``units`` as batches; ``done`` holds (method, *unit) keys already logged."""
    batches = plan_batches(sweep.states, sweep.world.shard(units), done, sweep.spec.batch_tokens)
    return [Batch(state, todo[0][0], len(todo) * todo[0][0],
                  f"{state.label} @ {todo[0][0]} · {len(todo)} trial{'s' * (len(todo) != 1)}", (labels, todo))
            for state, labels, todo in batches]


def with_engine(ident: dict[str, Any], engine: Any) -> dict[str, Any]:
    """Another engine's rows are other outcomes: its name joins the identity (transformers' stays as it was)."""
    return {**ident, **engine.identity()}


def write_run_file(sweep: Sweep, name: str, ident: dict[str, Any], what: str, fix: str) -> None:
    """Rank 0: refuse a --resume into a folder of another run (``what`` results; ``fix``), then write the identity."""
    from ropectl.eval import identity
    from ropectl.io.files import atomic_write_text
    from ropectl.output import dumps

    path = sweep.out / name
    if sweep.spec.resume:
        identity.check_flat_resume(path, ident, what, fix)
    atomic_write_text(path, dumps(ident, indent=2) + "\n")
