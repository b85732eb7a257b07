"""``recommend`` without results folders: run the PPL sweep, then passkey on ``none`` and the best scaled
candidate by PPL, then rank. Sizes: the embedded default fits 10 minutes on 2 CPU cores; a MODEL gets a
generic sweep at factor target / trained context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ropectl.recommend import DEFAULT_MAX_REGRESSION, recommend

# The embedded demo (SmolLM2-135M, trained 8k): factor-2 candidates, measured up to a 10k target.
# On 2 AVX2 cores in fp32 a 10k forward takes about a minute: 3 PPL forwards + 2 x 2 passkey trials at 10k.
DEMO = {"methods": ["none", "yarn:2", "dynamic:2"], "lengths": ["1k", "2k", "4k", "8k"], "docs": 1,
        "passkey_lengths": ["2k", "4k"], "depths": [0.2, 0.8], "trials": 1}
CANDIDATES = ("yarn", "dynamic", "ntk", "linear")


@dataclass(frozen=True)
class Sweeps:
    ppl: Any  # EvalResult
    passkey: Any  # PasskeyResult
    recommendation: Any


def run_sweeps(model: str | None, target: int, factor: float | None, out: Path | None, dtype: str, device: str,
               max_regression: float = DEFAULT_MAX_REGRESSION,
               progress: Callable[[Any], None] | None = None, on_ppl: Callable[[Any], None] | None = None,
               serve_with: tuple[str, ...] = (), engine_options: dict[str, Any] | None = None) -> Sweeps:
    from ropectl.eval.model import model_source, trained_context
    from ropectl.eval.tasks.passkey import build_passkey_spec, run_passkey
    from ropectl.eval.tasks.ppl import build_spec, run_eval

    root = out or Path("runs") / f"recommend-{datetime.now():%Y%m%d-%H%M%S}"
    common = {"dtype": dtype, "device": device, **(engine_options or {})}  # engine_options: --engine vllm and its sizes
    if model is None and factor is None:
        ppl_spec = build_spec(methods=DEMO["methods"], lengths=[*DEMO["lengths"], target], docs=DEMO["docs"],
                              out=root / "ppl", **common)
        pk = {"lengths": [*DEMO["passkey_lengths"], target], "depths": DEMO["depths"], "trials": DEMO["trials"]}
    else:
        trained = trained_context(model_source(model).config) or target
        f = factor or max(1.0, target / trained)
        methods = ["none", *(f"{m}:{f:g}" for m in CANDIDATES)]
        inside = sorted({max(2, trained // 4), max(2, trained // 2), trained})
        ppl_spec = build_spec(model=model, methods=methods, lengths=[*inside, target], out=root / "ppl", **common)
        pk = {"lengths": [trained // 2, trained, target], "depths": [0.1, 0.5, 0.9], "trials": 3}
    ppl = run_eval(ppl_spec, progress)
    if on_ppl:
        on_ppl(ppl)
    first = recommend({"meta": ppl.meta, "table": [a.to_dict() for a in ppl.aggregates]}, None, target,
                      max_regression, serve_with)
    best = next((e.method for e in first.evidence if e.eligible and e.method != "none"), None)
    methods = ["none"] + ([best] if best else [])
    pk_spec = build_passkey_spec(model=model, methods=methods, out=root / "passkey", **pk, **common)
    passkey = run_passkey(pk_spec, progress)
    final = recommend({"meta": ppl.meta, "table": [a.to_dict() for a in ppl.aggregates]}, passkey.to_dict(), target,
                      max_regression, serve_with)
    return Sweeps(ppl, passkey, final)


