"""A scaling method added by writing only its module: the CLI's help, patch --dry-run, patch, inspect and eval-ppl
all take it, with no other edit (docs/contributing/add-a-method.md walks through the same module).

The toy method divides every frequency by the square root of the factor; the expected frequencies are written
here from that formula, not computed by ropectl.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.checkpoints import tiny_llama
from tests.helpers.eval_data import add_char_tokenizer

TOY = '''"""stretch: every frequency divided by the square root of the factor (a toy)."""

from ropectl.rope.formulas import base_inv_freq, factor_of
from ropectl.rope.methods import ORIGINAL, Method, trained_length
from ropectl.rope.params import Frequencies, RopeParams


def build(base, factor, options):
    return RopeParams("stretch", base.rope_theta, base.rotary_dim, round(trained_length(base) * factor),
                      {"factor": factor})


def frequencies(p, seq_len):
    s = factor_of(p) ** 0.5
    return Frequencies(tuple(f / s for f in base_inv_freq(p.rope_theta, p.rotary_dim)), 1.0, p.rope_theta)


METHOD = Method("stretch", "toy: every frequency divided by sqrt(factor)", (ORIGINAL,), build, "stretch", frequencies)
'''


def _cli(tmp_path: Path, *args: str, plugin: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugins"), str(Path(__file__).parents[2])])}
    env.pop("ROPECTL_METHODS", None)
    if plugin:
        env["ROPECTL_METHODS"] = "toy_stretch"
    return subprocess.run([sys.executable, "-m", "ropectl", *args], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "toy_stretch.py").write_text(TOY)
    return add_char_tokenizer(tiny_llama(tmp_path / "m", max_position_embeddings=256))


@pytest.mark.slow
def test_help_and_patch_take_the_new_method(tmp_path: Path, model: Path) -> None:
    assert "stretch" in _cli(tmp_path, "patch", "--help").stdout
    assert "stretch" in _cli(tmp_path, "eval-ppl", "--help").stdout
    dry = _cli(tmp_path, "patch", str(model), "-m", "stretch:4", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert '"rope_type": "stretch"' in json.loads(dry.stdout)["diff"]
    out = _cli(tmp_path, "patch", str(model), "-m", "stretch:4", "-o", str(tmp_path / "out"), "--json")
    assert out.returncode == 0, out.stderr
    # transformers cannot build it: said, not hidden
    assert "has no rope type 'stretch'" in json.loads(out.stdout)["verification"]["skipped"]
    report = json.loads(_cli(tmp_path, "inspect", str(tmp_path / "out"), "--json").stdout)
    theta, dim = report["rope_theta"], report["rotary_dim"]
    by_hand = [theta ** (-2 * i / dim) / 2.0 for i in range(dim // 2)]  # sqrt(4) = 2
    assert report["rope_type"] == "stretch" and report["inv_freq"] == pytest.approx(by_hand, rel=1e-12)
    assert report["max_position_embeddings"] == 1024


@pytest.mark.slow
def test_eval_ppl_installs_the_new_method(tmp_path: Path, model: Path) -> None:
    """transformers cannot build 'stretch': eval-ppl installs its frequencies (and checks them) in the loaded model."""
    result = _cli(tmp_path, "eval-ppl", str(model), "-m", "none", "-m", "stretch:4", "-l", "128", "--docs", "1",
                  "-o", str(tmp_path / "ppl"), "--json")
    assert result.returncode == 0, result.stderr
    cells = {row["method"]: row for row in json.loads(result.stdout)["table"]}
    assert set(cells) == {"none", "stretch:4"}
    assert cells["stretch:4"]["nll_sum"] != cells["none"]["nll_sum"]  # the method reached the model


def test_without_the_module_the_method_is_unknown(tmp_path: Path, model: Path) -> None:
    result = _cli(tmp_path, "patch", str(model), "-m", "stretch:4", "--dry-run", plugin=False)
    assert result.returncode != 0 and "unknown method 'stretch'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
