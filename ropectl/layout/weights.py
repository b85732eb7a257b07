"""Find a checkpoint's weight files and read them as one store: safetensors (single or sharded) or torch .bin/.pth."""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ropectl.errors import CheckpointError, pickle_refused
from ropectl.io.safetensors_header import SafetensorsFile, read_header
from ropectl.io.weight_files import PT_INDEX, ST_INDEX, WEIGHT_SUFFIXES, read_index, shard_paths
from ropectl.layout.io import ITEMSIZE, read_tensor

if TYPE_CHECKING:
    import torch

TORCH_SINGLE = ("pytorch_model.bin", "model.bin", "model.pth", "model.pt")


@dataclass
class WeightStore:
    """All tensors of a checkpoint: name -> (dtype, shape), readable one at a time."""

    kind: str  # "safetensors" | "torch"
    files: tuple[Path, ...]
    index: Mapping[str, Any] | None = None
    headers: dict[Path, SafetensorsFile] = field(default_factory=dict)
    torch_files: dict[Path, Mapping[str, Any]] = field(default_factory=dict)
    where: dict[str, Path] = field(default_factory=dict)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        if self.kind == "safetensors":
            return {n: self.headers[p].tensors[n].shape for n, p in self.where.items()}
        return {n: tuple(self.torch_files[p][n].shape) for n, p in self.where.items()}

    def get(self, name: str) -> torch.Tensor:
        path = self.where[name]
        if self.kind == "safetensors":
            return read_tensor(self.headers[path], name)
        return self.torch_files[path][name]

    def nbytes(self) -> int:
        if self.kind == "safetensors":
            return sum(h.data_len for h in self.headers.values())
        return sum(t.numel() * t.element_size() for sd in self.torch_files.values() for t in sd.values())


def open_weights(folder: Path) -> WeightStore:
    """Locate and open the weights; every header is checked before anything is written."""
    store = _locate(Path(folder))
    for path in store.files:
        if store.kind == "safetensors":
            store.headers[path] = _known_dtypes(read_header(path))
            names = list(store.headers[path].tensors)
        else:
            store.torch_files[path] = load_torch(path)
            names = list(store.torch_files[path])
        for name in names:
            if name in store.where:
                raise CheckpointError(f"tensor '{name}' is stored twice ({store.where[name].name}, {path.name})",
                                      "repair the checkpoint so each tensor is in one shard")
            store.where[name] = path
    return store


def _known_dtypes(header: SafetensorsFile) -> SafetensorsFile:
    """Refuse a dtype whose rows cannot be permuted byte-wise (sub-byte F4/F6, FNUZ floats torch cannot read)."""
    for info in header.tensors.values():
        if info.dtype not in ITEMSIZE:
            raise CheckpointError(
                f"tensor '{info.name}' in '{header.path}' has dtype '{info.dtype}', which convert-layout cannot permute "
                f"(it handles: {', '.join(ITEMSIZE)})", "re-save the checkpoint with one of those dtypes; nothing was written")
    return header


def _locate(folder: Path) -> WeightStore:
    for index_name, kind in ((ST_INDEX, "safetensors"), (PT_INDEX, "torch")):
        if (folder / index_name).is_file():
            index = read_index(folder / index_name)
            return WeightStore(kind, tuple(shard_paths(folder, index_name, index)), index)
    singles = sorted(folder.glob("*.safetensors"))
    if len(singles) == 1:
        return WeightStore("safetensors", (singles[0],))
    if len(singles) > 1:
        raise CheckpointError(f"'{folder}' holds {len(singles)} .safetensors files but no {ST_INDEX}",
                              "add the index, or keep one file")
    for name in TORCH_SINGLE:
        if (folder / name).is_file():
            return WeightStore("torch", (folder / name,))
    raise CheckpointError(f"no weights found in '{folder}' (looked for {ST_INDEX}, *.safetensors, {PT_INDEX}, "
                          f"{', '.join(TORCH_SINGLE)})", "point MODEL at a checkpoint folder with its weights")


def load_torch(path: Path) -> dict[str, torch.Tensor]:
    """Weights-only, memory-mapped load: never a full unpickle, never the whole file in RAM."""
    import torch

    try:
        with warnings.catch_warnings():  # torch warns about raw pickles on stderr: the refusal below says it all
            warnings.simplefilter("ignore")
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:  # legacy (non-zip) files cannot be mmapped
                if "mmap" not in str(exc):
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise pickle_refused(f"'{path.name}'", exc) from None
    except (OSError, RuntimeError, EOFError) as exc:
        raise CheckpointError(f"cannot read '{path.name}' as a PyTorch checkpoint ({exc})",
                              "re-download or re-save it") from None
    if isinstance(obj, dict) and len(obj) == 1 and isinstance(next(iter(obj.values())), dict):
        obj = next(iter(obj.values()))  # {"state_dict": {...}} / {"model": {...}} wrappers
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"'{path.name}' is not a state dict of tensors", "re-save it as a plain state dict")
    return obj


def output_name(path: Path, kind: str) -> str:
    """Safetensors stay as named; torch files become ``model[-0000k-of-0000n].safetensors``."""
    if kind == "safetensors":
        return path.name
    stem = path.name.split(".")[0]
    suffix = stem[len("pytorch_model"):] if stem.startswith("pytorch_model") else ""
    return f"model{suffix}.safetensors"


def other_files(folder: Path, used: tuple[Path, ...]) -> tuple[list[Path], list[str]]:
    """(files to copy, names skipped): configs and tokenizers come along; other weights and folders do not."""
    used_names = {p.name for p in used} | {ST_INDEX, PT_INDEX}
    copy, skipped = [], []
    for entry in sorted(Path(folder).iterdir()):
        if entry.name in used_names or entry.name.startswith("."):
            continue
        if entry.is_dir() or entry.suffix in WEIGHT_SUFFIXES or entry.name.endswith(".index.json"):
            skipped.append(entry.name + ("/" if entry.is_dir() else ""))
        elif entry.is_file():
            copy.append(entry)
    return copy, skipped
