"""A longrope spec naming its factors file (``-m longrope:2,file=F``, what ``search`` prints as best.spec) in every
command: patch, eval-ppl, eval-tasks and recommend; one parser (rope.methods.parse_spec + rope.choice)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.rope.choice import layer, to_method_spec
from ropectl.rope.frequencies import compute_frequencies
from ropectl.rope.methods import MethodSpec, apply_method, parse_spec
from ropectl.rope.params import RopeParams
from tests.helpers.cli import one_line

runner = CliRunner()
PAIRS = 8  # the tiny model: head_dim 16, trained context 256, theta 10000
LONG = [1.0, 1.0, 1.1, 1.3, 1.6, 1.9, 2.0, 2.0]


def factors_file(folder: Path, long: list[float] = LONG, name: str = "factors.json") -> Path:
    path = folder / name
    path.write_text(json.dumps({"short_factor": [1.0] * PAIRS, "long_factor": long}), encoding="utf-8")
    return path


def test_the_label_names_the_file_and_parses_back(tmp_path: Path) -> None:
    path = factors_file(tmp_path)
    spec = to_method_spec(layer(spec=f"longrope:2,file={path},attention_factor=1"))
    assert dict(spec.options)["long_factor"] == LONG and dict(spec.options)["short_factor"] == [1.0] * PAIRS
    assert spec.label == f"longrope:2,file={path},attention_factor=1"
    assert to_method_spec(layer(spec=spec.label)) == spec
    assert parse_spec(spec.label).file == str(path)  # recommend reads a results label back to its method
    # a parsed label (file not read yet) applies like the validated spec: the file is read when applied
    base = RopeParams("default", 10000.0, 16, 256)
    assert apply_method(base, parse_spec(spec.label)) == apply_method(base, spec)


def test_bad_file_specs_are_one_line(isolated: Path, tiny_model: Path) -> None:
    ok = factors_file(isolated)
    other = factors_file(isolated, [2.0] * PAIRS, "other.json")
    (isolated / "bad.json").write_text("{", encoding="utf-8")
    one_line(["patch", str(tiny_model), "-m", "yarn:2,file=x.json", "--dry-run"], "no file= option")
    one_line(["patch", str(tiny_model), "-m", "longrope:2,file=missing.json", "--dry-run"], "cannot read longrope file")
    one_line(["patch", str(tiny_model), "-m", "longrope:2,file=bad.json", "--dry-run"], "not valid JSON")
    one_line(["patch", str(tiny_model), "-m", f"longrope:2,file={ok}", "--longrope-file", str(other), "--dry-run"],
             "two values of longrope_file")
    one_line(["eval-ppl", str(tiny_model), "-m", "longrope:2,file=missing.json", "-l", "64"], "cannot read longrope file")
    assert not (isolated / "runs").exists()


def test_patch_writes_the_file_factors_that_transformers_builds(isolated: Path, tiny_model: Path) -> None:
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    path = factors_file(isolated)
    result = runner.invoke(app, ["patch", str(tiny_model), "-m", f"longrope:2,file={path}", "-o", "out"])
    assert result.exit_code == 0, result.output
    written = json.loads(Path("out/config.json").read_text())
    section = written["rope_parameters"]
    assert section["long_factor"] == LONG and section["original_max_position_embeddings"] == 256
    assert "factors.json" not in json.dumps(written)  # the config (and its record) never points at the file
    config = AutoConfig.from_pretrained("out")
    inv, attention = ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", 512)  # past the original: the long factors
    base = [10000.0 ** (-2 * i / 16) for i in range(PAIRS)]  # the unscaled frequencies, by hand
    want = [b / f for b, f in zip(base, LONG)]
    assert max(abs(a - b) / b for a, b in zip(inv.double().tolist(), want)) <= 1e-6
    assert float(attention) == pytest.approx(math.sqrt(1 + math.log(2) / math.log(256)), rel=1e-6)
    # the same spec through ropectl's own frequencies (what eval-ppl evaluates)
    spec = MethodSpec("longrope", 2.0, (("short_factor", [1.0] * PAIRS), ("long_factor", LONG)))
    ours = compute_frequencies(apply_method(RopeParams("default", 10000.0, 16, 256), spec), 512)
    assert max(abs(a - b) / b for a, b in zip(inv.double().tolist(), ours.inv_freq)) <= 1e-6


def test_patch_refuses_longrope_into_a_gguf(isolated: Path, smollm2: Path) -> None:
    path = isolated / "f.json"
    path.write_text(json.dumps({"short_factor": [1.0] * 32, "long_factor": [2.0] * 32}), encoding="utf-8")
    one_line(["patch", str(smollm2), "-m", f"longrope:2,file={path}", "-o", "out.gguf"], "longrope")
    assert not (isolated / "out.gguf").exists()


def test_eval_ppl_and_recommend_take_the_file_spec(isolated: Path, tiny_model: Path, tiny_corpus: Path) -> None:
    """Independent oracle: longrope with every long factor 2 and attention factor 1 is linear:2 past the trained
    context, so their PPL must be equal there."""
    path = factors_file(isolated, [2.0] * PAIRS)
    spec = f"longrope:2,file={path},attention_factor=1"
    result = runner.invoke(app, ["eval-ppl", str(tiny_model), "-d", str(tiny_corpus), "-m", "linear:2", "-m", spec,
                                 "-l", "300", "-n", "2", "--dtype", "fp32", "-o", "ppl", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["meta"]["methods"] == ["linear:2", spec]
    ppl = {r["method"]: r["ppl"] for r in data["table"]}
    assert ppl[spec] == pytest.approx(ppl["linear:2"], rel=1e-5)
    again = runner.invoke(app, ["recommend", "--ppl", "ppl", "-t", "300"])  # reads the labels back
    assert again.exit_code == 0, again.output
    assert spec in again.stdout


def test_eval_tasks_takes_the_file_spec(isolated: Path, tiny_model: Path) -> None:
    path = factors_file(isolated)
    spec = f"longrope:2,file={path}"
    result = runner.invoke(app, ["eval-tasks", str(tiny_model), "-T", "niah_single_1", "-m", spec, "-l", "400",
                                 "-n", "1", "-o", "tasks", "--json"])
    assert result.exit_code == 0, result.output
    meta = json.loads(result.stdout)["meta"]
    assert meta["methods"] == [spec] and meta["method_params"][spec]["rope_type"] == "longrope"
