"""SGLang's row: its forward does not run on a CPU, so verify reads what SGLang itself would build from the
checkpoint's config (its rotary embedding), not its logits: "rotary only"."""

from __future__ import annotations

from typing import Any

from ropectl.verify.spec import NOT_CHECKED, EngineRow

PIP = "pip install sglang (in a venv of its own: it pins torch), then --engine-python sglang=VENV/bin/python"


def rotary_row(name: str, spec: Any, plan: Any, python: str | None) -> EngineRow:
    why = ("rotary only: SGLang's forward does not run here, and its rotary check is not built into verify yet. "
           f"Fix: {PIP}")
    return EngineRow(engine=name, verdict=NOT_CHECKED, why=why, ppl={}, max_abs_dnll=None, serve_line="")
