"""recommend on a checkpoint that ships a scaling: `none` (the unscaled base) and `as-is` (the checkpoint unchanged)
are two candidates, and the ship line names which one it means. On a yarn x2 checkpoint, `recommend -t 512 --ppl DIR`
used to end "winner: none — ship the model unchanged" although the none row had the scaling removed.

Results are written by hand here (PPL per document, so the paired rule sees exactly what is meant), or measured by
eval-ppl on a tiny checkpoint ropectl patched to yarn x2."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from tests.helpers.checkpoints import write_config
from tests.helpers.cli import run_printed

runner = CliRunner()
TRAINED, TARGET, DOCS = 256, 512, 8
JITTER = (0.0005, -0.0005, 0.0003, -0.0003, 0.0, 0.0002, -0.0002, 0.0)  # sums to 0 over the documents


def _results(folder: Path, ppl: dict[str, float], model: str = "./ft", docs: int = DOCS, **meta_extra: Any) -> Path:
    """An eval-ppl folder: each method's PPL at the target (20 in window, for every method), equal on every
    document but for a per-document difficulty shared by all methods and a small per-method jitter (so paired
    differences have a spread)."""
    folder.mkdir(parents=True)
    lengths = [128, TARGET]
    meta = {"model": model, "methods": list(ppl), "lengths": lengths, "trained_context": TRAINED, **meta_extra}
    cells = [{"method": m, "length": n, "doc": f"d{i}", "tokens": n,
              "nll_sum": n * (math.log(v if n == TARGET else 20.0) + 0.01 * (i - DOCS / 2) + JITTER[(i + k) % DOCS])}
             for k, (m, v) in enumerate(ppl.items()) for n in lengths for i in range(docs)]
    table = [{"method": m, "length": n, "ppl": math.exp(sum(c["nll_sum"] for c in cells if (c["method"], c["length"])
                                                          == (m, n)) / (n * docs))} for m in ppl for n in lengths]
    (folder / "summary.json").write_text(json.dumps({"meta": meta, "table": table}))
    (folder / "results.json").write_text(json.dumps({"meta": meta, "results": cells}))
    return folder


def _recommend(folder: Path, *extra: str) -> tuple[dict[str, Any], str]:
    args = ["recommend", "-t", str(TARGET), "--ppl", str(folder), *extra]
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    data = runner.invoke(app, [*args, "--json"])
    return json.loads(data.stdout), " ".join(text.stdout.split())


YARN2 = {"ships": "yarn x2", "method_params": {"as-is": {"rope_type": "yarn"}}}


def test_none_winning_on_a_scaled_checkpoint_ships_the_unscaled_base(tmp_path: Path) -> None:
    data, out = _recommend(_results(tmp_path / "ppl", {"none": 20.0, "as-is": 40.0, "yarn:2": 40.0}, **YARN2))
    assert data["winner"] == "none" and data["ships"] == "yarn x2"
    assert "winner: none — ship the unscaled base (the checkpoint ships yarn x2; none removes it) for 512" in out
    assert "ship the model unchanged" not in out
    assert data["commands"][0] == "ropectl patch ./ft -m none -o ft-none"
    assert "ropectl patch ./ft -m none --emit vllm" in data["commands"]


def test_as_is_winning_ships_the_checkpoint_unchanged(tmp_path: Path) -> None:
    data, out = _recommend(_results(tmp_path / "ppl", {"none": 40.0, "as-is": 20.0, "yarn:4": 30.0}, **YARN2))
    assert data["winner"] == "as-is"
    assert "winner: as-is — ship the checkpoint unchanged (as-is: yarn x2) for 512" in out
    # nothing to write; the serving lines are patch --emit without -m
    assert data["commands"] == ["ropectl patch ./ft --emit vllm", "ropectl patch ./ft --emit llama.cpp",
                                "# then check it in the serving engines: ropectl verify ./ft -t 512 --engine "
                                "transformers,vllm"]


def test_a_tie_of_none_and_as_is_ships_the_checkpoint_unchanged(tmp_path: Path) -> None:
    """none measures a little better on 2 documents, too few to separate: the simplest of the tied ships, and
    shipping the checkpoint unchanged is simpler than removing its scaling."""
    data, _ = _recommend(_results(tmp_path / "ppl", {"none": 20.0, "as-is": 20.2}, docs=2, **YARN2))
    assert data["leader"] == "none" and data["winner"] == "as-is" and not data["confident"]


def test_on_an_unscaled_checkpoint_none_is_the_model_unchanged(tmp_path: Path) -> None:
    data, out = _recommend(_results(tmp_path / "ppl", {"none": 20.0, "yarn:2": 40.0}, ships=None))
    assert data["winner"] == "none" and data["commands"] == []
    assert "ship the model unchanged for 512: it ships no scaling, so none is the checkpoint as it is (as-is)" in out


def test_results_that_do_not_say_never_claim_unchanged(tmp_path: Path) -> None:
    """Results written before eval-ppl recorded what the checkpoint ships, of a model no longer on disk."""
    data, out = _recommend(_results(tmp_path / "ppl", {"none": 20.0, "yarn:2": 40.0}, model="./gone"))
    assert data["ships"] == "unknown" and "ship the model unchanged" not in out
    assert "ship the unscaled base (the results do not say whether the checkpoint ships a scaling)" in out
    assert data["commands"][0] == "ropectl patch ./gone -m none -o gone-none"


def test_older_results_read_what_the_checkpoint_ships_from_its_config(tmp_path: Path) -> None:
    model = write_config(tmp_path / "ft", {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                           "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 512,
                                           "rope_scaling": {"rope_type": "yarn", "factor": 2.0,
                                                            "original_max_position_embeddings": 256}})
    data, out = _recommend(_results(tmp_path / "ppl", {"none": 20.0, "yarn:2": 40.0}, model=str(model)))
    assert data["ships"] == "yarn x2" and "the checkpoint ships yarn x2; none removes it" in out
    # the candidate that was not measured is named, with the fix
    assert "as-is (the checkpoint unchanged: it ships yarn x2) was not measured" in out and "-m as-is" in out


def test_as_is_is_served_as_its_shipped_rope_type(tmp_path: Path) -> None:
    """A checkpoint shipping dynamic: vLLM serves it static, so as-is is out for vLLM; transformers alone keeps it.
    (Control: the same results served by transformers.)"""
    folder = _results(tmp_path / "ppl", {"none": 40.0, "as-is": 20.0},
                      ships="dynamic x2", method_params={"as-is": {"rope_type": "dynamic"}})
    data, out = _recommend(folder, "--serve-with", "vllm")
    kept = next(e for e in data["evidence"] if e["method"] == "as-is")
    assert not kept["eligible"] and "not served as evaluated" in kept["note"] and data["winner"] == "none"
    data, _ = _recommend(folder, "--serve-with", "transformers")
    assert data["winner"] == "as-is"


@pytest.fixture(scope="module")
def yarn2(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama (trained 256) as `patch -m yarn:2` writes it: a checkpoint that ships yarn x2 with ropectl's
    record of its base."""
    out = tmp_path_factory.mktemp("yarn2") / "ft"
    result = runner.invoke(app, ["patch", str(tiny_model), "-m", "yarn:2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_the_plan_measures_as_is_beside_none_on_a_scaled_checkpoint(yarn2: Path, tiny_model: Path) -> None:
    from ropectl.recommend.plan import plan_lines
    from ropectl.recommend.run import Request, plan_grid

    plan, _, trained = plan_grid(Request(model=str(yarn2), target=1024, factor=4.0, serve_with=("transformers",)))
    assert trained == 256 and plan.methods[:2] == ("none", "as-is")
    assert any("as-is (the checkpoint unchanged: it ships yarn x2), each measured" in ln for ln in plan_lines(plan, None))
    # a target within the trained context (Llama 3.1 at 4k of 8k): nothing to scale, the two references alone
    # (the grid's factors x 1, 1.5, 2 of 128 / 256 are all <= 1, which no method takes)
    within, _, _ = plan_grid(Request(model=str(yarn2), target=128, serve_with=("transformers",)))
    assert within.methods == ("none", "as-is")
    plain, _, _ = plan_grid(Request(model=str(tiny_model), target=1024, factor=4.0, serve_with=("transformers",)))
    assert "as-is" not in plain.methods  # ships no scaling: as-is is none, measured once
    assert any("so as-is is none (measured once, as none)" in ln for ln in plan_lines(plain, None))


def test_measured_on_a_yarn2_checkpoint(yarn2: Path, tiny_corpus: Path, isolated: Path) -> None:
    """The finding, end to end: eval-ppl -m none, then recommend --ppl; then with as-is measured too."""
    def ppl(out: str, *methods: str) -> Path:
        args = ["eval-ppl", str(yarn2), *(a for m in methods for a in ("-m", m)), "-l", "512", "-n", "2", "-d",
                str(tiny_corpus), "--dtype", "fp32", "-o", out]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        return isolated / out

    data, out = _recommend(ppl("only-none", "none"))
    assert "winner: none — ship the unscaled base (the checkpoint ships yarn x2; none removes it)" in out
    assert f"ropectl patch {yarn2} -m none -o ft-none" in out and "was not measured" in out
    run_printed(data["commands"])  # the ship lines run: the unscaled base is written, and served
    written = json.loads((isolated / "ft-none" / "config.json").read_text())
    assert written["rope_parameters"]["rope_type"] == "default" and written["max_position_embeddings"] == TRAINED
    data, out = _recommend(ppl("both", "none", "as-is"))  # 2 documents: nothing separates, the simplest ships
    assert data["winner"] == "as-is" and "ship the checkpoint unchanged (as-is: yarn x2) for 512" in out
    assert all("-m" not in c.split() for c in data["commands"])
    assert len(run_printed(data["commands"])) == 2  # the two serving lines; then verify's line, run as it reads:
    checked = run_printed([data["commands"][-1].partition(": ")[2] + " --json"])[0]
    rows = {r["engine"]: r for r in json.loads(checked)["rows"]}
    assert set(rows) == {"transformers", "vllm"} and rows["transformers"]["verdict"] == "reference", rows
    # vLLM scores here where it imports; else its row says why, with the install line
    assert rows["vllm"]["verdict"] == "same" or "pip install" in rows["vllm"]["why"], rows["vllm"]
