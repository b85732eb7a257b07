"""What every task's results share: the append-only JSON-lines log a run writes as records finish (so an
interrupted run keeps them and --resume skips them), reading it back, and the final JSON / CSV / summary files."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ropectl.io.files import atomic_write_text
from ropectl.output import dumps


def append_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """One write per line (O_APPEND), flushed at once; other ranks may run where rank 0 made the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for record in records:
            os.write(fd, (dumps(record) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[Any]:
    """The parsed lines of ``path`` (none when it is missing); a torn or unparsable line is skipped."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def write_results(out: Path, names: tuple[str, str, str], rows: list[dict[str, Any]], columns: Sequence[str],
                  summary: Mapping[str, Any], json_columns: Sequence[str] = ("params",)) -> None:
    """``names`` = (results JSON, CSV, summary JSON), each written atomically; ``json_columns`` are JSON-encoded
    in the CSV."""
    results, table, summary_name = names
    atomic_write_text(out / results, dumps({"meta": summary.get("meta", {}), "results": rows}, indent=1) + "\n")
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([dumps(row[k], sort_keys=True) if k in json_columns else row[k] for k in columns])
    atomic_write_text(out / table, buf.getvalue())
    atomic_write_text(out / summary_name, dumps(summary, indent=2) + "\n")
