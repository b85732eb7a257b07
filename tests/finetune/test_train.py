"""Training end to end on a tiny Llama: the written run, the log's rows, resume == uninterrupted, LoRA, the RoPE."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from ropectl.finetune.spec import FinetuneSpec
from ropectl.finetune.train import FinetuneInterrupted, finetune, run_dir_for
from ropectl.rope.methods import parse_spec

STEPS = 6
# fp32 on CPU, the same examples in the same order and the optimizer / scheduler / RNG state restored: the resumed
# weights equal the uninterrupted ones to float32 rounding.
RESUME_ATOL = 1e-6


def _spec(model: Path, corpus: Path, out: Path, **kw: object) -> FinetuneSpec:
    base = dict(model=str(model), method=parse_spec("yarn:4"), output=out, data=str(corpus), steps=STEPS,
                batch_size=2, dtype="fp32", device="cpu", lr=1e-3)
    base.update(kw)
    return FinetuneSpec(**base)  # type: ignore[arg-type]


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_run_writes_checkpoint_log_and_held_out_rows(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    seen = []
    result = finetune(_spec(ft_model, ft_corpus, isolated / "out", eval_every=3), seen.append)
    out = isolated / "out"
    assert (out / "model.safetensors").is_file() and (out / "loss.png").is_file()
    assert not run_dir_for(out).exists()  # the run folder goes once the output is written
    rows = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, STEPS + 1))
    assert all(r["tokens"] == r["step"] * 2 * 64 and set(r) == {"step", "tokens", "loss", "lr", "tokens_per_s"}
               for r in steps)
    evals = [r for r in rows if "eval" in r]
    assert [r["step"] for r in evals] == [0, 3, 6]
    for r in evals:
        assert set(r["eval"]) == {"64", "256"}
        for cell in r["eval"].values():
            assert cell["count"] == sum(c for _, c in cell["per_doc"])
            assert cell["ppl"] == pytest.approx(2.718281828 ** (cell["nll_sum"] / cell["count"]))
    assert evals[-1]["eval"]["64"]["ppl"] < evals[0]["eval"]["64"]["ppl"]  # lr 1e-3 on its own domain: it learns
    assert result.provenance["held_out"] and result.provenance["steps"] == STEPS
    assert any(p.evaluation for p in seen) and any(p.loss for p in seen)


def test_held_out_documents_are_never_trained_on(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    from ropectl.finetune.train import prepare

    p = prepare(_spec(ft_model, ft_corpus, isolated / "out"))
    stream = b"".join(s.astype("int64").tobytes() for s in p.split.spans)
    for _, tokens in p.split.held_out:
        body = tokens[1:40].astype("int64").tobytes()  # 39 tokens of the document's text
        assert body not in stream


def test_resume_after_sigint_equals_uninterrupted(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    finetune(_spec(ft_model, ft_corpus, isolated / "a"))

    def interrupt(p: object) -> None:
        if getattr(p, "step", 0) == 2 and getattr(p, "loss", None) is not None:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C: the run stops after the next step, saved

    spec = _spec(ft_model, ft_corpus, isolated / "b")
    with pytest.raises(FinetuneInterrupted) as info:
        finetune(spec, interrupt)
    run_dir = info.value.run_dir
    assert info.value.exit_code == 130 and 0 < info.value.step < STEPS
    assert any(run_dir.glob("checkpoint-*")) and not (isolated / "b").exists()
    assert run_dir == isolated / "b.run"  # --resume continues the run folder of the same --output
    finetune(spec.with_(resume=True))
    a, b = _weights(isolated / "a"), _weights(isolated / "b")
    assert a.keys() == b.keys()
    for name in a:
        assert float((a[name].float() - b[name].float()).abs().max()) <= RESUME_ATOL, name
    rows = [json.loads(x) for x in (isolated / "b" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # the log continues, no step twice


def test_resume_folder_of_another_run_is_refused(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    from ropectl.errors import UsageError
    from ropectl.finetune.runs import prepare_run_dir

    run_dir = isolated / "x.run"
    prepare_run_dir(_spec(ft_model, ft_corpus, isolated / "x"), run_dir, True)
    other = _spec(ft_model, ft_corpus, isolated / "x", seed=1, resume=True)
    with pytest.raises(UsageError, match="another run.*seed"):
        prepare_run_dir(other, run_dir, True)


def test_model_built_for_training_has_the_patched_rope(ft_model: Path, isolated: Path) -> None:
    """inv_freq of the model finetune trains == transformers' own rotary module built from the patched config."""
    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    from ropectl.finetune.build import build_model
    from ropectl.runtime.model import model_source
    from ropectl.schema.apply import apply_to_config

    source = model_source(str(ft_model))
    patched, _ = apply_to_config(source.config, parse_spec("yarn:4"))
    model = build_model(source, patched, "cpu")
    (isolated / "cfg").mkdir()
    (isolated / "cfg" / "config.json").write_text(json.dumps(patched))
    oracle = LlamaForCausalLM(AutoConfig.from_pretrained(isolated / "cfg")).model.rotary_emb
    got = model.model.rotary_emb
    assert got.config.rope_parameters["rope_type"] == "yarn"
    assert torch.allclose(got.inv_freq.double(), oracle.inv_freq.double(), rtol=1e-6)
    assert got.attention_scaling == pytest.approx(oracle.attention_scaling)
    unscaled = LlamaForCausalLM(AutoConfig.from_pretrained(ft_model)).model.rotary_emb  # negative control
    assert not torch.allclose(got.inv_freq, unscaled.inv_freq)


