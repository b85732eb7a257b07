"""What ``ropectl verify`` is asked (``VerifySpec``) and what it answers: one ``EngineRow`` per engine, each scored on
the same token ids as transformers (``VerifyResult``). docs/reference/verify.md documents the JSON keys."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SAME, DIFFERS, NOT_CHECKED = "same", "differs", "not checked"
REFERENCE_ROW = "reference"  # transformers' own row: what every other engine is scored against
DEFAULT_ENGINES = ("transformers", "vllm", "llama.cpp", "sglang")


@dataclass(frozen=True, kw_only=True)
class VerifySpec:
    model: str  # folder, .gguf or hub id
    target: int | None = None
    engines: tuple[str, ...] = DEFAULT_ENGINES
    serve: tuple[tuple[str, str], ...] = ()  # (engine, args) pairs from --serve
    gguf: str | None = None
    engine_python: tuple[tuple[str, str], ...] = ()
    samples: int = 2
    dataset: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    out: str | None = None

    def serve_args(self, engine: str) -> str | None:
        return dict(self.serve).get(engine)

    def python_for(self, engine: str) -> str | None:
        return dict(self.engine_python).get(engine)


@dataclass(frozen=True, kw_only=True)
class Band:
    """|ΔNLL| per token against transformers over the target positions (first, last]."""

    first: int
    last: int
    mean: float
    max: float
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.first, "to": self.last, "mean_abs_dnll": self.mean, "max_abs_dnll": self.max,
                "tokens": self.tokens}


@dataclass(frozen=True, kw_only=True)
class EngineRow:
    engine: str
    verdict: str  # "same" | "differs" | "not checked" | "reference" (transformers' own row)
    why: str
    ppl: dict[int, float]  # per length
    max_abs_dnll: float | None
    serve_line: str  # the command/flags this engine was run with
    mean_abs_dnll: float | None = None  # the largest band mean: what the verdict compares with the tolerance
    tolerance: float | None = None
    floor: float | None = None  # the engine's own floor (quantized weights), measured inside the trained window
    bands: tuple[Band, ...] = ()
    deltas: dict[int, list[float]] = field(default_factory=dict, compare=False)  # per position, for the plot

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "verdict": self.verdict, "why": self.why,
                "ppl": {str(k): _finite(v) for k, v in sorted(self.ppl.items())},
                "max_abs_dnll": self.max_abs_dnll, "mean_abs_dnll": self.mean_abs_dnll, "tolerance": self.tolerance,
                "floor": self.floor, "bands": [b.to_dict() for b in self.bands], "serve_line": self.serve_line}


@dataclass(frozen=True, kw_only=True)
class VerifyResult:
    rows: tuple[EngineRow, ...]
    lengths: tuple[int, ...]
    trained: int = 0
    target: int = 0
    documents: int = 0
    dtype: str = ""
    files: tuple[str, ...] = ()  # what was written under --out

    def row(self, engine: str) -> EngineRow:
        return next(r for r in self.rows if r.engine == engine)

    def to_dict(self) -> dict[str, Any]:
        return {"lengths": list(self.lengths), "trained": self.trained, "target": self.target,
                "documents": self.documents, "dtype": self.dtype, "rows": [r.to_dict() for r in self.rows],
                "files": list(self.files)}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
