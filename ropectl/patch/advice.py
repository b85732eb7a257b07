"""What patch says beside what it writes, where a config's own keys bound it: the rope keys it carried unchanged,
a context shorter than the one the checkpoint ships, the refusal to scale a Dual Chunk Attention model, and what
replacing a shipped scaling drops."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropectl import families
from ropectl.errors import UsageError
from ropectl.rope.methods import effective_factor
from ropectl.schema.apply import ConfigPlan


def lowered(plan: ConfigPlan) -> list[str]:
    """A patch whose context is shorter than the one the checkpoint ships says so loudly, with how to keep it."""
    shipped, target, trained = plan.before.rope.max_position_embeddings, plan.target_context, plan.trained_context
    if not shipped or not target or target >= shipped:
        return []
    from ropectl.rope.methods import as_is_name, get_method

    if plan.method is not None and get_method(plan.method.name).unscaled:  # no factor to stretch: -t cannot keep it
        how = (f"{plan.method.name} is the unscaled base, which serves the trained length; to keep the shipped "
               f"length, ship the checkpoint as it is (-m {as_is_name()}, or --emit without -m)")
    else:
        keep = f" (a factor of at least {shipped / trained:,.4g} from the trained {trained:,})" if trained else ""
        how = f"pass -t {shipped} to keep the shipped length{keep}"
    return [f"LOWERED: the patched config serves {target:,} tokens where the shipped one serves {shipped:,} "
            f"(max_position_embeddings {shipped:,} -> {plan.rope.max_position_embeddings or target:,}); servers then "
            f"refuse or truncate longer prompts; {how}"]


def carried(plan: ConfigPlan) -> list[str]:
    """The shipped rope keys a patch kept (``schema.apply.carried_keys``), named where they are not routine."""
    own = {k: v for k, v in plan.carried.items() if k not in families.SCALING_ROPE_KEYS | families.STRUCTURAL_ROPE_KEYS}
    if not own:
        return []
    with_them = [f"{k}={v}" for k, v in plan.carried.items() if k in families.SCALING_ROPE_KEYS]
    read = f"; the model's attention reads it with {', '.join(with_them)}, kept too" if with_them else ""
    return [f"kept unchanged from the shipped rope section: {', '.join(f'{k}={v}' for k, v in own.items())} (the "
            f"model's own, which no scaling method writes{read})"]


def refuse_dual_chunk(config: Mapping[str, Any]) -> None:
    """A Dual Chunk Attention model is never scaled: the engines that run DCA discard a rope scaling beside it, and
    those that scale it run no DCA (``families.attention``, ``readers.vllm`` / ``sglang``)."""
    from ropectl.families.attention import DCA_KEY, attention_features
    from ropectl.schema.layers import text_config

    dca = attention_features(text_config(config)).dual_chunk
    if dca is None:
        return
    raise UsageError(
        f"this model uses Dual Chunk Attention ({DCA_KEY}: chunk {dca.chunk_size:,}, local {dca.local_size:,}): vLLM "
        "and SGLang build their dual-chunk rotary embedding whenever that key is present and discard any rope scaling "
        "beside it, while transformers and llama.cpp run no DCA and would apply it: a scaling written or printed here "
        "would be discarded or change what the model is", "see DCA's own lengths and which engine versions serve it "
        f"with `ropectl inspect MODEL --engines`; to scale its plain RoPE instead, patch a copy of the checkpoint whose "
        f"config.json has no {DCA_KEY}")


def replaced(plan: ConfigPlan) -> str:
    """What a replacement drops, and where the new scaling counts from."""
    old, start = plan.before.rope, plan.base.trained_context
    if plan.composed_from_record:
        return f"the existing '{old.rope_type}' scaling was replaced, not stacked (from the base recorded by ropectl)"
    factor = effective_factor(old)
    own = f"'{old.rope_type}' x{factor:g}" if factor else f"'{old.rope_type}'"
    shipped = max(int(round((start or 0) * (factor or 1.0))), int(old.max_position_embeddings or 0))
    line = (f"the existing {own} scaling ({start} -> {shipped}) was replaced, not stacked: its interpolation is "
            f"dropped, and the new {plan.rope.rope_type} counts from the original {start} (-> {plan.target_context}), "
            "with the config's theta as base")
    if plan.target_context and plan.target_context <= shipped:
        line += f"; note the new context {plan.target_context} is not beyond the shipped {shipped}"
    return line
