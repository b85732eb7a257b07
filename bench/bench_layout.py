"""Benchmark ``convert-layout`` against a plain copy on a synthetic sharded Llama-shaped bf16 checkpoint.

    .venv/bin/python bench/bench_layout.py [--gb 3] [--dir /tmp/ropectl-bench] [--keep]

Builds the checkpoint (random-looking bf16 bytes; content does not matter for a row permutation), then times
``shutil.copyfile`` of the same files on the same disk, with and without fsync, and the conversion itself in a
subprocess, as by default (no fsync, like the plain copy) and with --fsync (flushed before the rename, like the
fsynced copy). Peak RSS comes from the child's VmHWM and ``os.wait4``.
Prints a markdown table. Removes everything it wrote unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BF16 = 2
SHARD_BYTES = 700 << 20


def llama_shapes(layers: int) -> dict[str, tuple[int, ...]]:
    """Llama-3-8B-like layers (GQA 32/8 heads, head_dim 128) with a 32k vocabulary."""
    hidden, inter, vocab, heads, kv, hd = 4096, 14336, 32000, 32, 8, 128
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (heads * hd, hidden), p + "self_attn.k_proj.weight": (kv * hd, hidden),
            p + "self_attn.v_proj.weight": (kv * hd, hidden), p + "self_attn.o_proj.weight": (hidden, heads * hd),
            p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter), p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
        }
    shapes |= {"model.norm.weight": (hidden,), "lm_head.weight": (vocab, hidden)}
    return shapes


def config(layers: int) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": layers, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32000, "max_position_embeddings": 8192,
            "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def write_shard(path: Path, shapes: dict[str, tuple[int, ...]], block: bytes) -> int:
    entries, offset = {}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * BF16
        entries[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps({"__metadata__": {"format": "pt"}, **entries}, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        left = offset
        while left:
            step = min(left, len(block))
            fh.write(block[:step])
            left -= step
    return offset


def build(folder: Path, gb: float) -> tuple[int, int, int]:
    """(total bytes, shard count, largest tensor bytes)."""
    per_layer = sum(int(np.prod(s)) for n, s in llama_shapes(1).items() if ".layers." in n) * BF16
    fixed = sum(int(np.prod(s)) for n, s in llama_shapes(0).items()) * BF16
    layers = max(1, round((gb * 2**30 - fixed) / per_layer))
    shapes = llama_shapes(layers)
    rng = np.random.default_rng(0)
    normal = rng.standard_normal(8 << 20, dtype=np.float32) * 0.02
    block = (normal.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # 16 MiB of plausible bf16 values
    folder.mkdir(parents=True)
    shards: list[dict[str, tuple[int, ...]]] = [{}]
    size = 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * BF16
        if size + n > SHARD_BYTES and shards[-1]:
            shards.append({})
            size = 0
        shards[-1][name] = shape
        size += n
    weight_map, total = {}, 0
    for i, part in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        total += write_shard(folder / fname, part, block)
        weight_map |= {n: fname for n in part}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (folder / "config.json").write_text(json.dumps(config(layers), indent=2))
    largest = max(int(np.prod(s)) for s in shapes.values()) * BF16
    return total, len(shards), largest


def time_copy(src: Path, dst: Path, fsync: bool) -> float:
    os.sync()  # every run starts with no dirty pages from the previous one
    dst.mkdir()
    start = time.perf_counter()
    for f in sorted(src.iterdir()):
        shutil.copyfile(f, dst / f.name)
        if fsync:
            fd = os.open(dst / f.name, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    seconds = time.perf_counter() - start
    shutil.rmtree(dst)
    return seconds


HWM = """
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print("HWM", int(line.split()[1]) * 1024)
"""


def run_child(code: str) -> tuple[float, int, int, str]:
    """(wall seconds, peak RSS from wait4, peak RSS of the child's own address space, stdout) of a subprocess.

    ``ru_maxrss`` of a child started by (v)fork inherits the parent's high-water mark at exec, so it can only
    bound from above; the child's own VmHWM (``/proc/self/status``, reset at exec) is its true peak.
    """
    os.sync()
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code + HWM], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()  # type: ignore[union-attr]
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"child failed:\n{err}")
    hwm = int(out.split("HWM")[-1])
    return seconds, usage.ru_maxrss * 1024, hwm, out.split("HWM")[0]


CONVERT = """
import time
from pathlib import Path
start = time.perf_counter()
from ropectl.layout.convert import ConvertSpec, convert_layout
r = convert_layout(ConvertSpec(model={src!r}, to="interleaved", output=Path({out!r}), verify={verify}, durable={durable}))
print(len(r.tensors_permuted), time.perf_counter() - start)
"""


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def measure(src: Path, root: Path, repeats: int) -> dict[str, float]:
    out = root / "out"
    keys = ("copy", "copy_sync", "wall", "call", "rss", "maxrss", "vwall", "vrss", "nwall", "ncall")
    m: dict[str, list[float]] = {k: [] for k in keys}
    time_copy(src, root / "warm", fsync=False)  # warm the page cache for both contenders alike
    for _ in range(repeats):
        m["copy"].append(time_copy(src, root / "copy", fsync=False))
        m["copy_sync"].append(time_copy(src, root / "copy", fsync=True))
        wall, maxrss, rss, text = run_child(CONVERT.format(src=str(src), out=str(out), verify=False, durable=True))
        shutil.rmtree(out)
        m["wall"].append(wall)
        m["rss"].append(rss)
        m["maxrss"].append(maxrss)
        permuted, call = text.split()
        m["call"].append(float(call))
        wall, maxrss, rss, text = run_child(CONVERT.format(src=str(src), out=str(out), verify=False, durable=False))
        shutil.rmtree(out)
        m["nwall"].append(wall)
        m["rss"].append(rss)
        m["maxrss"].append(maxrss)
        m["ncall"].append(float(text.split()[1]))
    wall, _, rss, _ = run_child(CONVERT.format(src=str(src), out=str(out), verify=True, durable=False))
    shutil.rmtree(out)
    m["vwall"].append(wall)
    m["vrss"].append(rss)
    _, _, base_rss, _ = run_child("import ropectl.layout.convert")
    result = {k: median(v) for k, v in m.items()}
    result |= {"rss": max(m["rss"]), "maxrss": max(m["maxrss"]), "base_rss": base_rss, "permuted": int(permuted)}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/ropectl-bench"))
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    free = shutil.disk_usage(args.dir.parent).free
    if free < 3.5 * args.gb * 2**30:
        raise SystemExit(f"need ~{3.5 * args.gb:.0f} GB free under {args.dir.parent}, have {free / 2**30:.0f} GB")
    if args.dir.exists():
        shutil.rmtree(args.dir)
    try:
        total, n_shards, largest = build(args.dir / "src", args.gb)
        report(total, n_shards, largest, measure(args.dir / "src", args.dir, args.repeats), args.repeats)
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)


def report(total: int, n_shards: int, largest: int, m: dict[str, float], repeats: int) -> None:
    mib = 2**20
    budget = 2 * largest + 300 * mib

    def row(name: str, seconds: float, extra: str = "") -> str:
        return f"| {name} | {seconds:.2f} s | {total / mib / seconds:,.0f} MiB/s | {extra} |"

    print(f"\nSynthetic Llama-shaped bf16 checkpoint: {total / 2**30:.2f} GiB in {n_shards} shards, largest tensor "
          f"{largest / mib:.0f} MiB, {m['permuted']} q/k tensors permuted; {os.cpu_count()} CPUs, "
          f"median of {repeats} runs, page cache warm, `sync` before each run.\n")
    print("| run | wall time | throughput | vs copy (no fsync / fsync) |\n|---|---|---|---|")
    print(row("shutil.copyfile, no fsync", m["copy"]))
    print(row("shutil.copyfile + fsync", m["copy_sync"]))
    for name, key in (("convert_layout() call (default, no fsync)", "ncall"), ("whole `convert` process", "nwall"),
                      ("convert_layout() call, --fsync", "call"), ("whole `convert --fsync` process", "wall")):
        print(row(name, m[key], f"{m['copy'] / m[key]:.2f}× / {m['copy_sync'] / m[key]:.2f}×"))
    print(row("whole `convert --verify` process", m["vwall"]))
    print("\n| peak RSS | value | budget: 2 × largest tensor + 300 MiB |\n|---|---|---|")
    verdict = "within" if m["rss"] <= budget else "OVER"
    print(f"| convert process, VmHWM (max of runs) | {m['rss'] / mib:.0f} MiB | {budget / mib:.0f} MiB: {verdict} |")
    print(f"| convert process, wait4 ru_maxrss (upper bound) | {m['maxrss'] / mib:.0f} MiB | "
          f"{'within' if m['maxrss'] <= budget else 'OVER'} |")
    print(f"| convert --verify process | {m['vrss'] / mib:.0f} MiB | (verify imports torch) |")
    print(f"| `import ropectl.layout.convert` alone | {m['base_rss'] / mib:.0f} MiB | |")


if __name__ == "__main__":
    main()
