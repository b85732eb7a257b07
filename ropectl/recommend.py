"""``ropectl recommend``: which method and factor to ship for a target length, from eval-ppl + eval-passkey.

The rule, applied to every method in the results (``none`` included, so "do not scale" can win):
1. In-window regression: a method whose PPL at any measured length up to the trained context is more
   than ``max_regression`` above ``none``'s is out. Scaling must not make the model worse at what it
   already did (static YaRN enabled needlessly cost Qwen3 a benchmark drop from 39 to 26.5, Qwen3 #1567).
2. Among the rest, the highest passkey accuracy at the target length wins: PPL can improve while the
   model no longer uses its context. Methods without passkey results at the target rank after those with.
3. Then the lowest PPL at the target; then the smaller regression; then ``none`` before any method
   (on a tie, do not change what works); then the name (deterministic).
Pure functions over the results files: the same files always give the same answer.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import DataError, UsageError

REFERENCE = ("none", "as-is")
DEFAULT_MAX_REGRESSION = 0.05


@dataclass(frozen=True)
class Evidence:
    method: str
    ppl_target: float
    vs_none_target: float | None  # PPL / PPL(none) at the target
    regression: float | None  # max over lengths <= trained of PPL / PPL(none) - 1
    regression_at: int | None
    passkey: float | None  # accuracy at the target, all depths
    passkey_trials: int
    eligible: bool
    note: str
    rank: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Recommendation:
    target: int
    trained: int
    max_regression: float
    evidence: tuple[Evidence, ...]  # ranked, best first
    serve_with: tuple[str, ...] = ()  # the engines a method had to be served by as evaluated (empty: not asked)

    @property
    def winner(self) -> Evidence:
        return self.evidence[0]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "trained": self.trained, "max_regression": self.max_regression,
                "winner": self.winner.method, "serve_with": list(self.serve_with),
                "evidence": [e.to_dict() for e in self.evidence]}


def load_ppl(folder: Path) -> dict[str, Any]:
    return _read(Path(folder) / "summary.json", "eval-ppl", "--ppl")


def load_passkey(folder: Path) -> dict[str, Any]:
    return _read(Path(folder) / "passkey-summary.json", "eval-passkey", "--passkey")


def _read(path: Path, command: str, flag: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["meta"], data["table"]  # noqa: B018  # both must be there
        return data
    except FileNotFoundError:
        raise DataError(f"'{path}' does not exist", f"pass {flag} the --out folder of a finished `ropectl "
                        f"{command}` run") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise DataError(f"'{path}' is not a {command} summary", f"pass {flag} the --out folder of a finished "
                        f"`ropectl {command}` run") from None


def recommend(ppl: dict[str, Any], passkey: dict[str, Any] | None, target: int,
              max_regression: float = DEFAULT_MAX_REGRESSION, serve_with: tuple[str, ...] = ()) -> Recommendation:
    """Rank the measured methods; a method an engine in ``serve_with`` would not compute as evaluated is out."""
    meta = ppl["meta"]
    trained = meta.get("trained_context")
    if not trained:
        raise DataError("the PPL results do not say the model's trained context", "rerun eval-ppl with this ropectl")
    table = {(r["method"], int(r["length"])): float(r["ppl"]) for r in ppl["table"]}
    lengths = sorted({n for _, n in table})
    if target not in lengths:
        raise UsageError(f"the PPL results have no cell at --target-length {target} (measured: "
                         f"{', '.join(map(str, lengths))})", f"pass one of those, or rerun eval-ppl with --lengths "
                         f"including {target}")
    reference = next((m for m in REFERENCE if (m, target) in table), None)
    keys = _passkey_at(passkey, target)
    found = [_served(_evidence(m, table, lengths, trained, target, reference, keys.get(m), max_regression), serve_with)
             for m in meta["methods"] if (m, target) in table]
    ranked = sorted(found, key=_order)
    return Recommendation(target, trained, max_regression,
                          tuple(Evidence(**{**e.to_dict(), "rank": i + 1}) for i, e in enumerate(ranked)), serve_with)


def _served(e: Evidence, serve_with: tuple[str, ...]) -> Evidence:
    from ropectl.engines import why_not_served
    from ropectl.rope.methods import parse_spec

    if e.method in REFERENCE or not serve_with:
        return e
    why = why_not_served(parse_spec(e.method).name, serve_with)
    return e if why is None else Evidence(**{**e.to_dict(), "eligible": False, "note": f"not served as evaluated: {why}"})


def _order(e: Evidence) -> tuple[Any, ...]:
    return (not e.eligible, -(e.passkey if e.passkey is not None else -1.0), e.ppl_target,
            e.regression if e.regression is not None else math.inf, e.method not in REFERENCE, e.method)


def _passkey_at(passkey: dict[str, Any] | None, target: int) -> dict[str, tuple[float, int]]:
    if not passkey:
        return {}
    return {r["method"]: (float(r["accuracy"]), int(r["trials"])) for r in passkey.get("by_length", [])
            if int(r["length"]) == target}


def _evidence(method: str, table: dict[tuple[str, int], float], lengths: list[int], trained: int, target: int,
              reference: str | None, keys: tuple[float, int] | None, max_regression: float) -> Evidence:
    ppl = table[(method, target)]
    vs = ppl / table[(reference, target)] if reference else None
    window = [(table[(method, n)] / table[(reference, n)] - 1, n) for n in lengths
              if n <= trained and reference and (method, n) in table and (reference, n) in table]
    regression, at = max(window) if window else (None, None)
    eligible = regression is None or regression <= max_regression
    if not math.isfinite(ppl):
        eligible, note = False, "PPL at the target is not finite"
    elif not eligible:
        note = f"in-window regression {regression:+.1%} at {at} > {max_regression:.0%}"
    else:
        note = "" if regression is not None else "no in-window reference (no `none` at those lengths)"
    return Evidence(method, ppl, vs, regression, at, keys[0] if keys else None, keys[1] if keys else 0, eligible,
                    note)


def patch_commands(model: str, method: str, serve_with: tuple[str, ...] = ("vllm", "llama.cpp")) -> list[str]:
    """The commands that ship ``method``: write the checkpoint, and print the flags of the engines in
    ``serve_with`` (vLLM, llama.cpp) that take them."""
    import shlex

    path = Path(model)
    tag = method.replace(":", "").replace(",", "-").replace("=", "")
    # into the working folder, never beside the source (the embedded GGUF sits in site-packages)
    out = f"{path.stem}-{tag}.gguf" if path.suffix == ".gguf" else f"{path.name or model}-{tag}"
    from ropectl.engines.llama_cpp import cannot_express
    from ropectl.rope.methods import parse_spec

    base = ["ropectl", "patch", model, "-m", method]
    commands = [shlex.join([*base, "-o", out])]
    if "vllm" in serve_with:
        commands.append(shlex.join([*base, "--emit", "vllm"]))
    if "llama.cpp" in serve_with:
        why_not = cannot_express(parse_spec(method).name)
        # patch refuses --emit llama.cpp for a method llama.cpp lacks: say so instead of printing a failing command
        commands.append(f"# not for llama.cpp: {why_not}" if why_not else shlex.join([*base, "--emit", "llama.cpp"]))
    return commands
