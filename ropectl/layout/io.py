"""Streaming safetensors I/O: copy untouched bytes verbatim, rewrite only permuted rows.

Headers are read and checked by ``ropectl.io.safetensors_header`` (the one reader, shared with ``patch``).

The safetensors library writes a whole dict at once (memory = one shard); writing the header ourselves first and
then the data tensor by tensor keeps peak memory at one permuted tensor (plus its gathered copy). Untouched byte
ranges are copied in the kernel (``os.copy_file_range``), so their bytes are identical by construction.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ropectl.errors import CheckpointError
from ropectl.io.safetensors_header import DTYPE_BITS, SafetensorsFile
from ropectl.output import dumps

if TYPE_CHECKING:
    import numpy as np
    import torch

ProgressFn = Callable[[int], None]  # called with bytes just written
CHUNK = 64 << 20
TORCH_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
               "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "U16": "uint16",
               "U32": "uint32", "U64": "uint64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
               "F8_E8M0": "float8_e8m0fnu", "C64": "complex64"}
# The dtypes whose rows can be permuted byte-wise (whole bytes per element, a torch dtype to read them as).
ITEMSIZE = {name: DTYPE_BITS[name] // 8 for name in TORCH_NAMES}


def encode_header(entries: Mapping[str, Mapping[str, Any]], metadata: Mapping[str, str] | None) -> bytes:
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    header.update(entries)
    raw = dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned, as safetensors writes it
    return struct.pack("<Q", len(raw)) + raw


def read_tensor(sf: SafetensorsFile, name: str) -> torch.Tensor:
    import torch

    info = sf.tensors[name]
    buf = bytearray(info.nbytes)
    with open(sf.path, "rb") as fh:
        fh.seek(sf.data_start + info.begin)
        fh.readinto(buf)
    if not buf:
        return torch.empty(info.shape, dtype=getattr(torch, TORCH_NAMES[info.dtype]))
    return torch.frombuffer(buf, dtype=getattr(torch, TORCH_NAMES[info.dtype])).view(info.shape)


def gather_bytes(raw: Any, index: np.ndarray) -> np.ndarray:
    """Permute rows of a tensor's raw bytes (any buffer): dtype-agnostic, so bit-exact for bf16, fp8, anything."""
    import numpy as np

    return np.frombuffer(raw, dtype=np.uint8).reshape(len(index), -1).take(index, axis=0)


def write_streaming(sf: SafetensorsFile, dst: Path, metadata: Mapping[str, str] | None,
                    indexes: Mapping[str, np.ndarray], progress: ProgressFn, writeback: bool = False) -> None:
    """Write ``sf`` to ``dst`` with the rows of the tensors in ``indexes`` permuted; all else byte-identical.

    ``writeback`` starts writing copied ranges to disk at once, for a caller that will fsync the file.
    """
    entries = {n: {"dtype": i.dtype, "shape": list(i.shape), "data_offsets": [i.begin, i.end]}
               for n, i in sf.tensors.items()}
    todo = sorted((sf.tensors[n] for n in indexes), key=lambda i: i.begin)
    src = os.open(sf.path, os.O_RDONLY)
    try:
        with open(dst, "wb", buffering=0) as out:
            _write_all(out, encode_header(entries, metadata))
            cursor = 0
            for info in todo:
                _copy_range(src, out, sf.data_start + cursor, info.begin - cursor, progress, writeback)
                raw = os.pread(src, info.nbytes, sf.data_start + info.begin)
                _write_all(out, gather_bytes(raw, indexes[info.name]))
                progress(info.nbytes)
                cursor = info.end
            _copy_range(src, out, sf.data_start + cursor, sf.data_len - cursor, progress, writeback)
    finally:
        os.close(src)


def write_tensors(tensors: Mapping[str, torch.Tensor], dst: Path, metadata: Mapping[str, str],
                  indexes: Mapping[str, np.ndarray], progress: ProgressFn) -> int:
    """Write in-memory (or mmapped) tensors as safetensors, one at a time; returns the data size."""
    import torch

    dtypes = {getattr(torch, v): k for k, v in TORCH_NAMES.items() if hasattr(torch, v)}
    entries, offset = {}, 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        entries[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    with open(dst, "wb", buffering=0) as out:
        _write_all(out, encode_header(entries, metadata))
        for name, t in tensors.items():
            if not t.numel():
                continue
            raw = t.contiguous().reshape(-1).view(torch.uint8).numpy()
            if name in indexes:
                raw = gather_bytes(raw, indexes[name])
            _write_all(out, raw)
            progress(raw.size)
    return offset


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(out: Any, data: Any) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[out.write(view):]


def _copy_range(src: int, out: Any, offset: int, length: int, progress: ProgressFn, writeback: bool) -> None:
    dst = out.fileno()
    while length > 0:
        written_at = os.lseek(dst, 0, os.SEEK_CUR)
        step = min(length, CHUNK)
        try:
            done = os.copy_file_range(src, dst, step, offset)
        except (AttributeError, OSError):  # other filesystems or platforms: plain read/write
            done = 0
        if done <= 0:
            data = os.pread(src, step, offset)
            if not data:
                raise CheckpointError("a weight file shrank while it was being read",
                                      "do not modify the checkpoint while converting")
            _write_all(out, data)
            done = len(data)
        offset += done
        length -= done
        if writeback:
            _start_writeback(dst, written_at, done)
        progress(done)


def _start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing this chunk to disk now (Linux: DONTNEED on dirty pages starts async writeback).

    The final fsync then has little left to wait for, and converting a large model does not push everything
    else out of the page cache.
    """
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
