"""Rich rendering of core results (kept out of core so it never imports rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ropectl.output import number


def print_warning(console: Console, warning: str) -> None:
    """One warning line: never re-wrapped (a printed command must copy-paste whole) and never read as markup (JSON
    overrides hold brackets)."""
    from rich.text import Text

    console.print(Text.assemble(("warning:", "yellow"), " ", warning), soft_wrap=True)


def print_title(console: Console, title: str, style: str = "bold") -> None:
    """A table's title on its own lines, wrapped at spaces to the console (a rich title wraps to the table's width
    and breaks words there: ``high_fre/q_factor``); a word longer than a line (a long path) stays whole."""
    import textwrap

    from rich.text import Text

    lines = textwrap.wrap(title, max(20, console.width), break_long_words=False, break_on_hyphens=False)
    console.print(Text("\n".join(lines), style=style), soft_wrap=True)


def spaced(label: str) -> str:
    """A method label (``yarn:4,beta_fast=16``) with a space after each comma, so a title can wrap between options."""
    return label.replace(",", ", ")


def print_inspect(d: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(overflow="fold")  # wraps at spaces; never an ellipsis
    rotary = f"{d['rotary_dim']} of head_dim {d['head_dim']}" + (
        f" (partial {d['partial_rotary_factor']:g})" if d["partial_rotary_factor"] < 1 else "")
    heads = f"{d['num_attention_heads']} query / {d['num_key_value_heads']} key-value"
    scaling = d["rope_type"] if not d["scaling"] else d["rope_type"] + "  " + ", ".join(
        f"{k}={number(v)}" for k, v in d["scaling"].items() if not isinstance(v, list))
    if d.get("factor") is not None and "factor" not in d["scaling"]:
        scaling += f"  factor={number(d['factor'])} ({'implied' if 'implied' in d['factor_source'] else 'config'})"
    rows = [
        ("heads", heads),
        ("rotary dims", rotary),
        ("rope_theta", number(d["rope_theta"]) + (f"  (effective {number(d['effective_theta'])} at {d['seq_len']:,} tokens)"
                                                 if d["effective_theta"] != d["rope_theta"] else "")),
        ("scaling", scaling),
        ("attention factor", number(d["attention_factor"]) + (
            f"  (cos/sin); softmax scale x{d['softmax_scale']:.4g} = mscale(factor, mscale_all_dim)²"
            if d.get("softmax_scale", 1.0) != 1.0 else "")),
        ("trained context", number(d["trained_context"]) + (
            f"  [dim]({escape(d['trained_context_source'])})[/dim]" if d.get("trained_context_source") else "")),
        ("max positions", number(d["max_position_embeddings"])),
        *_finetune_rows(d.get("finetune")),
        *_card_rows(d.get("model_card")),
        ("layout", f"{d['layout']}  [dim]({d['layout_reason']})[/dim]"),
    ]
    _print_model(d, console, indent=max(len(key) for key, _ in rows) + 2)
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    _print_pairs(d, console)
    for label, layer in d["layers"].items():
        console.print(f"  [dim]{label}: {layer['rope_type']}, θ={number(layer['rope_theta'])}[/dim]")
    attention = d.get("attention") or {}
    for line in attention.get("features", ()):
        console.print(f"attention: {escape(line)}", soft_wrap=True)
    for line in attention.get("bounds", ()):
        console.print(f"length: {escape(line)}", soft_wrap=True)
    for warning in d["warnings"]:
        print_warning(console, warning)
    if d.get("model_card") and d["model_card"].get("caveat"):
        console.print(f"[dim]card: {escape(d['model_card']['caveat'])}[/dim]")
    for note in d.get("notes", ()):
        console.print(f"note: {escape(note)}", soft_wrap=True)
    if d.get("plot"):
        console.print(f"plot written to {d['plot']}")


def _finetune_rows(tuned: dict[str, Any] | None) -> list[tuple[str, str]]:
    """ropectl finetune's record: what the weights were trained with, and how the folder holds them."""
    if not tuned:
        return []
    parts = [str(tuned.get("method") or "?")]
    for key, unit in (("steps", "steps"), ("tokens", "tokens")):
        if isinstance(tuned.get(key), int):
            parts.append(f"{number(tuned[key])} {unit}")
    how = ", ".join(str(tuned[k]) for k in ("mode", "layout", "dtype") if tuned.get(k))
    return [("fine-tuned", escape(", ".join(parts) + (f"  ({how})" if how else "")))]


def _card_rows(card: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not card:
        return []
    presets = f"  [dim](presets: {', '.join(card['presets'])})[/dim]" if card["presets"] else ""
    note = f"  [dim]({escape(card['note'])})[/dim]" if card.get("note") and not card["presets"] else ""
    return [("model card", f"{escape(card['title'])}  {card['source']}{presets}{note}")]


def _print_model(d: dict[str, Any], console: Console, indent: int) -> None:
    """The model row, aligned with the table below but outside it: a path is never cut (``…/llm_smo…``) nor folded,
    so it copies whole."""
    from rich.text import Text

    line = Text.assemble(("model".ljust(indent), "bold cyan"), str(d["source"]),
                         (f"  ({d['kind']}, {d['model_type'] or 'no model_type'})", "dim"))
    console.print(line, soft_wrap=True)


def _print_pairs(d: dict[str, Any], console: Console) -> None:
    n = d["rotary_dim"] // 2
    never = d["pairs_never_rotating_in_trained_context"]
    first = d["first_non_rotating_pair"]
    waves = d["wavelengths"]
    console.print(
        f"\n{n} dimension pairs: wavelengths {number(waves[0])} → "
        f"{number(waves[-1]) if waves[-1] is not None else '∞ (unrotated pairs)'} tokens. "
        f"[green]{n - never}[/green] turn fully within the trained context; "
        f"[yellow]{never}[/yellow] never do" + (f" (pairs {first}–{n - 1})" if first is not None else "") + "."
    )
    if never:
        console.print("[dim]Those low-frequency pairs never saw a full turn in training: extension methods "
                      "interpolate them (linear, yarn, llama3) or stretch them (ntk, dynamic).[/dim]")
