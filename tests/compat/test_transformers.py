"""transformers compat tier: every tested version, every architecture, method and schema, run for real.

Each cell checks two things against the cos/sin a real forward pass used (tests/compat/runner.py in that
version's venv): the reader module predicted exactly what the version computed, and the version
computed ropectl's own RoPE, or ``patch`` warned naming that version's range.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cases import LENGTHS, Case, build, names  # noqa: E402

from ropectl.readers.transformers import predict, reader_for  # noqa: E402
from ropectl.rope.frequencies import compute_frequencies  # noqa: E402

HERE = Path(__file__).parent
VERSIONS = [v for v in (HERE / "versions.txt").read_text().split() if not v.startswith("#") and v[0].isdigit()]
CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
REL_TOL = 2e-4  # decoded from float32 cos/sin
_RESULTS: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="session")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    return {c.name: c for c in build(tmp_path_factory.mktemp("compat"))}


def _run(version: str, cases: dict[str, Case], tmp: Path) -> dict[str, Any]:
    if version not in _RESULTS:
        python = CACHE / f"tf-{version}" / "bin" / "python"
        if not python.exists():
            pytest.skip(f"no venv for transformers {version}: run tests/compat/tf_venvs.sh (make compat does)")
        jobs = tmp / f"jobs-{version}.json"
        jobs.write_text(json.dumps([{"folder": str(c.folder), "lengths": list(LENGTHS)}
                                    for c in cases.values() if c.folder is not None]))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
        proc = subprocess.run([str(python), str(HERE / "runner.py"), str(jobs)], capture_output=True, text=True,
                              env=env, timeout=1800)
        assert proc.returncode == 0, proc.stderr[-2000:]
        _RESULTS[version] = json.loads(proc.stdout)
    return _RESULTS[version]


def _layer(role: str, ropes: dict[str, Any]) -> Any:
    if role in ropes:
        return ropes[role]
    return ropes.get("main") or ropes.get("full_attention")


def mismatch(measured: dict[str, Any], ropes: dict[str, Any]) -> str | None:
    """Why the measured cos/sin differ from ``ropes`` at any length (None when they agree)."""
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


@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("version", VERSIONS)
def test_cell(version: str, name: str, cases: dict[str, Case], tmp_path_factory: pytest.TempPathFactory) -> None:
    case = cases[name]
    if case.folder is None:
        pytest.skip(f"refused by ropectl: {case.refused}")
    measured = _run(version, cases, tmp_path_factory.mktemp("jobs"))[str(case.folder)]
    reader = reader_for(version)
    reading = predict(reader, case.config, version)
    # 1. The reader module predicts what this version really does.
    if reading.error:
        assert "error" in measured, f"predicted '{reading.error}' but {version} loaded it"
    else:
        assert "error" not in measured, f"{version} failed: {measured.get('error')}; predicted a load"
        why = mismatch(measured, dict(reading.ropes))
        assert why is None, f"{version} computed other RoPE than the reader module predicts: {why}"
    # 2. It computes ropectl's own RoPE, or patch named this version's range in a warning.
    if name.endswith("unpatched"):
        return
    wrong = measured.get("error") or mismatch(measured, case.expected)
    if wrong:
        assert any(reader.label in w for w in case.warnings), (
            f"{version} differs from ropectl ({wrong}) and patch did not warn naming '{reader.label}': "
            f"{case.warnings}")
