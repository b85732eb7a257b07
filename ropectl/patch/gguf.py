"""Rewrite a GGUF file's RoPE metadata into a new file, tensors copied byte for byte.

llama.cpp reads ``{arch}.rope.scaling.type/.factor/.original_context_length``, ``{arch}.rope.freq_base``
and ``{arch}.context_length``; YaRN also takes ``yarn_beta_fast/slow`` and an attention multiplier
``rope.scaling.attn_factor`` applied on top of its own 0.1 ln(s) + 1. ropectl's base record lives in
``ropectl.*`` keys, which llama.cpp ignores.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import GGUFError, OutputError, VerificationError
from ropectl.io.files import why_not_writable
from ropectl.io.gguf_meta import BASE_CONTEXT_KEY, BASE_THETA_KEY, LEGACY_SCALE_LINEAR, METHOD_KEY
from ropectl.io.ownership import clean_stale, temp_affixes
from ropectl.io.signals import sigterm_as_interrupt
from ropectl.readers import llama_cpp
from ropectl.rope.methods import owner_of
from ropectl.rope.params import RopeParams

# Keys that describe scaling (names of ``gguf.Keys.Rope`` constants); whatever of them the new RoPE does not set
# is removed, and ``rope.scale_linear`` (the pre-GGUF-v3 linear key, which gguf.Keys no longer names).
SCALING_KEYS = ("SCALING_TYPE", "SCALING_FACTOR", "SCALING_ORIG_CTX_LEN", "SCALING_ATTN_FACTOR", "SCALING_YARN_BETA_FAST",
                "SCALING_YARN_BETA_SLOW", "SCALING_YARN_ATTN_FACTOR", "SCALING_YARN_EXT_FACTOR", "SCALING_YARN_LOG_MUL",
                "SCALING_FINETUNED")


def check_expressible(rope: RopeParams, method_name: str) -> None:
    owner = owner_of(rope.rope_type)
    # The method's own fix where converting would not carry it either (dynamic); else conversion can.
    fix = (owner.gguf_fix if owner else "") or ("patch the Hugging Face checkpoint and convert it with llama.cpp's "
                                               "convert_hf_to_gguf.py, or use linear, ntk or yarn on the GGUF")
    llama_cpp.refuse_unexpressible(rope.rope_type, method_name, "written to GGUF metadata", fix)


def check_method_for_gguf(method_name: str) -> None:
    """The same refusal as ``check_expressible``, from the method name alone (before parsing the file)."""
    from ropectl.rope.methods import get_method

    method = get_method(method_name)
    if method.gguf_none:
        check_expressible(RopeParams(method.rope_type, 1e4, 2, None, {}), method.name)


def gguf_updates(arch: str, rope: RopeParams, base: RopeParams, label: str) -> tuple[dict[str, Any], set[str]]:
    """({key: value} to set, {keys} to remove) for the new RoPE; key names from gguf.Keys."""
    import gguf

    def k(name: str) -> str:
        return str(getattr(gguf.Keys.Rope, name)).format(arch=arch)

    owner = owner_of(rope.rope_type)
    kind = (owner.gguf_type if owner is not None else None) or rope.rope_type  # llama.cpp's name ("none": default)
    updates: dict[str, Any] = {
        gguf.Keys.LLM.CONTEXT_LENGTH.format(arch=arch): int(rope.max_position_embeddings
                                                              or base.max_position_embeddings or 0),
        k("FREQ_BASE"): float(rope.rope_theta),
        k("SCALING_TYPE"): kind,
        BASE_THETA_KEY: float(base.rope_theta),
        BASE_CONTEXT_KEY: int(base.trained_context or 0),
        METHOD_KEY: label,
    }
    if owner is not None and owner.gguf_keys is not None:  # the method's own keys (factor; yarn's betas ...)
        updates.update({k(name): value for name, value in owner.gguf_keys(rope).items()})
    remove = ({k(name) for name in SCALING_KEYS} | {LEGACY_SCALE_LINEAR.format(arch=arch)}) - set(updates)
    return updates, remove


def _value_type(key: str, value: Any) -> Any:
    from gguf import GGUFValueType

    if isinstance(value, str):
        return GGUFValueType.STRING
    if isinstance(value, int):
        return GGUFValueType.UINT32
    return GGUFValueType.FLOAT64 if key.startswith("ropectl.") else GGUFValueType.FLOAT32


def _open(path: Path) -> Any:
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except Exception as exc:  # the reader raises ValueError, struct.error ... on a bad file
        raise GGUFError(f"'{path}' is not a readable GGUF file ({type(exc).__name__}: {exc})",
                        "check the download is complete; re-download or re-convert it") from None


def _copy_fields(reader: Any, writer: Any, updates: Mapping[str, Any], remove: set[str]) -> None:
    from gguf import GGUFValueType

    pending = dict(updates)
    for fld in reader.fields.values():
        if fld.name == "general.architecture" or fld.name.startswith("GGUF.") or fld.name in remove:
            continue
        vtype = fld.types[0]
        sub_type = fld.types[-1] if vtype == GGUFValueType.ARRAY else None
        value = pending.pop(fld.name) if fld.name in pending else fld.contents()
        writer.add_key_value(fld.name, value, vtype, sub_type=sub_type)
    for key, value in pending.items():
        writer.add_key_value(key, value, _value_type(key, value))


def _write(reader: Any, path: Path, arch: str, updates: Mapping[str, Any], remove: set[str]) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch, endianess=reader.endianess)
    writer.data_alignment = reader.alignment
    try:
        _copy_fields(reader, writer, updates, remove)
        for t in reader.tensors:
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in reader.tensors:
            try:
                writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
            except OSError as exc:
                raise _short_write(exc, path, t.data.nbytes) from None
    finally:
        with contextlib.suppress(OSError):  # closing after a failed write must not hide that failure
            writer.close()


def _short_write(exc: OSError, path: Path, nbytes: int) -> OSError:
    """numpy's tofile reports a short write as 'N requested and M written' with no errno: name the cause."""
    if exc.errno is not None:
        return exc
    free = shutil.disk_usage(path.parent).free
    code = errno.ENOSPC if free < nbytes else errno.EIO
    return OSError(code, os.strerror(code), str(path.parent))  # the temp file is gone: name its folder


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    return a == b


