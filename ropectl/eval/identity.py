"""What makes two runs the same run, so that --resume only ever mixes cells of one.

A run is the model (resolved path, or hub id and snapshot; the config's content; the weight files' names and
sizes), its tokenizer, the dataset (resolved files with sizes and mtimes, or hub id/config/split), the
documents taken, the mode, the stride and the dtype. Paths are compared resolved, so ``model``, ``./model/``
and ``/abs/model`` are one run. Every logged cell carries the hash of this identity.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ropectl.errors import UsageError
from ropectl.limits import MAX_LINE_BYTES
from ropectl.output import dumps

if TYPE_CHECKING:
    from ropectl.io.resolve import ResolvedModel

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".gguf")
FIELDS = ("model", "tokenizer", "dataset", "docs", "mode", "stride", "dtype")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


def model_identity(resolved: ResolvedModel) -> dict[str, Any]:
    path = resolved.path.resolve()
    if resolved.is_gguf:
        weights = [[path.name, path.stat().st_size]]
    else:
        weights = sorted([p.name, p.stat().st_size] for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    hub = resolved.kind == "hub"
    return {"source": resolved.source if hub else str(path), "revision": path.name if hub else None,
            "config": _digest(dict(resolved.config)), "weights": _digest(weights)}


def run_identity(model: dict[str, Any], tokenizer: str, dataset: dict[str, Any], docs: int | None, mode: str,
                 stride: int | None, dtype: str) -> dict[str, Any]:
    return {"model": model, "tokenizer": tokenizer, "dataset": dataset, "docs": docs, "mode": mode,
            "stride": stride, "dtype": dtype}


def run_id(identity: dict[str, Any]) -> str:
    return _digest(identity)


def check_resume(path: Path, identity: dict[str, Any]) -> list[str]:
    """Refuse a --resume into a folder of another run; a run.json that cannot be read is only a warning.

    Cells are matched by run hash one by one anyway, so an unreadable run.json cannot mix runs.
    """
    if not path.is_file():
        return []
    try:
        old = json.loads(path.read_bytes()[:MAX_LINE_BYTES].decode("utf-8"))
        old_identity = old["identity"]
        if not isinstance(old_identity, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError, RecursionError):
        return [f"'{path}' is unreadable or from an older ropectl; it is rewritten, and only cells logged "
                "with this run's identity are reused"]
    diff = next((k for k in FIELDS if old_identity.get(k) != identity.get(k)), None)
    if diff is not None:
        old, new = old_identity.get(diff), identity.get(diff)
        if isinstance(old, dict) and isinstance(new, dict):  # name the part that changed, e.g. model's config
            part = next((k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)), "")
            diff, old, new = f"{diff} {part}", old.get(part), new.get(part)
        raise UsageError(
            f"--resume: '{path.parent}' holds results of a different run ({diff}: "
            f"{_short(old)} there, {_short(new)} now)",
            "resume with the same model, tokenizer, dataset, --docs, mode, stride and dtype, or use a new --out")
    return []


def check_flat_resume(path: Path, identity: dict[str, Any], what: str, fix: str) -> None:
    """A run file that is the identity itself (eval-passkey's): refuse a --resume into a folder of another run."""
    if not path.is_file():
        return
    old = json.loads(path.read_text(encoding="utf-8"))
    diff = [k for k in identity if old.get(k) != identity[k]]
    if diff:
        raise UsageError(f"--resume: '{path.parent}' holds {what} of a different run ({diff[0]}: "
                         f"{old.get(diff[0])!r} there, {identity[diff[0]]!r} now)", fix)


def _short(value: Any) -> str:
    text = dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 200 else text[:197] + "..."
