"""The text short-context retention is read on: never the text the extension was fine-tuned on.

The offline default, ``python-docs``, is the Python Language Reference's topics that CPython ships in its standard
library (``pydoc_data.topics``, what ``help()`` prints): English technical prose, present wherever Python is, and
from another author, century and register than the Shakespeare plays ropectl's fine-tunes use by default. A
fine-tune on the plays lowers PPL on held-out plays by domain adaptation (24.2 -> 18.4 at 8k on the one real run);
on these topics it cannot. Its topics are short (79 of them, about 465k characters), so they are joined in name
order into documents long enough for the longest PPL length, and written once as JSON lines into ropectl's cache,
named by the Python version and the text's hash; eval-ppl reads that file like any local corpus.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ropectl.errors import DataError
from ropectl.report.spec import RETENTION_DEFAULT

CHARS_PER_TOKEN = 5  # above English BPE's ~4 characters a token, so a packed document outlasts the longest length


def retention_dataset(name: str, longest: int) -> str:
    """What eval-ppl's --dataset gets: the default's packed file, else ``name`` as given."""
    return str(python_docs(longest)) if name == RETENTION_DEFAULT else name


def python_docs(longest: int) -> Path:
    from ropectl.io.files import atomic_write_text
    from ropectl.runtime.cache import cache_root

    try:
        from pydoc_data.topics import topics
    except ImportError:  # a Python built without its documentation topics
        raise DataError("this Python has no pydoc_data (the default retention text)",
                        "pass --retention-dataset PATH (a .txt/.jsonl/.parquet corpus other than the fine-tune data)"
                        ) from None
    text = "".join(json.dumps({"text": doc}) + "\n" for doc in _packed(topics, CHARS_PER_TOKEN * longest))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    path = cache_root() / "retention" / f"python-docs-{version}-{digest}.jsonl"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    return path


def _packed(topics: Mapping[str, str], size: int) -> list[str]:
    docs, current = [], []
    for name in sorted(topics):
        current.append(topics[name])
        if sum(len(t) for t in current) >= size:
            docs.append("\n\n".join(current))
            current = []
    return docs + (["\n\n".join(current)] if current else [])


def check_not_finetune_data(config: Mapping[str, Any], dataset: str, docs: int) -> None:
    """Refuse retention read on the data EXTENDED was fine-tuned on, as its ropectl record names it."""
    from ropectl.schema.read import read_model_rope
    from ropectl.schema.record import Record

    tuned = Record.from_json(read_model_rope(config).record).finetune or {}
    data = tuned.get("data")
    if not isinstance(data, str) or not _same(data, dataset):
        return
    held = [str(d) for d in tuned.get("held_out") or []]
    ids = _document_ids(dataset, docs)
    trained = [d for d in ids if d not in held]
    raise DataError(f"the retention dataset '{dataset}' is the data EXTENDED was fine-tuned on (its ropectl record: "
                    f"{tuned.get('train_docs', '?')} training documents; {len(trained)} of the {len(ids)} retention "
                    "documents were trained on, the rest share their domain): retention read there is domain "
                    "adaptation", f"leave --retention-dataset out (the default, {RETENTION_DEFAULT}), or pass a "
                    "corpus from another source")


def _same(a: str, b: str) -> bool:
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    if pa.exists() and pb.exists():
        return pa.resolve() == pb.resolve()
    return a == b


def _document_ids(dataset: str, docs: int) -> list[str]:
    from ropectl.runtime.corpus import make_source

    out = []
    for doc_id, text in make_source(dataset).texts():
        if text.strip():
            out.append(doc_id)
        if len(out) >= docs:
            break
    return out
