"""A toy evaluation task, written as one module: the walk-through of docs/contributing/add-a-task.md.

A cell is (method, length); its score is the mean next-token loss of a fixed counting sequence
(0, 1, 2, ... modulo the vocabulary) cut to that length. Everything else (output folder and lock, --resume
identity, method switching with the frequency check, progress, Ctrl-C / SIGTERM, ranks) is the sweep driver's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import UsageError
from ropectl.eval.engines.requests import SequenceNLL
from ropectl.eval.tasks import Batch, Sweep, register_task
from ropectl.io.files import atomic_write_text

LOG, RESULTS, RUN_FILE = "toy.jsonl", "toy.json", "toy-run.json"


@dataclass(frozen=True)
class ToySpec:
    """The fields the sweep driver reads, plus the task's own (none here)."""

    model: str | None = None
    methods: tuple[Any, ...] = ()  # ropectl.rope.methods.MethodSpec, e.g. from ropectl.eval.settings.parse_methods
    lengths: tuple[int, ...] = (32,)
    dtype: str = "fp32"
    device: str = "cpu"
    out: Path | None = None
    resume: bool = False
    force: bool = False
    replace_existing: bool = False


@register_task("toy")
class ToyTask:
    name, command, run_file, log_file, unit = "toy", "eval-toy", RUN_FILE, LOG, "cells"

    def prepare(self, sweep: Sweep) -> dict[str, Any]:
        # Check inputs here (before the weights load); return what makes two runs the same run.
        self.vocab = int(sweep.source.config["vocab_size"])
        return {"model": sweep.model_label, "dtype": sweep.dtype}

    def write_run_file(self, sweep: Sweep, identity: dict[str, Any]) -> None:
        path = sweep.out / RUN_FILE
        if sweep.spec.resume and path.is_file() and json.loads(path.read_text()) != identity:
            raise UsageError(f"--resume: '{sweep.out}' holds another toy run", "use a new --out")
        atomic_write_text(path, json.dumps(identity) + "\n")

    def done(self, sweep: Sweep) -> set[Any]:
        return {(r["method"], r["length"]) for r in read_log(sweep.out)}

    def plan(self, sweep: Sweep, done: set[Any]) -> list[Batch]:
        return [Batch(state, n, n, f"{state.label} @ {n}", None)
                for state in sweep.states for n in sweep.spec.lengths if (state.label, n) not in done]

    def score(self, sweep: Sweep, batch: Batch, on_tokens: Callable[[int], None]) -> list[dict[str, Any]]:
        # the method's RoPE is in place and checked; any engine answers the three scoring calls
        tokens = [i % self.vocab for i in range(batch.length)]
        [scored] = sweep.engine.sequence_nll([SequenceNLL(tokens, cuts=(batch.length,))])
        on_tokens(batch.length)
        return [{"method": batch.state.label, "length": batch.length, "loss": scored.sums[0] / scored.counts[0]}]

    def log(self, sweep: Sweep, records: list[dict[str, Any]]) -> None:
        with open(sweep.out / LOG, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)

    def kept(self, sweep: Sweep) -> int:
        return len(read_log(sweep.out))

    def finish(self, sweep: Sweep, new: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
        rows = {(r["method"], r["length"]): r for r in read_log(sweep.out)}  # every rank's cells, old and new
        table = [rows[(s.label, n)] for s in sweep.states for n in sweep.spec.lengths if (s.label, n) in rows]
        result = {"meta": {"model": sweep.model_label, "new_cells": len(new), "trained_context": sweep.trained},
                  "table": table}
        if sweep.world.is_main:
            atomic_write_text(sweep.out / RESULTS, json.dumps(result, indent=2) + "\n")
        return result


def read_log(out: Path) -> list[dict[str, Any]]:
    path = out / LOG
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
