"""lm-eval tier: lm-evaluation-harness reads a patched folder's length as ropectl says, and scores it whole.

A tiny seeded Llama (trained 256, a character tokenizer) is patched three ways: yarn:4 and dynamic:4 in the default
write form, and yarn:4 with --max-positions trained. In the cached lm-eval venv, tests/compat/lm_eval_runner.py
(which never imports ropectl) loads each through lm-eval's ``HFLM``, reads ``max_length``, and scores one
loglikelihood request of the target length; transformers scores the same ids uncut as the oracle. Where patch
printed an lm-eval command, its --model_args are run as printed.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from ropectl_cli import ROOT, ropectl_json
from venv_runner import run_jobs

HERE = Path(__file__).parent
CACHE = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat"))
VENV = CACHE / "lmeval"
TRAINED, TARGET = 256, 1024
FOLDERS = {"yarn": ("-m", "yarn:4"), "dynamic": ("-m", "dynamic:4"), "yarn-trained": ("-m", "yarn:4",
                                                                                        "--max-positions", "trained")}
TOL = 1e-3
_STATE: dict[str, Any] = {}


def _printed_model_args(warnings: list[str]) -> str | None:
    line = next((w for w in warnings if w.startswith("lm-eval") and "run it with: lm_eval" in w), None)
    if line is None:
        return None
    args = shlex.split(line.split("run it with: ", 1)[1])
    return args[args.index("--model_args") + 1]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not (VENV / "bin" / "python").exists():
        pytest.skip(f"no lm-eval venv at {VENV}: run tests/compat/engine_venvs.sh lmeval (see docs, compat tiers)")
    if "results" in _STATE:
        return _STATE
    import sys

    sys.path.insert(0, str(ROOT))
    from tests.helpers.checkpoints import tiny_llama
    from tests.helpers.eval_data import add_char_tokenizer

    root = tmp_path_factory.mktemp("lm-eval")
    src = add_char_tokenizer(tiny_llama(root / "src", seed=5, max_position_embeddings=TRAINED))
    patched, jobs = {}, []
    for name, flags in FOLDERS.items():
        out = root / name
        patched[name] = ropectl_json("patch", str(src), *flags, "-o", str(out))
        jobs.append({"name": name, "model_args": f"pretrained={out}", "tokens": TARGET})
        printed = _printed_model_args(patched[name]["warnings"])
        if printed:
            jobs.append({"name": f"{name}/printed", "model_args": printed, "tokens": TARGET})
    results = run_jobs(VENV / "bin" / "python", HERE / "lm_eval_runner.py", jobs, root)
    _STATE.update(patched=patched, results=results)
    return _STATE


def _reader_view(patched: dict[str, Any]) -> dict[str, Any]:
    return next(v for v in patched["readers"] if v["engine"] == "lm-eval")


@pytest.mark.parametrize("name", FOLDERS)
def test_lm_eval_length_is_what_ropectl_says(name: str, measured: dict[str, Any]) -> None:
    got = measured["results"][name]
    assert "error" not in got, got["error"]
    assert got["max_length"] == _reader_view(measured["patched"][name])["serving_length"]


def test_default_yarn_folder_is_scored_whole(measured: dict[str, Any]) -> None:
    got = measured["results"]["yarn"]
    assert got["max_length"] == TARGET and got["request_tokens"] == TARGET
    assert abs(got["loglikelihood"] - got["whole"]) <= TOL
    assert _printed_model_args(measured["patched"]["yarn"]["warnings"]) is None  # nothing to pass


@pytest.mark.parametrize("name", ["dynamic", "yarn-trained"])
def test_printed_command_scores_whole_where_the_folder_truncates(name: str, measured: dict[str, Any]) -> None:
    bare, printed = measured["results"][name], measured["results"].get(f"{name}/printed")
    assert bare["max_length"] == TRAINED
    # negative control: lm-eval left-truncates the request to the folder's length, which changes the score
    # (by 0.05 nats on this tiny model, 50x the tolerance the whole requests meet)
    assert bare["request_tokens"] > bare["max_length"] + 1 and abs(bare["loglikelihood"] - bare["whole"]) > 10 * TOL
    assert printed is not None, "patch printed no lm-eval command for a folder lm-eval truncates"
    assert "error" not in printed, printed["error"]
    assert printed["max_length"] == TARGET and abs(printed["loglikelihood"] - printed["whole"]) <= TOL
