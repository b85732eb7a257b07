"""A checkpoint's weight files checked, cheaply, to hold the data they declare: headers and sizes, never values.

``patch`` calls this before it writes anything, so a truncated download is refused instead of being linked into
the output under a "verified" line. What each format allows without reading tensor data:

- safetensors: the header, checked as the safetensors library checks it (``safetensors_header``); the file size
  must be exactly 8 + header + the bytes the tensors declare.
- ``*.safetensors.index.json``: every shard it names exists and declares the tensors mapped to it.
- ``pytorch_model*.bin`` index: every shard it names exists (its tensor names live in a pickle: not read).
- PyTorch zip archives (``torch.save`` since 1.6): the zip's central directory, stored at the end of the file, is
  read and every member lies before it; a legacy (non-zip) pickle has no size to check without unpickling.
- GGUF: the metadata and tensor index, every tensor's bytes inside the file (``gguf_kv``).
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import CheckpointError, GGUFError
from ropectl.io.hub_cache import inside_checkpoint
from ropectl.io.safetensors_header import SafetensorsFile, read_header

ST_INDEX = "model.safetensors.index.json"
PT_INDEX = "pytorch_model.bin.index.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx")
TORCH_SUFFIXES = (".bin", ".pth", ".pt")
ZIP_MAGIC = b"PK\x03\x04"
ZIP_LOCAL_HEADER = 30  # bytes of a zip local file header before its name


@dataclass(frozen=True)
class WeightCheck:
    """What was checked: ``files`` (relative paths), the tensors their headers declare, and what was not."""

    files: tuple[str, ...] = ()
    tensors: int = 0  # declared by safetensors headers
    nbytes: int = 0
    indexes: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()  # "name (why)"

    def to_dict(self) -> dict[str, Any]:
        return {"checked": list(self.files), "indexes": list(self.indexes), "tensors": self.tensors,
                "bytes": self.nbytes, "not_checked": list(self.unchecked), "covers": self.covers()}

    def covers(self) -> str:
        """One phrase for the summary line: what 'verified' says about the weights."""
        if not self.files and not self.unchecked:
            return "no weight files in the folder (only the config was checked)"
        n = len(self.files)
        text = f"{n} weight files' headers and sizes checked (not their values)" if n != 1 else \
            "1 weight file's header and size checked (not its values)"
        if self.indexes:
            text += f", {len(self.indexes)} shard index{'es' * (len(self.indexes) != 1)} matched to them"
        if self.unchecked:
            text += f"; not checked: {', '.join(self.unchecked)}"
        return text


def weight_paths(folder: Path) -> Iterator[Path]:
    """Weight files and shard indexes under ``folder``, as ``link_tree`` walks it (no hidden entries, no linked
    folders); only regular files (after symlinks), so a FIFO named like a weight file never blocks a read."""
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (Path(root) / d).is_symlink())
        for name in sorted(n for n in names if not n.startswith(".")):
            path = Path(root) / name
            if (path.suffix in WEIGHT_SUFFIXES or name.endswith(".index.json")) and path.is_file():
                yield path


def check_weight_files(folder: Path) -> WeightCheck:
    """Refuse (CheckpointError, one line) a weight file that does not hold the data it declares."""
    folder = Path(folder)
    headers: dict[Path, SafetensorsFile] = {}
    files, unchecked, indexes, nbytes = [], [], [], 0
    paths = list(weight_paths(folder))
    for path in (p for p in paths if not p.name.endswith(".index.json")):
        rel = str(path.relative_to(folder))
        why = _check_one(path, headers)
        if why:
            unchecked.append(f"{rel} ({why})")
            continue
        files.append(rel)
        nbytes += path.stat().st_size
    for path in (p for p in paths if p.name.endswith(".index.json")):
        if _check_index(path, folder, headers):
            indexes.append(str(path.relative_to(folder)))
    return WeightCheck(tuple(files), sum(len(h.tensors) for h in headers.values()), nbytes, tuple(indexes),
                       tuple(unchecked))


def _check_one(path: Path, headers: dict[Path, SafetensorsFile]) -> str | None:
    """Check one weight file; returns why it could not be checked, or None when it was."""
    if path.suffix == ".safetensors":
        headers[path] = read_header(path)
        return None
    if path.suffix == ".gguf":
        from ropectl.io.gguf_meta import read_gguf_metadata

        try:
            read_gguf_metadata(path)  # walks the tensor index and refuses bytes past the end of the file
        except GGUFError as exc:
            raise CheckpointError(exc.problem, exc.fix) from None
        return None
    if path.suffix in TORCH_SUFFIXES:
        return _check_torch_zip(path)
    return f"{path.suffix} files are not checked"


def _check_torch_zip(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise CheckpointError(f"cannot read '{path}': {exc.strerror}", "check the file's permissions") from None
    if magic != ZIP_MAGIC:
        return "not a zip archive: a legacy pickle or another format, whose size cannot be checked without unpickling"
    try:
        with zipfile.ZipFile(path) as archive:
            members, directory = archive.infolist(), archive.start_dir
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CheckpointError(f"'{path}' starts as a zip archive (a PyTorch checkpoint) but its end does not read as "
                              f"one ({exc}): truncated or corrupt", "re-download or re-save it; nothing was written"
                              ) from None
    for info in members:
        end = info.header_offset + ZIP_LOCAL_HEADER + len(info.filename.encode("utf-8")) + info.compress_size
        if end > directory:
            raise CheckpointError(f"'{path}': member '{info.filename}' runs past the archive's directory "
                                  "(truncated or corrupt)", "re-download or re-save it; nothing was written")
    return None


def _check_index(path: Path, folder: Path, headers: dict[Path, SafetensorsFile]) -> bool:
    """A shard index: its shards exist (and, for safetensors, declare the tensors it maps to them)."""
    if not path.name.endswith((".safetensors.index.json", ".bin.index.json")):
        return False
    index = read_index(path)
    rel = str(path.relative_to(folder))
    shard_paths(path.parent, rel, index)
    if path.name.endswith(".bin.index.json"):
        return True
    for tensor, shard in index["weight_map"].items():
        shard_path = path.parent / shard
        if shard_path not in headers:  # a shard not named *.safetensors: read here, once
            headers[shard_path] = read_header(shard_path)
        if tensor not in headers[shard_path].tensors:
            raise CheckpointError(f"{rel} maps tensor '{tensor}' to '{shard}', whose header does not declare it",
                                  "re-download the checkpoint (the index and the shards are from different saves)")
    return True


def read_index(path: Path) -> dict[str, Any]:
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointError(f"cannot read '{path}' ({type(exc).__name__})", "repair or re-download the index") from None
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise CheckpointError(f"'{path}' has no weight_map object", "repair or re-download the index")
    return index


def shard_paths(folder: Path, index_name: str, index: Mapping[str, Any]) -> list[Path]:
    """The shards an index names, in order, each a file inside ``folder`` (or its hub cache blobs)."""
    shards: list[str] = []
    for shard in index["weight_map"].values():
        if shard not in shards:
            shards.append(shard)
    paths = []
    for shard in shards:
        if not isinstance(shard, str) or not shard or Path(shard).is_absolute() or ".." in Path(shard).parts \
                or not inside_checkpoint(folder / shard, folder):
            raise CheckpointError(f"{index_name} names shard {shard!r}, outside the checkpoint folder",
                                  "shard names must be plain file names inside the folder; repair the index")
        if not (folder / shard).is_file():
            raise CheckpointError(f"shard '{shard}' listed in {index_name} is missing from '{folder}'",
                                  "download the missing shard (or the whole checkpoint) again")
        paths.append(folder / shard)
    return paths
