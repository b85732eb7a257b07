"""A fine-tuned GGUF source's weights back in a GGUF, by llama.cpp's own converter (``convert_hf_to_gguf.py``).

The converter is found by ``ROPECTL_GGUF_CONVERTER`` (its path; ``ROPECTL_GGUF_PYTHON`` the Python that runs it,
with the ``gguf`` package), else on PATH, else in the compat tier's venv (``~/.cache/ropectl-compat/llamacpp-convert``,
tests/compat/engine_venvs.sh). It writes F32, F16, BF16 and Q8_0; a source at one of those is written at it, any
other quantization (Q4_1, Q4_K_M, ...) needs llama.cpp's ``llama-quantize`` and is written at F16, which the record
says. Where no converter is found, nothing is faked: the record says so and names the command to run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

NAME = "convert_hf_to_gguf.py"
COMPAT = Path(os.environ.get("ROPECTL_COMPAT_CACHE", Path.home() / ".cache" / "ropectl-compat")) / "llamacpp-convert"
# llama.cpp's general.file_type numbers (llama_ftype) of the types the converter itself writes
WRITES = {0: "f32", 1: "f16", 7: "q8_0", 32: "bf16"}


def find_converter() -> tuple[str, Path] | None:
    """(python, converter script), or None where none is installed."""
    given = os.environ.get("ROPECTL_GGUF_CONVERTER")
    if given:
        return os.environ.get("ROPECTL_GGUF_PYTHON", sys.executable), Path(given)
    on_path = shutil.which(NAME)
    if on_path:
        return sys.executable, Path(on_path)
    script = COMPAT / "share" / "llama.cpp" / NAME
    python = COMPAT / "bin" / "python"
    # the stamp is written last: a venv still being built (CI builds them while the suite runs) counts as absent
    done = (COMPAT / ".ropectl-stamp").is_file()
    return (str(python), script) if done and script.is_file() and python.exists() else None


def source_type(gguf: str) -> tuple[str, str]:
    """(the converter's --outtype for the source, why)."""
    from ropectl.io.gguf_kv import read_kv

    ftype = read_kv(Path(gguf)).get("general.file_type")
    if isinstance(ftype, int) and ftype in WRITES:
        return WRITES[ftype], f"the source's own type ({WRITES[ftype].upper()})"
    return "f16", (f"F16: the source's quantization (llama_ftype {ftype}) is not one the converter writes; "
                   "llama.cpp's llama-quantize makes it from this file")


def convert(folder: str, out: Path, source: str) -> dict[str, Any]:
    outtype, why = source_type(source)
    found = find_converter()
    command = f"python {NAME} {folder} --outfile {out} --outtype {outtype}"
    if found is None:
        return {"path": None, "note": f"llama.cpp's converter ({NAME}) is not installed here: no GGUF was written; "
                                      f"run: {command}", "command": command}
    python, script = found
    tmp = out.with_name(f".{out.name}.ropectl-tmp")
    proc = subprocess.run([python, str(script), folder, "--outfile", str(tmp), "--outtype", outtype],
                          capture_output=True, text=True, timeout=3600,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"path": None, "note": f"llama.cpp's converter failed ({tail[0][:200]}): no GGUF was written",
                "command": command}
    os.replace(tmp, out)
    return {"path": str(out), "outtype": outtype, "why": why, "converter": str(script)}
