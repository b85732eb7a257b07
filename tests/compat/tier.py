"""The transformers tier's shared parts: versions, running the runner in a version's venv, judging a cell."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

from cases import LENGTHS, Case

HERE = Path(__file__).parent
CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
REL_TOL = 2e-4  # decoded from float32 cos/sin
STAMP = ".ropectl-stamp"  # written by tf_venvs.sh once a venv is complete


def versions() -> list[str]:
    return [line.strip() for line in (HERE / "versions.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def venv_python(version: str) -> Path | None:
    venv = CACHE / f"tf-{version}"
    return venv / "bin" / "python" if (venv / STAMP).exists() else None


def run_version(version: str, cases: dict[str, Case], work: Path) -> dict[str, Any] | None:
    """The runner's JSON for every patched case, in that version's venv (None: no venv)."""
    python = venv_python(version)
    if python is None:
        return None
    jobs = work / f"jobs-{version}.json"
    jobs.write_text(json.dumps([{"folder": str(c.folder), "lengths": list(LENGTHS)}
                                for c in cases.values() if c.folder is not None]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([str(python), str(HERE / "runner.py"), str(jobs)], capture_output=True, text=True,
                          env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"runner failed in transformers {version}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def _layer(role: str, ropes: dict[str, Any]) -> Any:
    if role in ropes:
        return ropes[role]
    return ropes.get("main") or ropes.get("full_attention")


def mismatch(measured: dict[str, Any], ropes: dict[str, Any]) -> str | None:
    """Why the measured cos/sin differ from ``ropes`` at any length (None when they agree)."""
    from ropectl.rope.frequencies import compute_frequencies

    for length, roles in measured["lengths"].items():
        for role, got in roles.items():
            want = compute_frequencies(_layer(role, ropes), int(length))
            if len(got["inv_freq"]) != len(want.inv_freq):
                return f"{role}@{length}: {len(got['inv_freq'])} frequencies, expected {len(want.inv_freq)}"
            err = max(abs(g - w) / w for g, w in zip(got["inv_freq"], want.inv_freq))
            att = abs(got["attention"] - want.attention_factor)
            if err > REL_TOL or att > 1e-5 or not math.isfinite(err):
                return (f"{role}@{length}: inv_freq rel error {err:.2e}, attention {got['attention']:.6f} "
                        f"vs {want.attention_factor:.6f}")
    return None


def cell(version: str, case: Case, measured: dict[str, Any] | None) -> tuple[str, str]:
    """(code, why): P same as ropectl, W differs and patch warned naming the range, U differs unwarned,
    X the reader module predicted something else, R refused by ropectl, E an unpatched source that fails."""
    from ropectl.readers.transformers import predict, reader_for

    if case.folder is None:
        return "R", case.refused or ""
    assert measured is not None
    reader = reader_for(version)
    reading = predict(reader, case.config, version)
    if reading.error and "error" not in measured:
        return "X", f"predicted '{reading.error}' but it loaded"
    if not reading.error:
        if "error" in measured:
            return "X", f"predicted a load but: {measured['error']}"
        why = mismatch(measured, dict(reading.ropes))
        if why:
            return "X", f"prediction wrong: {why}"
    wrong = measured.get("error") or mismatch(measured, case.expected)
    if case.name.endswith("unpatched"):
        return ("E" if "error" in measured else "P"), wrong or ""
    if not wrong:
        return "P", ""
    return ("W" if any(names_version(w, version) for w in case.warnings) else "U"), wrong


def names_version(warning: str, version: str, engine: str = "transformers") -> bool:
    """Does a warning's leading label ("transformers 4.51 to <5.0", "transformers 5.9+", "... before 4.45",
    "... (every version)": consecutive releases that read alike are one line) cover ``version``?"""
    import re

    key = tuple(int(n) for n in re.findall(r"\d+", version)[:3])
    label = warning.split(":", 1)[0]
    if not label.startswith(f"{engine} "):
        return False
    span = label[len(engine) + 1:]
    bounds = [tuple(int(n) for n in re.findall(r"\d+", b)) for b in re.findall(r"[\d.]+", span)]
    if span == "(every version)":
        return True
    if span.startswith("before "):
        return key < bounds[0]
    if span.endswith("+"):
        return key >= bounds[0]
    return " to <" in span and bounds[0] <= key < bounds[1]
