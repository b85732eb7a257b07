"""The safetensors header: read and checked the way the safetensors library checks it, without the tensor data.

One reader for every command (patch's pre-write check, convert-layout's streaming copy). It refuses what the
library's own loader (``safe_open``, Rust ``SafeTensors::read_metadata`` + ``Metadata::validate``) refuses:
a header length past the end of the file or over 100 MB, a header that is not UTF-8 JSON, unknown dtypes,
offsets that disagree with dtype x shape, and a data section not covered exactly by the tensors (sorted by
offsets, each tensor must start where the previous one ends, and the last must end at the end of the file:
no gap, no overlap, no trailing byte, no missing byte). Cost: one ``stat`` and one read of the header.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import CheckpointError

MAX_HEADER = 100_000_000  # the safetensors library's own limit
U64 = 1 << 64
# Bits per element of every dtype the safetensors library (0.8) defines; sub-byte dtypes must end on a byte.
DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
              "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
              "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}


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
    tensors: dict[str, TensorInfo]  # header order
    metadata: dict[str, str] | None


def _bad(path: Path, why: str) -> CheckpointError:
    return CheckpointError(f"'{path}' is not a valid safetensors file: {why}",
                           "re-download or re-save the checkpoint; nothing was written")


def _no_constants(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")  # Python's json takes NaN/Infinity; the library's serde does not


def read_header(path: Path) -> SafetensorsFile:
    """Parse and check a safetensors header without reading the tensors."""
    path = Path(path)
    n, raw, size = _read_raw(path)
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
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
    _check_coverage(path, tensors.values(), data_len)
    return SafetensorsFile(path, 8 + n, data_len, tensors, metadata)


def _read_raw(path: Path) -> tuple[int, bytes, int]:
    """(header length, header bytes, file size), refusing a length the file cannot hold."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise _bad(path, f"only {size} bytes, shorter than the 8-byte header length (truncated)")
            n = struct.unpack("<Q", head)[0]
            if n > min(size - 8, MAX_HEADER):
                raise _bad(path, f"the header claims {n:,} bytes but the file holds {size - 8:,} after the length "
                                 "(truncated or corrupt)")
            return n, fh.read(n), size
    except OSError as exc:
        raise CheckpointError(f"cannot read '{path}': {exc.strerror}", "check the file's permissions") from None


def _is_count(value: Any) -> bool:
    return type(value) is int and 0 <= value < U64  # bool is an int to Python, not to the library


def _entry(path: Path, name: str, entry: Any, data_len: int) -> TensorInfo:
    try:
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        ok = isinstance(shape, list) and isinstance(offsets, list) and len(offsets) == 2 \
            and all(_is_count(d) for d in shape + offsets)
    except (KeyError, TypeError):
        ok = False
    if not ok:
        raise _bad(path, f"tensor '{name}' has a malformed header entry")
    if dtype not in DTYPE_BITS:
        raise _bad(path, f"tensor '{name}' has dtype {dtype!r}, which safetensors does not define")
    begin, end = offsets
    if not begin <= end:
        raise _bad(path, f"tensor '{name}' has data_offsets [{begin}, {end}]")
    if end > data_len:
        raise _bad(path, f"tensor '{name}' ends at byte {end:,} of the data but only {data_len:,} are present "
                         "(truncated)")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - begin:
        raise _bad(path, f"tensor '{name}' {dtype}{shape} needs {bits / 8:,g} bytes but its offsets span "
                         f"{end - begin:,}")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def _check_coverage(path: Path, infos: Any, data_len: int) -> None:
    """Sorted by offsets, each tensor starts where the last ended and the last ends at the end of the file."""
    cursor, last = 0, None
    for info in sorted(infos, key=lambda i: (i.begin, i.end)):
        if info.begin < cursor:
            raise _bad(path, f"tensors '{last}' and '{info.name}' overlap")
        if info.begin > cursor:
            raise _bad(path, f"bytes {cursor:,} to {info.begin:,} of the data belong to no tensor (a gap before "
                             f"'{info.name}')")
        cursor, last = info.end, info.name
    if cursor != data_len:
        raise _bad(path, f"{data_len - cursor:,} bytes follow the last tensor's data: the file is longer than its "
                         "header declares")