def verify_gguf(source: Any, written: Path, updates: Mapping[str, Any], remove: set[str]) -> int:
    """Re-read the written file: new metadata as intended, the rest and every tensor unchanged."""
    import numpy as np

    out = _open(written)
    for key, want in updates.items():
        fld = out.fields.get(key)
        if fld is None or not _same(fld.contents(), want):
            got = None if fld is None else fld.contents()
            raise VerificationError(f"GGUF key '{key}' reads back as {got!r}, not {want!r}", "report this")
    for key in remove:
        if key in out.fields:
            raise VerificationError(f"GGUF key '{key}' should have been removed", "report this")
    kept = [f for f in source.fields.values() if f.name not in updates and f.name not in remove
            and not f.name.startswith("GGUF.")]
    for fld in kept:
        if fld.name not in out.fields:
            raise VerificationError(f"GGUF key '{fld.name}' was lost in the copy", "report this")
    if [t.name for t in out.tensors] != [t.name for t in source.tensors]:
        raise VerificationError("the written GGUF's tensor list differs from the source's", "report this")
    for a, b in zip(source.tensors, out.tensors, strict=True):
        if a.tensor_type != b.tensor_type or list(a.shape) != list(b.shape) or not np.array_equal(a.data, b.data):
            raise VerificationError(f"tensor '{a.name}' differs after the copy", "report this")
    return len(out.tensors)


@dataclass(frozen=True)
class GGUFWrite:
    path: Path
    changed: dict[str, Any]
    removed: tuple[str, ...]
    tensors: int


def check_gguf_output(output: Path, source: Path, force: bool) -> None:
    if output.suffix.lower() != ".gguf":
        raise OutputError(f"output '{output}' does not end in .gguf", "pass --output NEW.gguf for a GGUF model")
    if output.resolve() == source.resolve():
        raise OutputError("the output is the source GGUF", "write a new file; GGUF models are never patched in place")
    if output.exists() and not force:
        raise OutputError(f"output file '{output}' exists", "choose a new file name, or pass --force")
    parent = output.parent if output.parent.exists() else None
    if parent is None:
        raise OutputError(f"folder '{output.parent}' does not exist", "create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write to '{parent}' ({why_not_writable(parent)})", "choose a writable output location")


def rewrite_gguf(source: Path, output: Path, arch: str, updates: dict[str, Any], remove: set[str]) -> GGUFWrite:
    """Write to a temp file beside ``output``, verify it, then rename: never a half-written .gguf.

    SIGTERM unwinds like Ctrl-C so the temp file is removed; one a SIGKILLed run left is removed next time.
    """
    reader = _open(source)
    clean_stale(output)
    prefix, suffix = temp_affixes(output)
    with sigterm_as_interrupt():
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=output.parent)
        except OSError as exc:
            raise OutputError(f"cannot create a file in '{output.parent}' ({exc.strerror})",
                              "choose a writable output location") from None
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            _write(reader, tmp, arch, updates, remove)
            tensors = verify_gguf(reader, tmp, updates, remove)
            os.replace(tmp, output)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
    present = {f.name for f in reader.fields.values()}
    return GGUFWrite(output, dict(updates), tuple(sorted(remove & present)), tensors)