def test_a_dropped_scaling_is_refused_before_training(ft_model: Path) -> None:
    """The check finetune runs on the built model fails on a model whose RoPE is not the patched one."""
    import torch
    from transformers import AutoModelForCausalLM

    from ropectl.errors import VerificationError
    from ropectl.finetune.build import verify_patched_rope
    from ropectl.runtime.model import model_source
    from ropectl.schema.apply import apply_to_config

    patched, _ = apply_to_config(model_source(str(ft_model)).config, parse_spec("yarn:4"))
    plain = AutoModelForCausalLM.from_pretrained(ft_model, dtype=torch.float32)  # config not passed: unscaled
    with pytest.raises(VerificationError):
        verify_patched_rope(plain, patched)


def test_lora_trains_only_adapters_and_writes(ft_model: Path, ft_corpus: Path, isolated: Path) -> None:
    from ropectl.finetune.build import add_lora, build_model, trainable_count
    from ropectl.runtime.model import model_source
    from ropectl.schema.apply import apply_to_config

    spec = _spec(ft_model, ft_corpus, isolated / "out", lora=4, steps=2)
    source = model_source(str(ft_model))
    patched, _ = apply_to_config(source.config, parse_spec("yarn:4"))
    lora = add_lora(build_model(source, patched, "cpu"), spec)
    names = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    # r x (in + out) for q, k, v, o in 2 layers: q/o 48<->128, k/v 48->32 (GQA)
    assert trainable_count(lora) == 2 * 4 * (48 + 128 + 48 + 32 + 48 + 32 + 128 + 48)
    both = add_lora(build_model(source, patched, "cpu"), spec.with_(train_embeddings_norms=True))
    trained = [n for n, p in both.named_parameters() if p.requires_grad]
    assert any("embed_tokens" in n for n in trained) and any("norm" in n for n in trained)
    result = finetune(spec.with_(merge=True))
    assert result.provenance["lora"] == {"r": 4, "alpha": 8.0, "embeddings_norms": False, "merged": True}
    assert (isolated / "out" / "config.json").is_file()


def test_trained_embeddings_stay_tied_to_the_head(tmp_path: Path) -> None:
    """--train-embeddings-norms on a model with tied embeddings (SmolLM2 ties them): after a step, and merged, the
    head is still the embedding (peft #2777)."""
    import torch

    from ropectl.finetune.build import add_lora, build_model
    from ropectl.runtime.model import model_source
    from ropectl.schema.apply import apply_to_config
    from tests.helpers.checkpoints import tiny_llama

    folder = tiny_llama(tmp_path / "tied", tie_word_embeddings=True)
    source = model_source(str(folder))
    patched, _ = apply_to_config(source.config, parse_spec("yarn:4"))
    spec = _spec(folder, folder, tmp_path / "out", lora=4, train_embeddings_norms=True)
    model = add_lora(build_model(source, patched, "cpu"), spec)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    ids = torch.randint(0, 128, (1, 20), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    merged = model.merge_and_unload()
    embed, head = merged.get_input_embeddings().weight, merged.get_output_embeddings().weight
    assert torch.equal(embed, head)
    assert not torch.equal(embed, build_model(source, patched, "cpu").get_input_embeddings().weight)  # it trained


def test_a_failed_final_write_resumes_without_training_again(ft_model: Path, ft_corpus: Path, isolated: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import ropectl.finetune.output as output

    real = output.write_checkpoint

    def full_disk(*args: object, **kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(output, "write_checkpoint", full_disk)
    spec = _spec(ft_model, ft_corpus, isolated / "out", steps=2)
    from ropectl.errors import OutputError

    with pytest.raises(OutputError, match="No space left.*--resume"):
        finetune(spec)
    run_dir = run_dir_for(isolated / "out")
    assert (run_dir / "checkpoint-2").is_dir()  # the last step was kept
    monkeypatch.setattr(output, "write_checkpoint", real)
    seen: list = []
    result = finetune(spec.with_(resume=run_dir), seen.append)
    assert not [p for p in seen if p.loss is not None]  # no step trained again
    assert result.provenance["steps"] == 2 and (isolated / "out" / "config.json").is_file()


@pytest.mark.parametrize("mode", [["--full"], ["--pose", "--window", "64"]])
def test_first_line_and_summary_state_the_same_lengths(ft_model: Path, ft_corpus: Path, isolated: Path,
                                                       mode: list[str]) -> None:
    """The progress header said 'full length 256 -> target 256' where the summary said 'trained 64 -> target 256'."""
    from ropectl.cli.app import app
    from tests.helpers.cli import runner

    result = runner.invoke(app, ["finetune", str(ft_model), "-m", "yarn:4", *mode, "--dataset", str(ft_corpus), "-o",
                                 "out", "--steps", "1", "--batch-size", "1", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    how = "full length" if mode == ["--full"] else "PoSE window 64"
    summary = result.stdout.splitlines()[0]
    assert summary == f"yarn:4: trained 64 -> target 256 tokens; {how}"  # the tiny model is trained at 64; x 4
    assert result.stderr.splitlines()[0].startswith(summary + "; a step is ")
