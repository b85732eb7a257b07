"""Upper bounds on what untrusted input (config.json, flags, datasets) may make ropectl compute or allocate.

Each bound sits far above every released model, so it only ever stops a corrupt or hostile input before it
exhausts memory or overflows a float. docs/reference/errors-and-guarantees.md (What is bounded) lists them.
"""

from __future__ import annotations

MAX_HEAD_DIM = 65_536  # largest released head_dim is in the hundreds; inv_freq holds head_dim / 2 floats
MIN_ROTARY_DIM = 4  # two frequency pairs: NTK's exponent d / (d - 2) is undefined below that
MAX_HEADS = 1 << 20
MAX_POSITIONS = 1 << 40  # positions (max_position_embeddings, target lengths)
MAX_THETA = 1e15  # rope_theta; long-context releases stay below 1e10
MAX_FACTOR = 1e6  # scaling factor; beyond this, target lengths exceed MAX_POSITIONS for any real context
MAX_DATASET_BYTES = 1 << 30  # bytes read from one local dataset file
MAX_LINE_BYTES = 64 << 20  # one JSONL line / one results.jsonl line


# The range of each option several commands share, checked in one place so every command refuses it in the same
# words (the option names: ropectl/cli/flags.py SHARED).
def check_budget(minutes: float | None) -> None:
    """--budget: a positive number of minutes, or None (no limit)."""
    if minutes is not None and not minutes > 0:  # `not >` refuses NaN as well
        _refuse(f"--budget must be a positive number of minutes, got {minutes}", "pass e.g. --budget 30")


def check_max_regression(value: float) -> None:
    """--max-regression: a fraction, 0 or more."""
    if not value >= 0:
        _refuse(f"--max-regression must be 0 or more, got {value}", "pass e.g. --max-regression 0.01")


def check_paired_docs(docs: int | None) -> None:
    """--docs of a paired PPL comparison: two documents are the fewest an interval can be drawn from."""
    if docs is not None and docs < 2:
        _refuse(f"--docs must be at least 2 for a paired PPL interval, got {docs}", "pass e.g. --docs 8")


def _refuse(problem: str, fix: str) -> None:
    from ropectl.errors import UsageError

    raise UsageError(problem, fix)
