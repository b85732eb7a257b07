"""Streaming safetensors I/O: parse headers ourselves, copy untouched bytes verbatim, rewrite only permuted rows.

The safetensors library writes a whole dict at once (memory = one shard); writing the header ourselves first and
then the data tensor by tensor keeps peak memory at one permuted tensor (plus its gathered copy). Untouched byte
ranges are copied in the kernel (``os.copy_file_range``), so their bytes are identical by construction.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ropectl.errors import CheckpointError
from ropectl.output import dumps

if TYPE_CHECKING:
    import numpy as np
    import torch

ProgressFn = Callable[[int], None]  # called with bytes just written
MAX_HEADER = 100_000_000  # the safetensors library's own limit
CHUNK = 64 << 20
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
            "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "C64": 8}
TORCH_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
               "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "U16": "uint16",
               "U32": "uint32", "U64": "uint64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
               "F8_E8M0": "float8_e8m0fnu", "C64": "complex64"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offsets relative to the start of the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsFile:
    path: Path
    data_start: int
    data_len: int
    tensors: Mapping[str, TensorInfo]  # header order
    metadata: Mapping[str, str] | None


def _bad(path: Path, why: str) -> CheckpointError:
    return CheckpointError(f"'{path}' is not a valid safetensors file: {why}",
                           "re-download or re-save the checkpoint; nothing was written")


def read_header(path: Path) -> SafetensorsFile:
    """Parse and check a safetensors header without reading the tensors."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            if n is None:
                raise _bad(path, f"only {size} bytes, shorter than the 8-byte header length (truncated)")
            if n > min(size - 8, MAX_HEADER):
                raise _bad(path, f"the header claims {n:,} bytes but the file holds {size - 8:,} after the length "
                                 "(truncated or corrupt)")
            raw = fh.read(n)
    except OSError as exc:
        raise CheckpointError(f"cannot read '{path}': {exc.strerror}", "check the file's permissions") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(path, f"the JSON header does not parse ({exc.__class__.__name__}: {exc})") from None
    except RecursionError:  # a nesting bomb: a real header is two levels deep
        raise _bad(path, "the JSON header nests too deeply") from None
    if not isinstance(header, dict):
        raise _bad(path, "the header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise _bad(path, "__metadata__ is not a map of strings")
    data_len = size - 8 - n
    tensors = {name: _entry(path, name, entry, data_len) for name, entry in header.items()}
    _check_overlap(path, tensors.values())
    return SafetensorsFile(path, 8 + n, data_len, tensors, metadata)


def _entry(path: Path, name: str, entry: Any, data_len: int) -> TensorInfo:
    try:
        dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        ok = isinstance(dtype, str) and all(isinstance(d, int) and d >= 0 for d in shape + (begin, end))
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise _bad(path, f"tensor '{name}' has a malformed header entry")
    if not begin <= end:
        raise _bad(path, f"tensor '{name}' has data_offsets [{begin}, {end}]")
    if end > data_len:
        raise _bad(path, f"tensor '{name}' ends at byte {end:,} of the data but only {data_len:,} are present "
                         "(truncated)")
    if dtype in ITEMSIZE and math.prod(shape) * ITEMSIZE[dtype] != end - begin:
        raise _bad(path, f"tensor '{name}' {dtype}{list(shape)} needs {math.prod(shape) * ITEMSIZE[dtype]:,} bytes "
                         f"but its offsets span {end - begin:,}")
    return TensorInfo(name, dtype, shape, begin, end)


def _check_overlap(path: Path, infos: Iterable[TensorInfo]) -> None:
    last: TensorInfo | None = None
    for info in sorted(infos, key=lambda i: (i.begin, i.end)):
        if last is not None and info.begin < last.end and info.nbytes:
            raise _bad(path, f"tensors '{last.name}' and '{info.name}' overlap")
        last = info if info.nbytes else last


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
