"""SGLang's row: its forward does not run on a CPU, so verify checks what SGLang itself builds from the checkpoint
and the launch line (its server-argument parser, ModelConfig and ``get_rope``: ``sglang_rotary.py``, run by the
Python named by ``--engine-python sglang=PATH``), against ropectl's own frequencies at the target (transformers'
formula): cos and sin, times the attention factor, at positions across the lengths verify scores. "Rotary only":
no logits, so no PPL or |ΔNLL|."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from ropectl.errors import RopectlError
from ropectl.verify.spec import DIFFERS, NOT_CHECKED, SAME, EngineRow

PIP = "pip install sglang (in a venv of its own: it pins torch), then pass --engine-python sglang=VENV/bin/python"
TOL = 1e-5  # float32 cos/sin of the same formula (the SGLang tier's tolerance)
SCRIPT = Path(__file__).with_name("sglang_rotary.py")


def rotary_row(name: str, spec: Any, plan: Any, python: str | None) -> EngineRow:
    if not python:
        return _row(name, NOT_CHECKED, f"rotary only: SGLang's forward does not run here and its own code needs its "
                    f"own venv. Fix: {PIP}")
    try:
        line, positions, want = _plan(spec, plan)
        got = _run(python, line, positions)
    except RopectlError as exc:
        return _row(name, NOT_CHECKED, f"rotary only: {exc.problem}" + (f". Fix: {exc.fix}" if exc.fix else ""))
    if "error" in got or "rope_error" in got:
        return _row(name, NOT_CHECKED, f"rotary only: SGLang refused it: {got.get('error') or got['rope_error']}",
                    line)
    worst = max((abs(a - b) for part in ("cos", "sin") for ra, rb in zip(got[part], want[part], strict=True)
                 for a, b in zip(ra, rb, strict=True)), default=math.inf)
    if worst <= TOL and len(got["cos"][0]) == len(want["cos"][0]):
        return _row(name, SAME, f"rotary only ({got.get('kind')}): cos/sin at positions {positions} within "
                    f"{worst:.1e} of transformers' formula (tolerance {TOL:g}); no logits compared", line)
    return _row(name, DIFFERS, f"rotary only ({got.get('kind')}): cos/sin at positions {positions} differ from "
                f"transformers' formula by up to {worst:.3g} (tolerance {TOL:g})", line)


def _plan(spec: Any, plan: Any) -> tuple[str, list[int], dict[str, list[list[float]]]]:
    """The launch line (yours, or what ``patch --emit sglang`` prints), the positions, and ropectl's cos/sin there."""
    import shlex

    from ropectl.readers.sglang import emit
    from ropectl.rope.frequencies import compute_frequencies
    from ropectl.runtime.model import method_states, model_source
    from ropectl.schema.read import read_model_rope

    source = model_source(spec.model)
    if source.resolved.is_gguf:
        raise RopectlError("SGLang serves a Hugging Face folder, not a GGUF", "verify the folder the GGUF came from")
    state = method_states(source.config, ())[0]
    own = spec.serve_args("sglang")
    if own:
        line = f"python -m sglang.launch_server --model-path {shlex.quote(source.path)} {own}"
    else:
        model = read_model_rope(source.config)
        line = emit(source.path, model.rope, model.layer_ropes, model.partial_rotary_factor, plan.target,
                    source.config)[0]["command"]
    positions = sorted({0, 1, *(n - 1 for n in plan.lengths)})
    freqs = compute_frequencies(state.rope, seq_len=plan.target)
    scale = float(freqs.attention_factor)
    want = {"cos": [[math.cos(p * f) * scale for f in freqs.inv_freq] for p in positions],
            "sin": [[math.sin(p * f) * scale for f in freqs.inv_freq] for p in positions]}
    return line, positions, want


def _run(python: str, line: str, positions: list[int]) -> dict[str, Any]:
    from ropectl.errors import EngineError
    from ropectl.verify.remote import run_jobs

    path = Path(python).expanduser()
    if not path.is_file():
        raise EngineError(f"--engine-python sglang={python}: no such file", PIP)
    with tempfile.TemporaryDirectory(prefix="ropectl-verify-") as work:
        got = run_jobs(path, SCRIPT, [{"name": "job", "command": line, "positions": positions}], Path(work))
    return got["job"]


def _row(name: str, verdict: str, why: str, line: str = "") -> EngineRow:
    return EngineRow(engine=name, verdict=verdict, why=why, ppl={}, max_abs_dnll=None, serve_line=line)
