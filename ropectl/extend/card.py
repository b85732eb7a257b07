"""OUT/EXTENSION.md and OUT/extension.json: report's card of the shipped model, plus what was done and why (every
stage's settings and documents, the search's trials, the fine-tune's loss, the serving lines with verify's verdict).
The keys of extension.json are documented in docs/reference/extend.md; SCHEMA changes when one does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ropectl.io.files import atomic_write_text
from ropectl.output import dumps

SCHEMA = 1
ENGINES = ("transformers", "vllm", "sglang", "llama.cpp")
MARKDOWN, JSON = "EXTENSION.md", "extension.json"


def serve_lines(shipped: dict[str, Any], gguf: str | None, target: int) -> dict[str, str]:
    """Each engine's line for the shipped checkpoint as it is (patch's --emit of the as-is method)."""
    from ropectl.errors import RopectlError
    from ropectl.patch import PatchSpec, patch_checkpoint
    from ropectl.rope.methods import as_is_name, parse_spec

    path = shipped["path"]
    out = {"transformers": transformers_line(path)}
    for engine in ENGINES[1:]:
        model = gguf if gguf and loads_gguf(engine) else path
        try:
            emitted = patch_checkpoint(PatchSpec(model=model, method=parse_spec(as_is_name()), emit=engine)).emit
            out[engine] = str((emitted or {}).get("command") or "")
        except RopectlError as exc:
            out[engine] = f"# not for {engine}: {exc.problem}"
    return out


def transformers_line(path: str) -> str:
    """transformers' line for the shipped checkpoint. A GGUF's scaling is passed as config overrides: transformers'
    GGUF reader maps freq_base and the context length only, so the file alone would load unscaled
    (``runtime.model.gguf_rope_overlay``)."""
    if not path.lower().endswith(".gguf"):
        return f'AutoModelForCausalLM.from_pretrained("{path}")  # reads its RoPE from config.json'
    from ropectl.runtime.model import model_source

    config, file = model_source(path).config, Path(path)
    rope = dict(config.get("rope_parameters") or {})
    if rope.get("rope_type", "default") == "default":
        return (f'AutoModelForCausalLM.from_pretrained("{file.parent}", gguf_file="{file.name}")  # theta and '
                "context from the GGUF")
    return (f'AutoModelForCausalLM.from_pretrained("{file.parent}", gguf_file="{file.name}", rope_parameters={rope!r}, '
            f'max_position_embeddings={config["max_position_embeddings"]})  # transformers 5; the GGUF alone loads '
            "unscaled")


def loads_gguf(engine: str) -> bool:
    """Whether the engine serves a GGUF file (an evaluation engine's capability; SGLang is none here)."""
    from ropectl.eval.engines import engine_names, get_engine

    return engine in engine_names() and get_engine(engine).loads_gguf


def engine_verdicts(engines: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = {r["engine"]: r for r in engines.get("rows", [])}
    out = {"transformers": {"verdict": "measured", "why": "acceptance (report) ran on transformers"}}
    for engine in ENGINES[1:]:
        row = rows.get(engine)
        out[engine] = {"verdict": row["verdict"], "why": row.get("why")} if row else \
            {"verdict": "not checked", "why": "not in --serve-with" if not engines.get("note") else engines["note"]}
    return out


def build(record: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    accept = result["acceptance"]
    gguf = (result.get("gguf") or {}).get("path")
    shipped = result["ship"]
    if gguf is None and str(shipped["path"]).lower().endswith(".gguf"):
        gguf = shipped["path"]
    lines = serve_lines(shipped, gguf, record["plan"]["target"])
    verdicts = engine_verdicts(result["engines"])
    return {
        "schema": SCHEMA, "model": record["identity"]["model"], "target": record["plan"]["target"],
        "trained_context": record["plan"]["trained"], "verdict": {"status": accept["status"], "line": accept["verdict"]},
        "shipped": {**shipped, "gguf": gguf, "gguf_note": (result.get("gguf") or {}).get("note") or
                    (result.get("gguf") or {}).get("why")},
        "plan": record["plan"], "data": record["data"], "decisions": result["decisions"],
        "zero_shot": result["zero-shot"], "search": result.get("search"), "finetune": result.get("finetune"),
        "acceptance": accept["card"], "engines": result["engines"],
        "serve": {e: {"line": lines[e], **verdicts[e]} for e in ENGINES},
    }


def write_card(out: Path, record: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    from ropectl.extend.state import claim_all
    from ropectl.report.card import finite

    data = finite(build(record, result))
    folder = Path(result["acceptance"]["folder"])
    report_md = plots_from(out, folder, (folder / MARKDOWN).read_text(encoding="utf-8"))
    atomic_write_text(out / JSON, dumps(data, indent=2) + "\n")
    atomic_write_text(out / MARKDOWN, markdown(data, report_md))
    claim_all(out)
    return {**data, "out": str(out)}


def plots_from(out: Path, folder: Path, report_md: str) -> str:
    """report's card with its plots linked from OUT (the card sits in OUT, the plots beside report's own card)."""
    from ropectl.report.card import PPL_PLOT, SCORE_PLOT

    rel = Path(folder).resolve().relative_to(Path(out).resolve()).as_posix()
    for name in (SCORE_PLOT, PPL_PLOT):
        report_md = report_md.replace(f"]({name})", f"]({rel}/{name})")
    return report_md


def markdown(d: dict[str, Any], report_md: str) -> str:
    lines = [f"# Extension of {d['model']} to {d['target']:,} tokens", "",
             f"**Verdict: {d['verdict']['line']}**", "", f"Shipped: `{d['shipped']['path']}` "
             f"({d['shipped'].get('method')}{', fine-tuned' if d['shipped'].get('finetuned') else ''})", ""]
    if d["shipped"].get("gguf") or d["shipped"].get("gguf_note"):
        note = d["shipped"].get("gguf_note")
        lines += [f"GGUF: {d['shipped'].get('gguf') or 'not written'}" + (f" — {note}" if note else ""), ""]
    lines += ["## What was done and why", "", *_stages(d), "", "## Data", "",
              "| split | source | documents | ids |", "|---|---|---|---|"]
    for name, split in d["data"].items():
        ids = ", ".join(split["ids"][:6]) + (" ..." if len(split["ids"]) > 6 else "")
        lines.append(f"| {name} | {split['source']} | {len(split['ids'])} | {ids} |")
    lines += ["", "## Serving", "", "| engine | verify | line |", "|---|---|---|"]
    for engine, row in d["serve"].items():
        lines.append(f"| {engine} | {row['verdict']} | `{row['line']}` |")
    return "\n".join(lines) + "\n\n## Acceptance (report)\n\n" + report_md.split("\n", 1)[-1]


def _stages(d: dict[str, Any]) -> list[str]:
    z = d["zero_shot"]
    carried = z["carries"]
    out = [f"- **zero-shot** (recommend): winner `{z['winner']}`"
           + (f"; carried on: `{carried}` ({z['carry_why']})" if carried != z["winner"] else "")
           + f"; `{carried}` {'reached' if z['reached'] else 'not reached'}: {z['why']}."]
    for name in ("search", "finetune"):
        dec = d["decisions"][name]
        out.append(f"- **{name}**: {'ran' if dec['ran'] else 'skipped'} ({dec['why']}).")
    if d["search"]:
        s = d["search"]
        stopped = s.get("stopped_trials") or 0
        out.append(f"  - space {s['space']}, {len(s['trials'])} trials" +
                   (f" ({stopped} stopped by an interrupt, run again on --resume)" if stopped else "") +
                   f"; best `{s['spec']}` (closed form `{s['closed_form']}`, "
                   f"{'beats it' if s['beats'] else 'does not beat it'} on held-out documents)")
        for t in s["trials"]:
            out.append(f"    - trial {t['number']}: {t['state']}, `{t['spec']}`, fitness {t['fitness']}")
    if d["finetune"]:
        f = d["finetune"]
        out.append(f"  - {f['mode']} window {f['window']:,}, {f['steps']} steps ({f['tokens']:,} tokens, lr "
                   f"{f['lr']:g}) of `{f['method']}`; final loss {f['final_loss']}")
    plan = d["plan"]
    for s in plan["stages"]:
        out.append(f"- plan {s['name']}: {s['runs']}, {s['size']}, ~{s['minutes']} min, peak "
                   f"{s['peak_bytes'] / 2**30:.2f} GiB, longest held {s['longest']:,}" +
                   (f" ({s['note']})" if s['note'] else ""))
    out += [f"- cut: {c}" for c in plan["cut"]]
    return out
