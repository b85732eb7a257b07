"""``ropectl extend`` end to end on a tiny seeded Llama (trained 2k, char tokenizer) extended to 4k, through every
stage via the CLI: zero-shot (recommend), 2 search trials, 3 fine-tune steps, ship, acceptance (report, on the
``claims`` engine whose task answers are known: tests/helpers/report_engine.py), the card. Then resume, and each
refusal: one line, a non-zero exit, nothing written.

Oracles: the files each stage's own command writes (the study's trials, the fine-tune's steps, patch's written
config as transformers reads it), set arithmetic on the recorded document ids, and the stored records of an
uninterrupted run.
"""

from __future__ import annotations

import json
import random
import shutil
import string
from pathlib import Path

import pytest

from ropectl.cli.app import app
from tests.helpers.cli import one_line, runner
from tests.helpers.report_engine import claims_env, tiny_base

pytest.importorskip("optuna")
KEYS = {"schema", "model", "target", "trained_context", "verdict", "shipped", "plan", "data", "decisions",
        "zero_shot", "search", "finetune", "acceptance", "engines", "serve", "out"}
FAST = ["-t", "4k", "-f", "2", "--serve-with", "transformers", "--dtype", "fp32", "--device", "cpu", "--samples", "2",
        "--docs", "2", "-T", "niah_single_1,passkey", "--engine", "claims"]
# every stage, and verify's stage for llama.cpp (a folder gets the "not checked" row with the conversion line)
EVERY = [*FAST[:FAST.index("--serve-with") + 1], "transformers,llama.cpp", *FAST[FAST.index("--serve-with") + 2:],
         "--trials", "2", "--steps", "3", "--search", "always", "--finetune", "always"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory):
    with claims_env(tmp_path_factory.mktemp("extend")) as root:
        tiny_base(root / "base", 2048)
        corpus(root / "corpus", 10, 4300)
        yield root


