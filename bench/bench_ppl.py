"""Benchmark eval-ppl's chunked evaluator against the naive full-logits loop.

For each (dtype, length, implementation) a fresh subprocess loads the model, warms up, then times one
scored forward of ``length`` tokens and reports tokens/s and peak memory (ru_maxrss on CPU, the CUDA
allocator's peak on GPU), so configurations cannot contaminate each other's peaks. MFU divides the
model's FLOPs (analytic count below) by the measured matmul peak of the same dtype, or fp32's where that
is higher (bf16 on CPUs without bf16 units is emulated, and SDPA runs it near fp32 speed).

    .venv/bin/python bench/bench_ppl.py                       # SmolLM2-135M GGUF on CPU, fp32 + bf16
    python bench/bench_ppl.py --random-init --device cuda     # same architecture, random weights (GPU box)
    python bench/bench_ppl.py --dtypes fp32,auto --lengths 2k,8k --rounds 2   # auto against fp32, interleaved
    python bench/bench_ppl.py --device cuda --dtypes bf16 --random-init --config llama-1b \
        --lengths 8192,16384,32768 --impls chunked,passkey --peak-tflops 989 --json-out gpu.json

Implementations:
  naive:   model(ids, labels=ids) -> full [L, vocab] logits, then transformers' loss (upcast to fp32)
  chunked: model.model(ids) hidden states -> lm_head + cross-entropy over 1024 positions at a time (eval-ppl)
  passkey: one eval-passkey trial: the same body forward, lm_head only at the 6 answer positions
  naive-sweep / chunked-sweep (--impls): every --lengths value scored on one document, as a sweep does:
           naive runs one forward per length; eval-ppl's truncate plan runs one forward at the longest
           length and reads each shorter length off the cumulative NLL. tokens/s counts every scored length.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_ppl_lib.py, beside this script
from bench_ppl_lib import auto_line, matmul_peak, table  # noqa: E402

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0,
               tie_word_embeddings=True, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
# Llama-3.2-1B's shape (1.24B parameters), for --random-init GPU runs at 8k-32k.
LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                rope_theta=500000.0, tie_word_embeddings=True, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
CONFIGS = {"smollm2": SMOLLM2, "llama-1b": LLAMA_1B}
ANSWER = 6  # answer tokens of a 5-digit key (" " + 5 digits with SmolLM2's tokenizer)


def load(random_init: bool, dtype: str, device: str, config_name: str = "smollm2"):
    import torch

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    if random_init:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(**CONFIGS[config_name], attn_implementation="sdpa")
        torch.manual_seed(0)
        with torch.device(device):  # built on the GPU directly: a 1B model's fp32 init on CPU is slow
            model = LlamaForCausalLM(config).to(torch_dtype)
    else:
        sys.path.insert(0, str(REPO))
        from ropectl.runtime.load import load_model
        from ropectl.runtime.model import default_model_path

        path = default_model_path()
        model = load_model(str(path.parent), {"gguf_file": path.name}, None, "cpu", dtype).model
    return model.to(device).eval()


def flops_per_forward(cfg, length: int, head_positions: int | None = None) -> float:
    """Matmul FLOPs of one scored forward: projections + MLP + lm_head (2 per MAC) + causal attention.

    ``head_positions``: the lm_head runs only there (a passkey trial), not at every position."""
    h, layers, heads, kv = cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads
    hd = getattr(cfg, "head_dim", None) or h // heads
    proj = h * heads * hd * 2 + h * kv * hd * 2  # q, o and k, v
    mlp = 3 * h * cfg.intermediate_size
    dense = 2 * length * layers * (proj + mlp) + 2 * (head_positions or length) * h * cfg.vocab_size
    attention = 2 * 2 * layers * heads * hd * length * (length + 1) / 2  # QK^T and PV over the causal triangle
    return dense + attention


def measure(args: argparse.Namespace) -> dict:
    """One configuration, in this (fresh) process."""
    import torch

    sys.path.insert(0, str(REPO))
    from ropectl.eval.engines.hf.forward import teacher_forced
    from ropectl.eval.engines.hf.loss import sequence_nll

    if args.threads:  # 1 thread: no barriers to wait at when other jobs hold the cores, so CPU time is clean
        torch.set_num_threads(args.threads)
    model = load(args.random_init, args.dtype, args.device, args.config)
    cuda = args.device.startswith("cuda")
    ids = (torch.arange(args.length, device=args.device) * 7919 + 13) % model.config.vocab_size

    def one(impl: str, n: int):
        x = ids[:n]
        if impl == "naive":
            return model(input_ids=x[None], labels=x[None]).loss.float() * (n - 1)
        if impl == "passkey":  # eval-passkey's scoring of one trial of n tokens
            return teacher_forced(model, [x.tolist()], [ANSWER], args.device)
        return sequence_nll(model, x, chunk_size=1024).double().sum()

    def step(n: int):
        if n != args.length or not args.impl.endswith("-sweep"):
            return one(args.impl.removesuffix("-sweep"), n)
        if args.impl == "naive-sweep":  # the usual loop: one scored forward per length
            return [one("naive", length) for length in args.sweep]
        # eval-ppl's truncate plan: one forward at the longest length scores every prefix
        csum = torch.cumsum(sequence_nll(model, ids, chunk_size=1024).double(), 0)
        return [csum[length - 2] for length in args.sweep]

    with torch.inference_mode():
        step(min(256, args.length))  # warm-up: kernels, allocator, thread pools
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        base_mib = reset_peak_rss()
        times, cpu_times = [], []
        for _ in range(args.repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            step(args.length)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    seconds = min(times)
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else peak_rss_mib()
    scored = sum(args.sweep) if args.impl.endswith("-sweep") else args.length
    forwards = args.sweep if args.impl == "naive-sweep" else [args.length]
    head = ANSWER if args.impl == "passkey" else None
    return {"impl": args.impl, "dtype": args.dtype, "length": args.length, "seconds": seconds,
            "tok_s": scored / seconds, "cpu_s": min(cpu_times), "threads": torch.get_num_threads(), "peak_mib": peak,
            "base_mib": None if cuda else base_mib,
            "flops": sum(flops_per_forward(model.config, n, head) for n in forwards), "config": args.config,
            "device_name": _gpu_name() if cuda else "cpu"}


def reset_peak_rss() -> float:
    """Reset the kernel's peak-RSS mark (VmHWM) so loading the model does not count; returns RSS now, MiB."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # not Linux, or not allowed: the peak then includes loading (ru_maxrss)
    return _status("VmRSS") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_mib() -> float:
    return _status("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _status(key: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def run_child(args: argparse.Namespace, impl: str, dtype: str, length: int) -> dict:
    cmd = [sys.executable, __file__, "--child", "--impl", impl, "--dtype", dtype, "--length", str(length),
           "--device", args.device, "--repeats", str(args.repeats), "--sweep", ",".join(map(str, args.sweep))]
    cmd += ["--random-init"] if args.random_init else []
    cmd += ["--config", args.config] + (["--threads", str(args.threads)] if args.threads else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"impl": impl, "dtype": dtype, "length": length, "error": f"timeout after {args.timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"impl": impl, "dtype": dtype, "length": length, "error": tail[:200]}
    return json.loads(lines[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="2048,8192,16384", help="e.g. 2k,8k,16384 (as eval-ppl reads them)")
    p.add_argument("--dtypes", default="fp32,bf16", help="fp32, bf16, or auto (what --dtype auto picks here)")
    p.add_argument("--impls", default="naive,chunked", help="naive, chunked, passkey, naive-sweep, chunked-sweep")
    p.add_argument("--device", default="cpu")
    p.add_argument("--config", default="smollm2", choices=sorted(CONFIGS),
                   help="architecture for --random-init (llama-1b: Llama-3.2-1B's shape)")
    p.add_argument("--peak-tflops", type=float, help="MFU against this peak (H100 SXM bf16 dense: 989) "
                   "instead of the measured matmul peak")
    p.add_argument("--random-init", action="store_true", help="random weights of the same architecture (no GGUF)")
    p.add_argument("--repeats", type=int, default=1, help="timed forwards per configuration and process")
    p.add_argument("--rounds", type=int, default=1, help="run every configuration this many times, interleaved; "
                   "best kept (robust to other jobs' load)")
    p.add_argument("--threads", type=int, help="torch threads in each configuration (default: torch's)")
    p.add_argument("--timeout", type=int, default=1200, help="seconds per configuration")
    p.add_argument("--json-out", type=Path)
    p.add_argument("--peaks-only", action="store_true", help="only measure the matmul peaks")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--impl", help=argparse.SUPPRESS)
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, help=argparse.SUPPRESS)
    p.add_argument("--sweep", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.sweep = list(lengths_arg(args.sweep or args.lengths))
    if args.child:
        print(json.dumps(measure(args)), flush=True)
        return
    auto = resolve_auto(args.device)  # always reported: what eval-ppl would run here
    print(f"--dtype auto chose {auto[0]} on {args.device}: {auto[1]}", file=sys.stderr, flush=True)
    dtypes = list(dict.fromkeys(auto[0] if d == "auto" else d for d in args.dtypes.split(",")))
    peaks = {d: matmul_peak(d, args.device) for d in dtypes}
    if args.peaks_only:
        print(json.dumps({"peaks": peaks, "rows": []}))
        return
    # A sweep scores every length from one document: it is timed once, at the longest length.
    configs = [(impl, dtype, length) for dtype in dtypes for impl in args.impls.split(",")
               for length in ([max(args.sweep)] if impl.endswith("-sweep") else args.sweep)]
    rows = interleaved(args, configs)
    device = args.device if not args.device.startswith("cuda") else _gpu_name()
    text = table(rows, peaks, f"{device}, {os.cpu_count()} CPU cores, torch threads {_threads()}", args.peak_tflops)
    text = f"--dtype auto chose {auto[0]}: {auto[1]}\n{auto_line(rows, auto[0])}\n{text}"
    print(text)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"device": device, "auto": auto, "peaks": peaks,
                                             "peak_tflops": args.peak_tflops, "config": args.config,
                                             "random_init": args.random_init, "rounds": args.rounds,
                                             "load": _loadavg(), "versions": _versions(), "rows": rows,
                                             "table": text}, indent=1))


