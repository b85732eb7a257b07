"""The config matrix's `--emit vllm` cells served by vLLM itself: the default suite's table
(tests/helpers/config_matrix_table.py) read against the engine, for every published config in tests/fixtures/configs.

Each config runs as its tiny copy (tests/helpers/published.py; config only: vLLM builds the model class, no weights).
In the cached vLLM venv, tests/compat/vllm_rope_runner.py (never importing ropectl) builds it with vLLM's own
ModelConfig and model class and reads the cos/sin of every rotary embedding; transformers' rotary class on the folder
ropectl wrote (`patch -o`, or the folder itself for the checkpoint as it is) is the oracle.
- A cell the table says works: `patch --emit vllm` prints overrides, vLLM builds them at the target length, and its
  cos/sin are transformers' unless ropectl warned that this vLLM computes other RoPE.
- A cell the table says is refused: ropectl refused, and vLLM would not have computed the scaling: served the folder
  patch writes, vLLM builds the RoPE it builds for the unpatched folder (dual chunk attention drops rope_scaling).
  vLLM's CPU build cannot build the dual-chunk rotary embedding (it allocates its caches on CUDA): there both builds
  fail alike and only ropectl's refusal is checked; on a GPU machine the comparison runs.
Pending cells are strict xfails, as in the default suite.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from ropectl_cli import ropectl_try  # noqa: E402
from venv_runner import run_jobs  # noqa: E402

from tests.helpers.config_matrix import AS_IS, Cell, scaling, spec  # noqa: E402
from tests.helpers.config_matrix_table import Pending, Refused, expected  # noqa: E402
from tests.helpers.published import names, published, tiny_config  # noqa: E402

CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
VENV = CACHE / "vllm"
TOL = 1e-4  # float32 cos/sin from two implementations
CELLS = [Cell(name, "emit", "vllm", method) for name in names() for method in (scaling(name), AS_IS)]
_STATE: dict[str, Any] = {}


def _param(cell: Cell) -> Any:
    outcome = expected(cell)
    marks = [pytest.mark.xfail(strict=True, reason=outcome.bug)] if isinstance(outcome, Pending) else []
    return pytest.param(cell, id=cell.id, marks=marks)


def _method_args(cell: Cell) -> list[str]:
    from tests.helpers.config_matrix import REPLACES

    if cell.method == AS_IS:
        return []
    return ["-m", spec(cell.method, cell.config), *(["--replace-existing"] if cell.config in REPLACES else [])]


def _case(root: Path, cell: Cell) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    src = root / "src" / cell.config
    if not src.exists():
        src.mkdir(parents=True)
        (src / "config.json").write_text(json.dumps(tiny_config(published(cell.config)), indent=2))
    args = _method_args(cell)
    code, emitted, err = ropectl_try("patch", str(src), *args, "--emit", "vllm")
    out = root / "out" / cell.id
    written = cell.method == AS_IS or ropectl_try("patch", str(src), *args, "-o", str(out))[0] == 0
    reference = str(src if cell.method == AS_IS else out)
    case = {"code": code, "emitted": emitted, "err": err, "written": written}
    jobs = [{"name": f"{cell.id}/bare", "model": str(src), "reference": str(src)}]
    if emitted is not None and written:
        jobs.append({"name": f"{cell.id}/emit", "model": str(src), "reference": reference,
                     "hf_overrides": emitted["emit"]["hf_overrides"],
                     "max_model_len": emitted["emit"].get("max_model_len")})
    if cell.method != AS_IS and written:  # what vLLM serves from the folder patch writes
        jobs.append({"name": f"{cell.id}/folder", "model": reference, "reference": reference})
    return case, jobs


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not (VENV / "bin" / "python").exists():
        pytest.skip(f"no vLLM venv at {VENV}: run tests/compat/engine_venvs.sh (see docs, compat tiers)")
    if "results" not in _STATE:
        root = tmp_path_factory.mktemp("matrix-vllm")
        cases, jobs = {}, []
        for cell in CELLS:
            cases[cell], more = _case(root, cell)
            jobs += [j for j in more if j["name"] not in {k["name"] for k in jobs}]
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONPATH": str(HERE / "stand_in")}
        _STATE.update(cases=cases, results=run_jobs(VENV / "bin" / "python", HERE / "vllm_rope_runner.py", jobs,
                                                     root, env))
    return _STATE


NO_ACCELERATOR = "Cannot access accelerator device"  # vLLM's CPU build building dual chunk attention's caches


def _covers_newest(warning: str) -> bool:
    """A vLLM warning whose version span includes the release this tier runs (the newest)."""
    label = warning.split(":", 1)[0]
    return label.startswith("vLLM") and (label.endswith("+") or label == "vLLM (every version)")


def _rows(got: dict[str, Any]) -> list[tuple[str, list[list[float]]]]:
    return [(part, row) for rope in got["ropes"] for part in ("cos", "sin") for row in rope[part]]


def _max_diff(got: dict[str, Any], want: dict[str, Any] | None = None) -> float:
    """Largest |cos/sin| difference: vLLM's rotary embeddings against transformers' (``want`` None) for their layers,
    or against another vLLM build of the same model."""
    worst = 0.0
    if want is not None:
        for (_, a_row), (_, b_row) in zip(_rows(got), _rows(want), strict=True):
            worst = max(worst, max(abs(a - b) for a, b in zip(a_row, b_row, strict=True)))
        return worst
    hf = got["hf"]
    for rope in got["ropes"]:
        types = hf["layer_types"]
        layer = types[rope["layers"][0]] if types and rope["layers"] and types[rope["layers"][0]] in hf else "main"
        for part in ("cos", "sin"):
            for a_row, b_row in zip(rope[part], hf[layer][part]):
                assert len(a_row) == len(b_row), f"{len(a_row)} vs {len(b_row)} frequencies"
                worst = max(worst, max(abs(a - b) for a, b in zip(a_row, b_row)))
    return worst


@pytest.mark.parametrize("cell", [_param(c) for c in CELLS])
def test_emit_cell_is_what_vllm_serves(cell: Cell, measured: dict[str, Any]) -> None:
    outcome = expected(cell)
    outcome = outcome.after if isinstance(outcome, Pending) else outcome
    case, results = measured["cases"][cell], measured["results"]
    if isinstance(outcome, Refused):
        assert case["code"] != 0, "the table says refused, but --emit vllm printed overrides"
        folder, bare = results.get(f"{cell.id}/folder"), results[f"{cell.id}/bare"]
        if folder is not None and "error" not in folder and "error" not in bare:  # the engine's side of the refusal
            assert _max_diff(folder, bare) <= TOL, "vLLM computes the scaling ropectl refused to print"
        return
    assert case["code"] == 0, case["err"][-1500:]
    got = results[f"{cell.id}/emit"]
    if NO_ACCELERATOR in got.get("error", ""):
        pytest.skip("vLLM's CPU build cannot build this model's rotary embedding (dual chunk attention: CUDA caches)")
    assert "error" not in got, got["error"]
    if not got.get("ropes"):
        pytest.skip("vLLM holds no rotary module of its own here (GLM runs on its Transformers backend)")
    warned = any("computes other RoPE" in w and _covers_newest(w) for w in case["emitted"]["warnings"])
    diff = _max_diff(got)
    print(f"{cell.id}: max |cos/sin diff| vLLM vs transformers {diff:.1e}; warned: {warned}")
    assert (diff > TOL) == warned
