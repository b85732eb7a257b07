"""A metadata-only GGUF reader: the key/value section, without building the tensor index.

``gguf.GGUFReader`` turns every tokenizer string into numpy views before it returns (about 5 s for a
49k-token vocabulary on a loaded 2-core machine), although inspect, ``patch --dry-run`` and ``--emit`` need a
dozen scalar keys. This parser walks the key/value section of the format (GGUF v2/v3, either byte order) with
``struct`` over a memory map, steps over the tokenizer arrays without decoding them, and checks every length
against the file size first, so a hostile count cannot allocate or loop beyond the file.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

from gguf import GGUFValueType as T
from gguf import Keys

# GGUF value types -> struct code (strings and arrays are handled apart).
_SCALAR = {T.UINT8: "B", T.INT8: "b", T.UINT16: "H", T.INT16: "h", T.UINT32: "I", T.INT32: "i",
           T.FLOAT32: "f", T.BOOL: "?", T.UINT64: "Q", T.INT64: "q", T.FLOAT64: "d"}
_STRING, _ARRAY = T.STRING, T.ARRAY
KEPT = Keys.Tokenizer.MODEL
SKIPPED_PREFIX = KEPT.rsplit(".", 1)[0] + "."  # the vocabulary arrays: never needed for RoPE
MAX_ARRAY_DEPTH = 8


class GGUFFormatError(ValueError):
    """The bytes are not a GGUF key/value section this reader can walk."""


class _Cursor:
    def __init__(self, buf: Any, order: str) -> None:
        self.buf, self.pos, self.order, self.size = buf, 0, order, len(buf)

    def take(self, code: str) -> Any:
        fmt = self.order + code
        width = struct.calcsize(fmt)
        if self.pos + width > self.size:
            raise GGUFFormatError(f"the file ends inside the metadata (byte {self.pos:,} of {self.size:,})")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += width
        return value

    def skip(self, nbytes: int) -> None:
        if nbytes < 0 or self.pos + nbytes > self.size:
            raise GGUFFormatError(f"a length of {nbytes:,} bytes at byte {self.pos:,} runs past the end of the file")
        self.pos += nbytes

    def string(self, decode: bool = True) -> str | None:
        n = self.take("Q")
        start = self.pos
        self.skip(n)
        if not decode:
            return None
        return bytes(self.buf[start:self.pos]).decode("utf-8", errors="replace")

    def value(self, vtype: int, keep: bool, depth: int = 0) -> Any:
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string(keep)
        if vtype != _ARRAY:
            raise GGUFFormatError(f"unknown value type {vtype} at byte {self.pos:,}")
        if depth >= MAX_ARRAY_DEPTH:  # arrays of arrays: bounded, so a crafted file cannot exhaust the stack
            raise GGUFFormatError(f"arrays nest more than {MAX_ARRAY_DEPTH} deep at byte {self.pos:,}")
        etype, count = self.take("I"), self.take("Q")
        if etype in _SCALAR and not keep:  # fixed width: one jump over the whole array
            self.skip(count * struct.calcsize(_SCALAR[etype]))
            return None
        if count > self.size - self.pos:  # every element takes at least one byte
            raise GGUFFormatError(f"an array claims {count:,} elements, more than the file holds")
        items = [self.value(etype, keep, depth + 1) for _ in range(count)]
        return items if keep else None


def _byte_order(buf: Any) -> str:
    if bytes(buf[:4]) != b"GGUF":
        raise GGUFFormatError("GGUF magic invalid")
    if len(buf) < 24:
        raise GGUFFormatError("the file is shorter than a GGUF header")
    (version,) = struct.unpack_from("<I", buf, 4)
    order = "<" if version & 0xFFFF else ">"  # a big-endian file reads as a huge little-endian version
    (version,) = struct.unpack_from(order + "I", buf, 4)
    if version not in (2, 3):
        raise GGUFFormatError(f"GGUF version {version} is not supported (ropectl reads versions 2 and 3)")
    return order


def read_kv(path: Path) -> dict[str, Any]:
    """Every metadata key of ``path`` with its value, except the tokenizer arrays (stepped over, not read)."""
    with open(path, "rb") as fh:
        if fh.seek(0, 2) == 0:
            raise GGUFFormatError("the file is empty")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(buf, _byte_order(buf))
            cur.pos = 8
            tensors, count = cur.take("Q"), cur.take("Q")
            meta: dict[str, Any] = {}
            for _ in range(count):
                key = cur.string() or ""
                keep = not key.startswith(SKIPPED_PREFIX) or key == KEPT
                value = cur.value(cur.take("I"), keep)
                if keep:
                    meta[key] = value
            _check_tensor_data(cur, tensors, int(meta.get(Keys.General.ALIGNMENT) or 32))
            return meta


def _check_tensor_data(cur: _Cursor, count: int, alignment: int) -> None:
    """Walk the tensor index and check each tensor's bytes lie inside the file: a truncated download is refused."""
    from gguf.constants import GGML_QUANT_SIZES  # block size and bytes per block of each ggml type

    if count > cur.size // 24 or not 0 < alignment <= 1 << 20:  # an index entry takes at least 24 bytes
        raise GGUFFormatError(f"the header claims {count:,} tensors (alignment {alignment}), more than the file holds")
    ends = []
    for _ in range(count):
        name = cur.string()
        n_dims = cur.take("I")
        if n_dims > 8:  # ggml tensors have at most 4 dimensions; reading on would desynchronise the walk
            raise GGUFFormatError(f"tensor '{name}' claims {n_dims:,} dimensions")
        dims = [cur.take("Q") for _ in range(n_dims)]
        ggml_type, offset = cur.take("I"), cur.take("Q")
        try:
            block, nbytes = GGML_QUANT_SIZES[ggml_type]  # type: ignore[index]
        except KeyError:
            raise GGUFFormatError(f"tensor '{name}' has unknown ggml type {ggml_type}") from None
        elements = 1
        for dim in dims:
            elements *= dim
        ends.append(offset + elements // block * nbytes)
    data_start = -(-cur.pos // alignment) * alignment
    if ends and data_start + max(ends) > cur.size:
        raise GGUFFormatError(f"the tensors need {data_start + max(ends):,} bytes but the file holds {cur.size:,} "
                              "(truncated)")
