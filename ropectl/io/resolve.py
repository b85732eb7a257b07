"""Model resolution: MODEL is a checkpoint folder, a ``.gguf`` file, or a Hugging Face hub id.

Everything downstream sees one :class:`ResolvedModel` with an HF-style config dict, whatever the
source, so ``inspect``, ``patch`` and ``eval-ppl`` share one code path.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropectl.errors import ConfigError, ModelNotFoundError

CONFIG_FILES = ("config.json", "generation_config.json")
ADAPTER_CONFIG = "adapter_config.json"  # a peft adapter folder (``ropectl finetune`` without --merge writes one)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


@dataclass(frozen=True)
class ResolvedModel:
    """A located model. ``path`` is the checkpoint folder, or the ``.gguf`` file itself."""

    source: str
    kind: str  # "folder" | "hub" | "gguf"
    path: Path
    config: Mapping[str, Any]
    gguf: Mapping[str, Any] = field(default_factory=dict)  # raw GGUF metadata (kind == "gguf")

    @property
    def is_gguf(self) -> bool:
        return self.kind == "gguf"

    @property
    def folder(self) -> Path:
        return self.path.parent if self.is_gguf else self.path

    def from_pretrained_args(self) -> tuple[str, dict[str, Any]]:
        """Arguments for transformers' ``from_pretrained`` that load exactly this model."""
        if self.is_gguf:
            return str(self.path.parent), {"gguf_file": self.path.name}
        return str(self.path), {}


def resolve_model(spec: str | os.PathLike[str], *, weights: bool = False) -> ResolvedModel:
    """Locate MODEL; with ``weights`` a hub id also fetches the weight and tokenizer files."""
    text = str(spec)
    path = Path(text).expanduser()
    if path.is_dir():
        return ResolvedModel(text, "folder", path, read_config(path))
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            from ropectl.io.gguf_meta import gguf_config, read_gguf_metadata

            meta = read_gguf_metadata(path)
            return ResolvedModel(text, "gguf", path, gguf_config(meta, path), meta)
        if path.name == "config.json":
            return ResolvedModel(text, "folder", path.parent, read_config(path.parent))
        raise ModelNotFoundError(f"'{text}' is a file but not a .gguf or config.json", "pass a checkpoint folder or a .gguf")
    if HUB_ID.match(text) and not text.startswith((".", "/", "~")):
        folder = _hub_download(text, weights)
        return ResolvedModel(text, "hub", folder, read_config(folder))
    raise ModelNotFoundError(
        f"model '{text}' not found: no such folder or file, and it is not a hub id (owner/name)",
        "pass a checkpoint folder, a .gguf file, or a hub id such as meta-llama/Llama-3.1-8B",
    )


def adapter_base(folder: Path) -> Path | None:
    """A peft adapter folder (adapter_config.json, no config.json): the local base model it names, whose config
    describes the model (transformers with peft loads the folder as base + adapter); None for anything else."""
    folder = Path(folder)
    if not (folder / ADAPTER_CONFIG).is_file() or (folder / "config.json").exists():
        return None
    try:
        base = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    # only a full model folder: an adapter naming another adapter (or itself) is not followed
    return Path(base) if isinstance(base, str) and base and (Path(base) / "config.json").is_file() else None


def config_folder(path: str | os.PathLike[str]) -> str:
    """The folder whose config.json transformers' AutoConfig should read for ``path`` (an adapter's base)."""
    base = adapter_base(Path(path)) if Path(path).is_dir() else None
    return str(base) if base is not None else str(path)


def read_config(folder: Path) -> dict[str, Any]:
    base = adapter_base(folder)
    if base is not None:
        return read_config(base)
    config = folder / "config.json"
    if config.exists() and not config.is_file():
        raise ConfigError(f"'{config}' is a folder or special file, not a JSON file",
                          "replace it with the model's config.json file")
    if not config.is_file():
        raise ConfigError(f"no config.json in '{folder}'", "point MODEL at a Hugging Face checkpoint folder")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read '{config}': {exc.strerror}", "check the file's permissions") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"'{config}' is not valid JSON ({exc})", "repair or re-download config.json") from None
    except RecursionError:  # a nesting bomb: no real config nests more than a few levels
        raise ConfigError(f"'{config}' nests too deeply to be a model config", "repair or re-download config.json") from None
    if not isinstance(data, dict):
        raise ConfigError(f"'{config}' is not a JSON object", "repair or re-download config.json")
    return data


def _hub_download(repo_id: str, weights: bool) -> Path:
    """Fetch only what is needed; honours HF_HUB_OFFLINE and HF_HOME through huggingface_hub."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    patterns = list(CONFIG_FILES)
    if weights:
        patterns += list(TOKENIZER_FILES) + ["*.safetensors", "*.safetensors.index.json"]
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except RepositoryNotFoundError:
        raise ModelNotFoundError(f"hub repository '{repo_id}' does not exist or is private",
                                 "check the id, or log in with `hf auth login`") from None
    except LocalEntryNotFoundError:
        raise ModelNotFoundError(
            f"'{repo_id}' is not in the local hub cache and the hub cannot be reached",
            "download it once with network access, or pass a local folder",
        ) from None
    except (HfHubHTTPError, OSError) as exc:
        raise ModelNotFoundError(f"could not fetch '{repo_id}' from the hub ({exc})", "check the network and the id") from None
