"""``convert-layout``: permute q/k rows between interleaved and half-split, streaming, into a staged folder."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import LayoutError, UsageError
from ropectl.families.layouts import arch_for
from ropectl.io.files import check_output_dir, staged_dir
from ropectl.io.hub_cache import symlink_refusal
from ropectl.layout.detect import HALF_SPLIT, INTERLEAVED, LAYOUTS, known_layout
from ropectl.layout.io import fsync_file, write_streaming, write_tensors
from ropectl.layout.plan import Geometry, TensorPlan, check_layouts, plan_tensors
from ropectl.layout.verify import VerifyReport, verify_conversion
from ropectl.layout.weights import ST_INDEX, WeightStore, open_weights, other_files, output_name
from ropectl.output import dumps
from ropectl.schema.record import KEY as RECORD_KEY
from ropectl.schema.record import Record

ProgressCallback = Callable[[int, int], None]  # (bytes_done, bytes_total)
METADATA_KEY = "ropectl_layout"
INTERLEAVED_RUNTIMES = ("Meta's reference Llama code (consolidated.*.pth), mistral-inference "
                        "(consolidated.safetensors), and llama.cpp's GGUF tensors for the 'llama' architecture "
                        "(convert_hf_to_gguf.py permutes HF weights into this layout itself, so do not feed it "
                        "this folder)")
HALF_SPLIT_RUNTIMES = "rotate_half attention: HF Llama/Qwen/Mistral/GPT-NeoX code and llama.cpp's NEOX rope type"


@dataclass(frozen=True, kw_only=True)
class ConvertSpec:
    model: str
    to: str
    output: Path | None
    from_layout: str | None = None
    verify: bool = False
    force: bool = False
    # fsync the output before renaming it into place. Off by default, like a plain copy or save_pretrained:
    # the rename already makes interrupts safe, and the source is never touched, so a power loss costs a rerun.
    durable: bool = False

    def __post_init__(self) -> None:
        for flag, value in (("--to", self.to), ("--from", self.from_layout)):
            if value is not None and value not in LAYOUTS:
                raise UsageError(f"{flag} '{value}' is not a layout", f"use {INTERLEAVED} or {HALF_SPLIT}")
        if self.output is None:
            raise UsageError("convert-layout needs --output", "pass --output DIR (a new folder outside the source)")


@dataclass(frozen=True)
class ConvertResult:
    source: str
    output: str
    model_type: str
    from_layout: str
    from_reason: str
    to_layout: str
    geometry: Geometry
    input_format: str
    weight_files: tuple[str, ...]
    tensors_permuted: tuple[str, ...]
    tensors_total: int
    bytes_total: int
    seconds: float
    copied: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    verify: VerifyReport | None = None

    def to_dict(self) -> dict[str, Any]:
        g = self.geometry
        return {
            "source": self.source, "output": self.output, "model_type": self.model_type,
            "from": self.from_layout, "from_reason": self.from_reason, "to": self.to_layout,
            "num_attention_heads": g.n_heads, "num_key_value_heads": g.n_kv_heads, "head_dim": g.head_dim,
            "rotary_dim": g.rotary_dim, "input_format": self.input_format, "weight_files": list(self.weight_files),
            "tensors_permuted": len(self.tensors_permuted), "permuted": list(self.tensors_permuted),
            "tensors_total": self.tensors_total, "bytes": self.bytes_total, "seconds": round(self.seconds, 3),
            "copied": list(self.copied), "skipped": list(self.skipped), "warnings": list(self.warnings),
            "verify": self.verify.to_dict() if self.verify else None,
        }


def convert_layout(spec: ConvertSpec, progress: ProgressCallback | None = None) -> ConvertResult:
    """Check everything first, then write the converted checkpoint to a temp folder and rename it into place."""
    from ropectl.io.resolve import resolve_model
    from ropectl.schema import read_model_rope

    resolved = resolve_model(spec.model, weights=True)
    if resolved.is_gguf:
        raise LayoutError("convert-layout reads safetensors or PyTorch checkpoints, not GGUF",
                          "GGUF 'llama' tensors are already interleaved; load the GGUF with transformers and "
                          "save_pretrained it to get a half-split folder")
    assert spec.output is not None  # __post_init__ refused None; this narrows the type
    folder, output = resolved.folder, Path(spec.output)
    check_output_dir(output, folder, spec.force)
    cfg = dict(resolved.config)
    model_type, arch = arch_for(cfg)
    mr = read_model_rope(cfg)
    store = open_weights(folder)
    known, record = _recorded_layout(cfg, mr.record, store)
    source, why = check_layouts(spec.to, spec.from_layout, known, record)
    geo, plans = plan_tensors(arch, model_type, cfg, mr, store.shapes(), spec.to)
    copy, skipped = _side_files(folder, store)
    total = store.nbytes()
    tick = _ticker(progress, total)
    start = time.perf_counter()
    report = None
    with staged_dir(output, spec.force, command="convert-layout") as tmp:
        names = _write_weights(store, tmp, plans, spec.to, tick, spec.durable)
        _write_index(store, tmp, names, spec.to)
        for path in copy:
            shutil.copy2(path, tmp / path.name)
        _write_config(cfg, tmp, source, spec.to)
        if spec.durable:  # the shards are already on disk (synced while writing); this flushes the rest
            for path in tmp.iterdir():
                fsync_file(path)
        seconds = time.perf_counter() - start  # writing only; --verify is reported on its own
        if spec.verify:
            report = verify_conversion(store, open_weights(tmp), plans, geo, arch.packing, source, spec.to,
                                       _inv_freq(mr, geo), mr.rope.max_position_embeddings)
    return ConvertResult(
        source=str(spec.model), output=str(output), model_type=model_type, from_layout=source, from_reason=why,
        to_layout=spec.to, geometry=geo, input_format=store.kind, weight_files=tuple(names.values()),
        tensors_permuted=tuple(sorted(plans)), tensors_total=len(store.where), bytes_total=total,
        seconds=seconds, copied=tuple(p.name for p in copy), skipped=tuple(skipped),
        warnings=tuple(layout_warnings(cfg, model_type, spec.to)), verify=report,
    )


def _side_files(folder: Path, store: WeightStore) -> tuple[list[Path], list[str]]:
    """(files to copy, what is not copied and why): symlinks leaving the checkpoint are never followed."""
    copy, skipped = other_files(folder, store.files)
    refused = {p: symlink_refusal(p, folder) for p in copy}
    return [p for p in copy if not refused[p]], [*skipped, *(f"{p.name} ({why})" for p, why in refused.items() if why)]


def _recorded_layout(cfg: Mapping[str, Any], record: Mapping[str, Any],
                     store: WeightStore) -> tuple[tuple[str, str], Mapping[str, Any]]:
    """The config's record wins; weights ropectl wrote also carry their layout in the safetensors metadata."""
    if record.get("layout"):
        return known_layout(cfg), record
    tagged = {(h.metadata or {}).get(METADATA_KEY) for h in store.headers.values()} - {None}
    if len(tagged) == 1:
        layout = tagged.pop()
        if layout in LAYOUTS:
            return (layout, "recorded by ropectl in the safetensors metadata"), {**record, "layout": layout}
    return known_layout(cfg), record


