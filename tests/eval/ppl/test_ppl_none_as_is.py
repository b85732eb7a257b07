"""`none` and `as-is` in the evaluation commands on checkpoints that ship a scaling (the published Llama-3.1-8B form,
llama3 x8 from 8192; a yarn x2 model): `-m none` crashed there. Each row equals transformers' own loss on a model
loaded from a hand-written config: none from {"rope_type": "default", "rope_theta": theta}, as-is from the checkpoint
itself. The two references differ, so a row computed with the other RoPE would fail."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.eval.tasks.ppl import build_spec, run_eval
from tests.helpers.checkpoints import tiny_llama
from tests.helpers.eval_data import add_char_tokenizer
from tests.helpers.eval_reference import doc_tokens, load, naive_nll_sum
from tests.helpers.published import tiny_published

runner = CliRunner()
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0, "original_max_position_embeddings": 256}
# theta, original length, what as-is ships; weights large enough (std 0.1) that RoPE moves the loss
SHIPPED = {"llama3": (500000.0, 8192, "llama3 x8"), "yarn": (10000.0, 256, "yarn x2")}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("shipped-eval")
    return {"llama3": add_char_tokenizer(tiny_published("llama-3.1-8b-instruct", root / "llama31",
                                                        initializer_range=0.1)),
            "yarn": add_char_tokenizer(tiny_llama(root / "yarn", rope_parameters=YARN, max_position_embeddings=512,
                                                  initializer_range=0.1))}


def _unscaled(model: Path, folder: Path, theta: float):
    shutil.copytree(model, folder)
    config = json.loads((model / "config.json").read_text())
    for key in ("rope_scaling", "rope_theta"):
        config.pop(key, None)
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    (folder / "config.json").write_text(json.dumps(config))
    return load(folder)


@pytest.mark.parametrize("kind", ["llama3", "yarn"])
def test_none_and_as_is_rows_are_transformers_own_loss(models: dict[str, Path], kind: str, tiny_corpus: Path,
                                                        tmp_path: Path) -> None:
    theta, original, ships = SHIPPED[kind]
    spec = build_spec(dtype="fp32", model=str(models[kind]), dataset=str(tiny_corpus), methods=["none", "as-is"],
                      lengths="256", docs=2, out=tmp_path / "out", cache_dir=tmp_path / "cache")
    result = run_eval(spec)
    params = result.meta["method_params"]
    assert params["none"]["rope_type"] == "default" and params["none"]["max_position_embeddings"] == original
    assert params["as-is"]["rope_type"] == kind and result.meta["ships"] == ships
    references = {"none": _unscaled(models[kind], tmp_path / "unscaled", theta), "as-is": load(models[kind])}
    for cell in result.cells:
        ids = doc_tokens(result, cell.doc, spec)[: cell.length]
        want = {m: naive_nll_sum(model, ids) for m, model in references.items()}
        assert cell.nll_sum == pytest.approx(want[cell.method], rel=1e-6)
        other = next(m for m in want if m != cell.method)
        assert want[other] != pytest.approx(want[cell.method], rel=2e-5)  # the references tell the RoPEs apart
    assert len(result.cells) == 4


@pytest.mark.parametrize(("command", "length", "extra"), [
    ("eval-tasks", "400", ["-T", "niah_single_1", "-n", "1"]),
    ("eval-passkey", "300", ["-n", "1", "--depths", "0.5"]),
])
def test_trial_commands_take_none_and_as_is(models: dict[str, Path], isolated: Path, command: str, length: str,
                                            extra: list[str]) -> None:
    result = runner.invoke(app, [command, str(models["llama3"]), "-m", "none", "-m", "as-is", "-l", length, *extra,
                                 "--dtype", "fp32", "-o", str(isolated / "out"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["meta"]["methods"] == ["none", "as-is"]
    assert {row["method"] for row in data["table"]} == {"none", "as-is"}
