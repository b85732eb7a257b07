"""Re-patching a checkpoint that ``ropectl finetune`` wrote: its weights were trained for one RoPE (the record's
``finetune.method``), and a new one is untested on them. Said whenever the RoPE written differs from that one."""

from __future__ import annotations

from typing import Any

from ropectl.errors import RopectlError
from ropectl.readers.parity import rope_difference
from ropectl.rope.methods import parse_spec
from ropectl.schema.apply import ConfigPlan, plan_config
from ropectl.schema.record import Record


def finetuned_warning(plan: ConfigPlan, source: dict[str, Any]) -> str | None:
    """The line for a plan that rewrites the RoPE of a fine-tuned checkpoint (``source``: its config as read)."""
    tuned = Record.from_json(plan.before.record).finetune
    if not tuned or plan.kept:
        return None
    trained_for = str(tuned.get("method") or "")
    lengths = (None, plan.target_context) if plan.target_context else (None,)
    if _same_rope(plan, source, trained_for, lengths):
        return None
    new = plan.method.label if plan.method is not None else plan.rope.rope_type
    how = ", ".join(f"{k} {tuned[k]}" for k in ("mode", "steps") if tuned.get(k) is not None)
    return (f"these weights were fine-tuned for {trained_for or 'another RoPE'} (ropectl finetune's record in "
            f"config.json{': ' + how if how else ''}); {new} is untested on them: compare it with the checkpoint as "
            "it is (eval-ppl -m as-is -m " + new + ", or recommend) before shipping it, or fine-tune for it")


def _same_rope(plan: ConfigPlan, source: dict[str, Any], trained_for: str, lengths: tuple[int | None, ...]) -> bool:
    """Whether the new RoPE is the one the weights were trained for: the record's method planned on the same config
    (from the same recorded base), else the config's own RoPE where the record names no method ropectl knows."""
    try:
        tuned = plan_config(source, parse_spec(trained_for)).rope if trained_for else plan.before.rope
    except RopectlError:
        tuned = plan.before.rope
    return rope_difference({"main": plan.rope}, {"main": tuned}, lengths) is None
