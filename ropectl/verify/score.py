"""One engine's part of a verify run, wherever it runs (in this process, or in another venv's Python through
``worker``): load the engine once, serve the checkpoint as a user does (``Engine.serve``), and score the given token
ids at each length through the evaluation engine protocol (``SequenceNLL``: per-token NLL, no logits kept); with
``floor``, also the unpatched model inside the trained window (``compare``'s floor).

The answer is plain JSON-able data, so the worker returns the same thing a local call does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ropectl.errors import RopectlError, UsageError


@dataclass(frozen=True, kw_only=True)
class Job:
    engine: str
    model: str  # what this engine loads: the folder, or the GGUF for an engine that loads GGUF files
    serve: str | None  # the user's own serving flags, verbatim
    lengths: tuple[int, ...]
    ids: tuple[tuple[int, ...], ...]  # per document, at least max(lengths) tokens
    trained: int
    target: int
    dtype: str
    device: str
    floor: bool = False
    method: Any = None  # a MethodSpec applied to the config (search's winner, not written): in-process only

    def to_dict(self) -> dict[str, Any]:
        if self.method is not None:
            raise RopectlError("a method applied on the fly cannot be sent to another Python",
                               "write the checkpoint and verify the folder")
        return {**{k: v for k, v in self.__dict__.items() if k != "method"}, "lengths": list(self.lengths),
                "ids": [list(d) for d in self.ids]}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Job:
        return Job(**{**data, "lengths": tuple(data["lengths"]), "ids": tuple(tuple(d) for d in data["ids"])})


class _Lengths:
    def __init__(self, lengths: tuple[int, ...]) -> None:
        self.lengths = lengths


class _Sweep:
    """What an engine's ``check`` reads: the lengths, the states, the trained context."""

    def __init__(self, lengths: tuple[int, ...], states: list[Any], trained: int) -> None:
        self.spec, self.states, self.trained, self.warnings = _Lengths(lengths), states, trained, []


def run_job(job: Job) -> dict[str, Any]:
    """{"serve_line", "nll": {length: per-document NLL lists}, "skipped": {length: why}, "floor": [...] | None,
    "notes"}; a refusal before any score raises (the caller's row says why)."""
    from ropectl.eval.engines import get_engine
    from ropectl.rope.methods import MethodSpec, unscaled_name
    from ropectl.runtime.model import method_states, model_source

    source = model_source(job.model)
    state = method_states(source.config, (job.method,) if job.method is not None else ())[0]
    engine = get_engine(job.engine)(source, job.device, job.dtype, None, "verify")
    unscaled = method_states(source.config, (MethodSpec(unscaled_name()),), replace_existing=True)[0] \
        if job.floor else None
    # no lengths: an engine's own per-length plan (vLLM's engine per length) is eval's; verify serves one line
    sweep = _Sweep((), [s for s in (state, unscaled) if s is not None], job.trained)
    try:
        engine.check(sweep)
        line = engine.serve(state, job.serve, job.target)
        engine.load()
        out: dict[str, Any] = {"serve_line": line, "nll": {}, "skipped": {}, "floor": None, "notes": sweep.warnings}
        for length in job.lengths:
            try:
                out["nll"][length] = _score(engine, state, job.ids, length)
            except UsageError as exc:  # a length past what this serving takes: the others still count
                out["skipped"][length] = exc.problem
        if unscaled is not None:
            out["floor"] = _score(engine, unscaled, job.ids, job.trained)
        return out
    finally:
        engine.close()


def _score(engine: Any, state: Any, ids: Sequence[Sequence[int]], length: int) -> list[list[float]]:
    from ropectl.eval.engines.requests import SequenceNLL

    engine.activate(state)
    got = engine.sequence_nll([SequenceNLL(list(doc[:length])) for doc in ids])
    engine.verify_after_forward(state, length)
    return [[float(x) for x in score.nll.tolist()] for score in got]


def normalized(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer read back from JSON: integer lengths again."""
    return {**answer, "nll": {int(k): v for k, v in answer.get("nll", {}).items()},
            "skipped": {int(k): v for k, v in answer.get("skipped", {}).items()}}
