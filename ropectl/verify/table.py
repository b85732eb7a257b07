"""The terminal table of a verify run: one line per engine (verdict, PPL per length, largest band mean and max
|ΔNLL|), then each engine's why and serving line."""

from __future__ import annotations

from ropectl.verify.spec import VerifyResult


def table(result: VerifyResult) -> list[str]:
    heads = ["engine", "verdict", *(f"PPL@{n}" for n in result.lengths), "mean|ΔNLL|", "max|ΔNLL|", "tolerance"]
    rows = [heads]
    for r in result.rows:
        rows.append([r.engine, r.verdict, *(_num(r.ppl.get(n), ".4f") for n in result.lengths),
                     _num(r.mean_abs_dnll, ".2e"), _num(r.max_abs_dnll, ".2e"), _num(r.tolerance, ".2e")])
    widths = [max(len(row[i]) for row in rows) for i in range(len(heads))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    for r in result.rows:
        lines.append(f"{r.engine}: {r.why}")
        if r.serve_line:
            lines.append(f"  ran: {r.serve_line}")
    lines += [f"wrote {path}" for path in result.files]
    return lines


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)
