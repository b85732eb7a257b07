"""What a run reports while it trains: the progress callback, ``train_log.jsonl`` rows, evaluation on held-out
documents through the evaluation engine, the loss plot, and a stop requested by Ctrl-C / SIGTERM.

Log rows (one JSON object a line; ft benchmarks read them, keep the shape):
- per logging step: ``{step, tokens, loss, lr, tokens_per_s}``
- per evaluation: ``{step, tokens, eval: {LENGTH: {ppl, nll_sum, count, per_doc: [[nll_sum, count], ...]}}}``
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.io.files import atomic_write_text
from ropectl.output import dumps
from ropectl.runtime import append_jsonl, read_jsonl

LOG = "train_log.jsonl"
PLOT = "loss.png"


@dataclass(frozen=True)
class TrainProgress:
    step: int
    steps: int
    tokens: int
    loss: float | None
    lr: float | None
    tokens_per_s: float | None
    eta_s: float | None
    evaluation: dict[str, Any] | None = None
    message: str | None = None  # a line to show as is (the plan, before the first step)


def keep_rows_until(path: Path, step: int) -> None:
    """A resumed run continues the log from its checkpoint: rows past it (never saved) are dropped."""
    rows = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
    atomic_write_text(path, "".join(dumps(r) + "\n" for r in rows))


def evaluate(engine: Any, held_out: Sequence[tuple[str, Any]], lengths: Sequence[int]) -> dict[str, Any]:
    """Per length: the held-out documents' first LENGTH tokens scored by the engine's ``sequence_nll`` (documents
    shorter than LENGTH are skipped at that length); PPL = exp(total NLL / total count)."""
    from ropectl.eval.engines.requests import SequenceNLL

    out: dict[str, Any] = {}
    for length in lengths:
        per_doc = []
        for _, tokens in held_out:
            if len(tokens) >= length:
                score = engine.sequence_nll([SequenceNLL(tuple(int(t) for t in tokens[:length]), cuts=(length,))])[0]
                per_doc.append([score.sums[0], score.counts[0]])
        nll, count = sum(d[0] for d in per_doc), sum(d[1] for d in per_doc)
        out[str(length)] = {"ppl": math.exp(nll / count) if count else None, "nll_sum": nll, "count": count,
                            "per_doc": per_doc}
    return out


def make_callback(*, log: Path | None, tokens_per_step: int, steps: int, on_progress: Callable[[Any], None] | None,
                  evaluate_now: Callable[[], dict[str, Any]] | None, eval_every: int | None,
                  stop_requested: Callable[[], bool], start_step: int) -> Any:
    """A transformers TrainerCallback doing the above (log is None on ranks other than 0)."""
    from transformers import TrainerCallback

    class Monitor(TrainerCallback):
        def __init__(self) -> None:
            self.clock = time.perf_counter()
            self.trained_s = 0.0  # wall time in training steps only (evaluation excluded from tokens/s)
            self.done = start_step

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if evaluate_now is not None and state.global_step == 0:
                self._evaluate(state)  # step 0: the zero-shot patched model
            self.clock = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            self.trained_s += time.perf_counter() - self.clock
            due = eval_every and (state.global_step % eval_every == 0 or state.global_step == steps)
            if evaluate_now is not None and due:
                self._evaluate(state)
            if stop_requested():
                control.should_save = True
                control.should_training_stop = True
            if state.global_step >= steps:  # the last step is kept too: a failed or interrupted write resumes
                control.should_save = True
            self.clock = time.perf_counter()
            return control

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            logs = logs or {}
            if "loss" not in logs:
                return
            step = state.global_step
            rate = (step - self.done) * tokens_per_step / self.trained_s if self.trained_s > 0 else None
            row = {"step": step, "tokens": step * tokens_per_step, "loss": float(logs["loss"]),
                   "lr": float(logs.get("learning_rate", 0.0)), "tokens_per_s": rate}
            if log is not None:
                append_jsonl(log, [row])
            if on_progress is not None:
                eta = (steps - step) * tokens_per_step / rate if rate else None
                on_progress(TrainProgress(step, steps, row["tokens"], row["loss"], row["lr"], rate, eta))

        def _evaluate(self, state: Any) -> None:
            assert evaluate_now is not None
            row = {"step": state.global_step, "tokens": state.global_step * tokens_per_step, "eval": evaluate_now()}
            if log is not None:
                append_jsonl(log, [row])
            if on_progress is not None:
                on_progress(TrainProgress(state.global_step, steps, row["tokens"], None, None, None, None, row["eval"]))

    return Monitor()


def plot_loss(log: Path, out: Path) -> None:
    """Training loss against step, and held-out PPL per length against step where the log has evaluations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ropectl.io.files import save_figure

    rows = read_jsonl(log)
    losses = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    evals = [r for r in rows if "eval" in r]
    fig, axes = plt.subplots(1, 2 if evals else 1, figsize=(10 if evals else 5, 3.5), squeeze=False)
    ax = axes[0][0]
    ax.plot([s for s, _ in losses], [v for _, v in losses])
    ax.set(xlabel="step", ylabel="training loss", title="loss")
    if evals:
        ax = axes[0][1]
        for length in evals[0]["eval"]:
            points = [(r["step"], r["eval"][length]["ppl"]) for r in evals if r["eval"].get(length, {}).get("ppl")]
            ax.plot([s for s, _ in points], [p for _, p in points], marker="o", label=f"PPL @ {length}")
        ax.set(xlabel="step", ylabel="held-out PPL", title="held-out perplexity", yscale="log")
        ax.legend()
    fig.tight_layout()
    save_figure(fig, out)
