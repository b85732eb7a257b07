"""What a recognised model card adds to a patch: where the trained context came from, and the card's caveat with the
command that measures it on the user's own model (``ropectl.families.cards`` holds the cards)."""

from __future__ import annotations

import shlex
from typing import Any

from ropectl.families import cards
from ropectl.schema.apply import ConfigPlan


def measure_lengths(trained: int) -> str:
    """Two lengths well inside the trained context, where a static scaling's cost on short inputs shows: 1/16 and
    1/4 of it (2k and 8k for Qwen3's 32,768), as k where whole (every length flag reads both forms)."""
    lengths = (max(2, trained // d) for d in (16, 4))
    return ",".join(f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in lengths)


def measure_command(model: str, label: str, trained: int | None) -> str:
    """The eval-ppl run that compares the unscaled model with ``label`` on short texts (eval-ppl's own lengths
    where the trained context is unknown)."""
    from ropectl.rope.methods import unscaled_name

    lengths = f" -l {measure_lengths(trained)}" if trained else ""
    return f"ropectl eval-ppl {shlex.quote(model)} -m {unscaled_name()} -m {shlex.quote(label)}{lengths}"


def card_lines(model: str, plan: ConfigPlan) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """The card recognised for the patched config, and the notes patch prints on stderr."""
    notes = [plan.before.card_note] if plan.before.card_note else []
    card = cards.by_name(plan.before.card) if plan.before.card else None
    if card is None:
        return None, tuple(notes)
    name = plan.method.name if plan.method else plan.rope.rope_type
    label = plan.method.label if plan.method else name
    caveat = card.caveat_for(name)
    out: dict[str, Any] = {"name": card.name, "title": card.title, "source": card.source,
                           "native_context": card.native_context, "caveat": None, "measure": None}
    if plan.before.native_context:
        notes.append(f"trained context {plan.before.native_context:,} from the {card.title} model card "
                     f"({card.native_note}; {card.source})")
    if caveat is not None:
        out["caveat"], out["measure"] = caveat.text, measure_command(model, label, plan.base.trained_context)
        notes.append(f"{card.title}: {caveat.text}; measure it on this model: {out['measure']}")
    return out, tuple(notes)