def _ticker(progress: ProgressCallback | None, total: int) -> Callable[[int], None]:
    done = 0
    if progress:
        progress(0, total)

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    return tick


def _write_weights(store: WeightStore, tmp: Path, plans: Mapping[str, TensorPlan], to: str,
                   tick: Callable[[int], None], durable: bool) -> dict[Path, str]:
    """Write shard after shard; if durable, each finished shard is fsynced in the background while the next one
    is written."""
    names: dict[Path, str] = {}
    syncer = ThreadPoolExecutor(max_workers=1)
    try:
        pending = []
        for path in store.files:
            names[path] = output_name(path, store.kind)
            if store.kind == "safetensors":
                sf = store.headers[path]
                metadata = {"format": "pt", **(sf.metadata or {}), METADATA_KEY: to}
                indexes = {n: plans[n].index for n in sf.tensors if n in plans}
                write_streaming(sf, tmp / names[path], metadata, indexes, tick, writeback=durable)
            else:
                tensors = store.torch_files[path]
                indexes = {n: plans[n].index for n in tensors if n in plans}
                write_tensors(tensors, tmp / names[path], {"format": "pt", METADATA_KEY: to}, indexes, tick)
            if durable:
                pending.append(syncer.submit(fsync_file, tmp / names[path]))
        for future in pending:
            future.result()  # the staged folder is renamed into place only once its bytes are on disk
    finally:
        syncer.shutdown(wait=True, cancel_futures=True)
    return names


def _write_index(store: WeightStore, tmp: Path, names: Mapping[Path, str], to: str) -> None:
    if store.index is None:
        return
    index = json.loads(json.dumps(store.index))  # deep copy; names and sizes do not change for safetensors
    index.setdefault("metadata", {})
    if store.kind == "torch":
        index["weight_map"] = {n: names[store.where[n]] for n in index["weight_map"]}
        index["metadata"]["total_size"] = store.nbytes()
    index["metadata"][METADATA_KEY] = to
    # Plain writes: the staged folder's rename makes the output atomic, and an fsync of any file here would
    # commit the filesystem journal and so flush every shard written so far, durable or not.
    (tmp / ST_INDEX).write_text(dumps(index, indent=2) + "\n", encoding="utf-8")


def _write_config(cfg: dict[str, Any], tmp: Path, source: str, to: str) -> None:
    record = Record.of(cfg).with_(layout=to, layout_source=f"converted from {source} by ropectl convert-layout")
    out = record.written_into(cfg)
    if "rope_interleave" in cfg:  # the one HF flag that selects the pairing (DeepSeek-V3, Kimi): keep it true
        out["rope_interleave"] = to == INTERLEAVED
    (tmp / "config.json").write_text(dumps(out, indent=2) + "\n", encoding="utf-8")


def _inv_freq(mr: Any, geo: Geometry) -> tuple[float, ...]:
    from ropectl.rope.frequencies import base_inv_freq, compute_frequencies

    inv = compute_frequencies(mr.rope).inv_freq
    return tuple(inv) if len(inv) == geo.rotary_dim // 2 else tuple(base_inv_freq(mr.rope.rope_theta, geo.rotary_dim))


def layout_warnings(cfg: Mapping[str, Any], model_type: str, to: str) -> list[str]:
    """Say when transformers would load the result without complaint and compute the wrong thing."""
    native, _ = known_layout({k: v for k, v in cfg.items() if k != RECORD_KEY})
    if to == native or "rope_interleave" in cfg:  # the flag is rewritten to the new layout
        return []
    out = [f"transformers' '{model_type}' attention expects {native} q/k: it will load this {to} checkpoint without "
           "any error and silently compute garbage"]
    out.append(f"{to} q/k is the layout of " + (INTERLEAVED_RUNTIMES if to == INTERLEAVED else HALF_SPLIT_RUNTIMES)
               + f"; convert back with `ropectl convert-layout OUT --to {native}`")
    return out