def interleaved(args: argparse.Namespace, configs: list[tuple[str, str, int]]) -> list[dict]:
    """Every configuration once per round, rounds one after another, best time kept: on shared cores the
    load changes over minutes, and interleaving exposes every variant to the same spells of it."""
    best: dict[tuple[str, str, int], dict] = {}
    for _ in range(args.rounds):
        for key in configs:
            row = run_child(args, *key)
            row["load"] = _loadavg()
            print(json.dumps(row), file=sys.stderr, flush=True)
            if "error" not in row and ("error" in best.get(key, {}) or row["tok_s"] > best.get(key, {}).get("tok_s", 0)):
                best[key] = row
            best.setdefault(key, row)
    return [best[key] for key in configs]


def _versions() -> dict[str, str]:
    import platform

    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine()}


def _loadavg() -> str | None:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return None


def lengths_arg(text: str) -> tuple[int, ...]:
    """--lengths exactly as eval-ppl reads them: 8192, 8k, 1.5k; comma-separated, sorted, deduplicated."""
    sys.path.insert(0, str(REPO))
    from ropectl.errors import RopectlError
    from ropectl.runtime.lengths import parse_lengths

    try:
        return parse_lengths(text)
    except RopectlError as exc:
        raise SystemExit(f"bench_ppl.py: {exc}") from None


def resolve_auto(device: str) -> tuple[str, str]:
    """What eval-ppl's --dtype auto picks on this machine (CPU flags / probe; bf16 on CUDA)."""
    sys.path.insert(0, str(REPO))
    from ropectl.runtime.model import resolve_dtype_choice

    return resolve_dtype_choice("auto", device.split(":")[0])


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name()


def _threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
