"""The fine-tuned checkpoint as the other commands take it: eval-ppl and inspect on each layout, and recommend
comparing the patched and the fine-tuned model (``recommend --ppl PATCHED --ppl FINETUNED``)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tests.helpers import finetuned as ft
from tests.helpers.eval_data import build


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ft-cli")
    return ft.write_layouts(root, build("llama", root / "src", tie_word_embeddings=True))


RUNS = ("adapter", "merged", "base")  # eval-ppl on each written folder, and on the adapter's base (not fine-tuned)


def _invoke(*args: str) -> Any:
    from ropectl.cli.app import app
    from tests.helpers.cli import runner

    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def ppl_runs(written: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """eval-ppl at 64 and 300 tokens on 8 documents of 400 characters, per folder: {name: (out folder, table)}."""
    from tests.helpers.eval_data import write_corpus

    root = tmp_path_factory.mktemp("ft-ppl")
    corpus = write_corpus(root / "corpus", [400] * 8)
    folders = {"adapter": written["adapter"][0].path, "merged": written["merged"][0].path,
               "base": written["adapter"][0].base}
    out = {}
    for name in RUNS:
        result = _invoke("eval-ppl", str(folders[name]), "-l", "64,300", "-d", str(corpus), "-o", str(root / name),
                         "--dtype", "fp32", "--cache-dir", str(root / "cache"), "--json")
        assert result.exit_code == 0, result.output
        out[name] = (root / name, {(r["method"], r["length"]): r for r in json.loads(result.stdout)["table"]})
    return {"runs": out, "corpus": corpus, "root": root, "folders": folders}


def test_eval_ppl_and_inspect_take_the_written_folders(written: dict[str, Any], ppl_runs: dict[str, Any]) -> None:
    """eval-ppl scores the adapter folder as the fine-tuned model (base + adapter: equal to the merged folder of the
    same LoRA), not as its base; inspect reads the patched RoPE from either."""
    scores = {name: table for name, (_, table) in ppl_runs["runs"].items()}
    for key, row in scores["merged"].items():
        same = abs(scores["adapter"][key]["nll_sum"] - row["nll_sum"])
        other = abs(scores["base"][key]["nll_sum"] - row["nll_sum"])  # negative control: the LoRA's own effect
        assert same <= 2e-3 and other > 50 * 2e-3, (key, same, other)
    for folder in (written["adapter"][0].path, written["merged"][0].path):
        report = json.loads(_invoke("inspect", str(folder), "--json").stdout)
        assert (report["rope_type"], report["factor"], report["trained_context"]) == ("linear", 4.0, 256)
        assert report["finetune"]["layout"] == folder.name and report["finetune"]["steps"] == ft.PROVENANCE["steps"]


def test_recommend_compares_patched_and_finetuned(ppl_runs: dict[str, Any]) -> None:
    """recommend --ppl PATCHED --ppl FINETUNED: the fine-tune is one more row, paired per document with the
    patched model's; the winner ships as its folder when it is the fine-tune."""
    (base, base_table), (merged, merged_table) = ppl_runs["runs"]["base"], ppl_runs["runs"]["merged"]
    result = _invoke("recommend", "-t", "300", "--ppl", str(base), "--ppl", str(merged), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    evidence = {e["method"]: e for e in data["evidence"]}
    assert set(evidence) == {"as-is", "merged"}
    assert math.isclose(evidence["as-is"]["ppl_target"], base_table[("as-is", 300)]["ppl"], rel_tol=1e-9)
    assert math.isclose(evidence["merged"]["ppl_target"], merged_table[("as-is", 300)]["ppl"], rel_tol=1e-9)
    (rival,) = data["rivals"]  # paired over the 8 documents, as two methods of one run would be
    assert rival["method"] in evidence and rival["docs"] == 8
    if data["winner"] == "merged":
        assert data["commands"] == [f"# ship {ppl_runs['folders']['merged']} as it is (its config already holds the "
                                    "RoPE it was evaluated with)"]
    else:  # the first run's checkpoint as it is (the patched base, linear x4): served as it ships, nothing written
        where = ppl_runs["folders"]["base"]
        assert data["ships"] == "linear x4"
        assert data["commands"] == [f"ropectl patch {where} --emit vllm", f"ropectl patch {where} --emit llama.cpp",
                                    f"# then check it in the serving engines: ropectl verify {where} -t 300 "
                                    "--engine transformers,vllm"]


def test_recommend_refuses_runs_on_other_documents(ppl_runs: dict[str, Any]) -> None:
    root = ppl_runs["root"]
    fewer = root / "merged-5"
    assert _invoke("eval-ppl", str(ppl_runs["folders"]["merged"]), "-l", "300", "-d", str(ppl_runs["corpus"]), "-n",
                   "5", "-o", str(fewer), "--dtype", "fp32", "--cache-dir", str(root / "cache")).exit_code == 0
    from tests.helpers.cli import one_line

    one_line(["recommend", "-t", "300", "--ppl", str(ppl_runs["runs"]["base"][0]), "--ppl", str(fewer)],
             "other documents at 300 tokens")


@pytest.mark.parametrize("layout", ["full", "merged"])
def test_repatching_says_the_weights_were_trained_for_the_old_rope(written: dict[str, Any], layout: str) -> None:
    """Weights fine-tuned for linear:4: another RoPE written over them is untested, and patch says which; the same
    RoPE again (linear:4) and the checkpoint as it is (no -m) say nothing of it (negative controls)."""
    folder = str(written[layout][0].path)

    def warnings(*args: str) -> list[str]:
        result = _invoke("patch", folder, *args, "--json")
        assert result.exit_code == 0, result.output
        return [w for w in json.loads(result.stdout)["warnings"] if "fine-tuned for" in w]

    for method in ("yarn:4", "none", "linear:8"):
        said = warnings("-m", method, "--dry-run")
        assert len(said) == 1 and "fine-tuned for linear:4" in said[0] and f"{method} is untested" in said[0], said
    assert warnings("-m", "linear:4", "--dry-run") == []
    assert warnings("--emit", "vllm") == []