def corpus(folder: Path, docs: int, chars: int) -> Path:
    """Documents of random words from a 600-word vocabulary (RULER's word tasks draw distinct words from it)."""
    rng = random.Random(0)
    pool = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 7))) for _ in range(600)]
    folder.mkdir(parents=True)
    for i in range(docs):
        text = " ".join(rng.choice(pool) for _ in range(chars // 3))
        (folder / f"doc{i:02d}.txt").write_text(text[:chars])
    return folder


def extend(env: Path, out: str, *args: str) -> dict:
    result = runner.invoke(app, ["extend", str(env / "base"), "-o", str(env / out), "--dataset",
                                 str(env / "corpus"), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def every(env: Path) -> dict:
    return extend(env, "every", *EVERY)


@pytest.mark.slow  # every stage and the resume: 77 s of one thread on 2 AVX2 cores, quiet (docs/reference/extend.md)
def test_every_stage_runs_and_the_card_says_so(every: dict, env: Path) -> None:
    out = env / "every"
    assert set(every) == KEYS
    assert every["decisions"]["search"] == {"ran": True, "why": "--search always"}
    assert every["decisions"]["finetune"]["ran"] is True
    study = json.loads((out / "stages" / "search" / "trials.json").read_text())
    assert len(study) == 2 and len(every["search"]["trials"]) == 2  # the study's own file: 2 trials
    # engines are the engines stage's (verify, on --serve-with): the search checks none of its own
    assert not json.loads((out / "stages" / "search" / "search.json").read_text())["engine_checks"]
    assert every["finetune"]["steps"] == 3 and every["finetune"]["mode"] == "pose"
    assert every["shipped"]["finetuned"] is True and Path(every["shipped"]["path"]) == out / "model"
    config = json.loads((out / "model" / "config.json").read_text())
    from transformers import AutoConfig

    read = AutoConfig.from_pretrained(out / "model")  # transformers reads the shipped RoPE
    assert read.max_position_embeddings == config["max_position_embeddings"] == 4096
    assert every["verdict"]["status"] in ("reached", "not reached", "not determined")
    assert every["acceptance"]["target"] == 4096
    assert set(every["serve"]) == {"transformers", "vllm", "sglang", "llama.cpp"}
    assert every["serve"]["vllm"]["verdict"] == "not checked"
    rows = {r["engine"]: r for r in every["engines"]["rows"]}  # verify ran for the engine in --serve-with
    assert rows["llama.cpp"]["verdict"] == "not checked" and "convert_hf_to_gguf" in rows["llama.cpp"]["why"]
    for name in ("EXTENSION.md", "extension.json", "record.json"):
        assert (out / name).is_file(), name
    md = (out / "EXTENSION.md").read_text()
    assert "## What was done and why" in md and "## Acceptance (report)" in md and "trial 1" in md
    import re

    images = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
    assert images and all((out / image).is_file() for image in images), images  # report's plots, linked from OUT


@pytest.mark.slow  # every stage and the resume: 77 s of one thread on 2 AVX2 cores, quiet (docs/reference/extend.md)
def test_no_stage_sees_another_stages_documents(every: dict, env: Path) -> None:
    data = every["data"]
    ids = {name: set(split["ids"]) for name, split in data.items()}
    names = sorted(ids)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not ids[a] & ids[b], (a, b)
    assert ids["search"] | ids["finetune"] | ids["acceptance"] == {f"doc{i:02d}.txt" for i in range(10)}
    # each stage read its own folder: the search's documents and the fine-tune's are files of their folders
    search = json.loads((env / "every" / "data" / "search" / "ids.json").read_text())
    assert {search[d.removesuffix(".txt")] for d in every["search"]["search_docs"]} <= ids["search"]
    tuned = json.loads((env / "every" / "data" / "finetune" / "ids.json").read_text())
    assert {tuned[d.removesuffix(".txt")] for d in every["finetune"]["held_out"]} <= ids["finetune"]


@pytest.mark.slow  # every stage and the resume: 77 s of one thread on 2 AVX2 cores, quiet (docs/reference/extend.md)
def test_resume_reuses_finished_stages_and_equals_the_run(every: dict, env: Path) -> None:
    """A run stopped after its search (the later stages' records and the model gone) resumes to the same card."""
    copy = env / "resumed"
    shutil.copytree(env / "every", copy, symlinks=True)
    for name in ("finetune", "ship", "gguf", "acceptance", "engines"):
        (copy / "stages" / f"{name}.json").unlink(missing_ok=True)
    shutil.rmtree(copy / "model")
    for name in ("EXTENSION.md", "extension.json"):
        (copy / name).unlink()
    again = extend(env, "resumed", *EVERY, "--resume")
    assert again["search"] == every["search"]  # reused, not rerun
    assert again["data"]["search"]["ids"] == every["data"]["search"]["ids"]
    assert again["finetune"]["final_loss"] == pytest.approx(every["finetune"]["final_loss"], rel=1e-4)
    assert again["verdict"]["status"] == every["verdict"]["status"]


@pytest.mark.parametrize(("args", "needles"), [
    (["-t", "2k"], ("at or below the trained context",)),
    (["-t", "4k", "--budget", "0.01"], ("smaller than acceptance alone needs", "at least")),
    (["-t", "100M", "--device", "cpu"], ("cannot hold the target", "longest length")),
    (["-t", "8k"], ("documents", "at least the target")),
])
def test_bad_input_is_one_line_and_writes_nothing(env: Path, args: list[str], needles: tuple[str, ...]) -> None:
    out = env / "refused"
    one_line(["extend", str(env / "base"), "-o", str(out), "--dataset", str(env / "corpus"), *args], *needles)
    assert not out.exists()


def test_overlap_with_the_retention_dataset_is_refused(env: Path) -> None:
    out = env / "overlap"
    one_line(["extend", str(env / "base"), "-o", str(out), "-t", "4k", "--dataset", str(env / "corpus"),
              "--retention-dataset", str(env / "corpus")], "shares", "retention")
    assert not out.exists()


def test_a_folder_ropectl_did_not_write_is_refused(env: Path) -> None:
    out = env / "theirs"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    one_line(["extend", str(env / "base"), "-o", str(out), "-t", "4k"], "did not write")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_a_model_ropectl_cannot_patch_is_refused(env: Path) -> None:
    model = env / "gpt2"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 2048, "n_embd": 64,
                                                   "n_layer": 2, "n_head": 4, "vocab_size": 80}))
    out = env / "gpt2-out"
    one_line(["extend", str(model), "-o", str(out), "-t", "4k"], "no RoPE to inspect or scale")
    assert not out.exists()


def stopped_copy(env: Path, name: str, drop: tuple[str, ...]) -> Path:
    """The finished run's folder as a run stopped before ``drop[0]`` would leave it."""
    copy = env / name
    shutil.copytree(env / "every", copy, symlinks=True)
    for stage in drop:
        (copy / "stages" / f"{stage}.json").unlink(missing_ok=True)
    shutil.rmtree(copy / "model", ignore_errors=True)
    if "search" in drop:
        shutil.rmtree(copy / "stages" / "search")
    for card in ("EXTENSION.md", "extension.json"):
        (copy / card).unlink()
    return copy


@pytest.mark.slow  # 49 s and 34 s of one thread on 2 AVX2 cores, quiet, beside the every-stage run they compare with
@pytest.mark.parametrize(("stage", "started"), [
    ("search", "stages/search/reference.json"),  # the closed-form grid measured: the study is next
    ("finetune", "model.run/train_log.jsonl"),  # a step logged
])
def test_sigterm_inside_a_stage_prints_the_command_that_resumes_it(every: dict, env: Path, stage: str,
                                                                   started: str) -> None:
    import os
    import shlex
    import signal
    import subprocess
    import sys
    import time

    later = ("search", "finetune", "ship", "gguf", "acceptance", "engines")
    out = stopped_copy(env, f"stop-{stage}", later[later.index(stage):])
    run_env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    argv = ["extend", str(env / "base"), "-o", str(out), "--dataset", str(env / "corpus"), *EVERY, "--resume"]
    proc = subprocess.Popen([sys.executable, "-m", "ropectl", *argv], cwd=env, env=run_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not ((out / started).is_file() and (out / started).stat().st_size) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]  # ended before the stage began: say why, now
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-2000:]
    line = next(x for x in err.splitlines() if "resume with:" in x)
    assert line.startswith(f"extend terminated in stage {stage}")
    command = shlex.split(line.split("resume with: ", 1)[1])
    assert command[0] == "ropectl" and command.count("--resume") == 1
    done = subprocess.run([sys.executable, "-m", "ropectl", *command[1:], "--json"], cwd=env, env=run_env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    card = json.loads(done.stdout)
    assert card["search"]["spec"] == every["search"]["spec"]  # the same study, seeded, trials not repeated
    # the measured trials are the uninterrupted run's (a trial the stop failed is run again, and counted apart)
    got, want = card["search"]["trials"], every["search"]["trials"]
    assert [(t["state"], t["spec"]) for t in got] == [(t["state"], t["spec"]) for t in want]
    assert [t["fitness"] for t in got] == pytest.approx([t["fitness"] for t in want], rel=1e-4)
    rows = json.loads((out / "stages" / "search" / "trials.json").read_text())
    assert card["search"]["stopped_trials"] == sum(r["state"] == "fail" for r in rows) <= int(stage == "search")
    assert card["finetune"]["steps"] == 3
    # a fine-tune resumed from its checkpoint repeats no step: the same loss up to float noise
    assert card["finetune"]["final_loss"] == pytest.approx(every["finetune"]["final_loss"], rel=1e-3)


@pytest.mark.slow
def test_auto_skips_search_and_finetune_when_zero_shot_reaches(env: Path) -> None:
    """On the claims engine a scaled method answers every trial that fits its claimed 4k, so recommend's winner
    reaches at zero-shot (2 trials: lower bound 0.34 < 0.85 would not; 25 do) and auto spends nothing more; the
    winner ships through patch."""
    samples = FAST.index("--samples") + 1
    card = extend(env, "auto", *FAST[:samples], "25", *FAST[samples + 1:])
    assert card["zero_shot"]["reached"] is True, card["zero_shot"]
    assert card["decisions"]["search"]["ran"] is False and card["decisions"]["finetune"]["ran"] is False
    assert "reached" in card["decisions"]["search"]["why"]
    assert card["search"] is None and card["finetune"] is None
    written = json.loads((env / "auto" / "model" / "config.json").read_text())
    assert card["shipped"]["method"].startswith(written["rope_parameters"]["rope_type"])


def test_dry_run_prints_the_plan_and_writes_nothing(env: Path) -> None:
    out = env / "dry"
    result = runner.invoke(app, ["extend", str(env / "base"), "-o", str(out), "--dataset", str(env / "corpus"),
                                 *FAST, "--budget", "60", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    assert [s["name"] for s in plan["stages"]] == ["zero-shot", "search", "finetune", "acceptance"]
    assert plan["budget_min"] == 60 and plan["target"] == 4096 and plan["trained"] == 2048
    for stage in plan["stages"]:
        assert stage["peak_bytes"] > 0 and stage["longest"] >= 4096 and stage["minutes"] >= 0
    assert plan["stages"][2]["size"]["window"] == 2048  # PoSE at the trained window
    assert "plan: 2k -> 4k" in result.stderr and "acceptance" in result.stderr
    assert not out.exists()


def test_the_plan_sweeps_the_factor_the_run_sweeps(env: Path) -> None:
    """--factor: one factor per method in the plan, as in the sweeps it estimates; without it, recommend's grid
    (the control: the check can fail)."""
    def methods(*args: str) -> list[str]:
        result = runner.invoke(app, ["extend", str(env / "base"), "-o", str(env / "dry-f"), "--dataset",
                                     str(env / "corpus"), *args, "--dry-run", "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["plan"]["stages"][0]["size"]["methods"]

    one = methods(*FAST)
    assert one and all(m == "none" or m.endswith(":2") for m in one), one
    no_factor = [a for i, a in enumerate(FAST) if a != "-f" and FAST[i - 1] != "-f"]
    assert any(m != "none" and not m.endswith(":2") for m in methods(*no_factor))
