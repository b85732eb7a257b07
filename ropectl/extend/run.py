"""``extend``'s order: every refusal before anything is written (the model, the target, OUT, the data split, the
budget, the device's memory), the plan, then the stages, each kept in OUT as it finishes (``state``), then the card.

Stages: data (written once) -> zero-shot (recommend) -> search (``--search``) -> finetune (``--finetune``) ->
ship (patch; a fine-tune ships its own checkpoint, written through the same patch path) -> GGUF (a GGUF source's
fine-tuned weights, llama.cpp's converter) -> acceptance (report) -> engines (verify) -> card.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropectl.errors import ConfigError, RopectlError, UsageError
from ropectl.extend import state
from ropectl.extend.plan import Plan, make_plan, plan_from_dict, plan_lines
from ropectl.extend.spec import ExtendSpec
from ropectl.extend.stages import Context

Say = Callable[[str], None]


def preflight(spec: ExtendSpec) -> tuple[Any, int]:
    """(the model's source, its trained context): refused when the target is not past it, or patch would not write
    a scaling on this config."""
    from ropectl.rope.methods import parse_spec
    from ropectl.runtime.lengths import length_label as label
    from ropectl.runtime.model import method_states, model_source, trained_context

    source = model_source(spec.model)
    trained = trained_context(source.config)
    if not trained:
        raise ConfigError(f"'{spec.model}' names no trained context", "extend a model whose config has "
                          "max_position_embeddings")
    if spec.target <= trained:
        raise UsageError(f"the target {label(spec.target)} is at or below the trained context {label(trained)}: "
                         "there is nothing to extend", f"pass a longer -t, e.g. -t {label(2 * trained)}")
    try:
        method_states(source.config, (parse_spec(f"yarn:{spec.target / trained:g}"),))
    except RopectlError as exc:
        raise ConfigError(f"ropectl cannot patch '{spec.model}': {exc.problem}", exc.fix or
                          "extend a model whose RoPE ropectl can patch (ropectl inspect MODEL says why)") from None
    return source, trained


def prepare(spec: ExtendSpec, say: Say) -> tuple[Plan, dict[str, Any], int, Any]:
    """Every refusal, then the plan (a resumed run's own): (plan, dealt documents or None, trained, source)."""
    from ropectl.eval.engines import DEFAULT_ENGINE
    from ropectl.eval.timing import timed_forward
    from ropectl.extend import data
    from ropectl.report.spec import RETENTION_DEFAULT
    from ropectl.runtime.model import load_tokenizer, resolve_device, resolve_dtype_choice

    source, trained = preflight(spec)
    state.check_out(spec)
    stored = state.read_record(spec.out) if spec.resume else {}
    if stored.get("plan"):
        return plan_from_dict(stored["plan"]), {}, trained, source
    device = resolve_device(spec.device)
    dtype = resolve_dtype_choice(spec.dtype, device)[0]
    timing = timed_forward(spec.model, spec.device, spec.dtype, trained, spec.engine or DEFAULT_ENGINE)
    plan = make_plan(spec, dict(source.config), trained, timing, dtype, device)
    tokenizer = load_tokenizer(source.path, source.kwargs)
    dealt = data.deal(data.read_docs(spec.dataset, tokenizer), spec.target, spec.seed)
    retention = spec.retention_dataset or RETENTION_DEFAULT
    dealt["retention"] = data.check_retention(dealt, retention, tokenizer, spec.target)
    return plan, dealt, trained, source


def run_extend(spec: ExtendSpec, say: Say | None = None) -> dict[str, Any]:
    """Everything ``ropectl extend`` does; returns extension.json's object (the plan alone with --dry-run)."""
    from ropectl.runtime.reuse import reusing

    say = say or (lambda line: None)
    with reusing():  # the timed forwards and the first sweeps share one load of the model
        plan, dealt, trained, _ = prepare(spec, say)
        for line in plan_lines(plan):
            say(line)
        if spec.dry_run:
            return {"plan": plan.to_dict(), "dry_run": True}
        splits = _data(spec, plan, dealt)
    ctx = Context(spec=spec, plan=plan, folders=splits.folders, trained=trained, say=say)
    from ropectl.extend.flow import stages
    from ropectl.runtime.interrupt import sigterm_as_interrupt

    with sigterm_as_interrupt():  # SIGTERM unwinds like Ctrl-C in every stage: finished work kept, resume printed
        record = stages(ctx)
    from ropectl.extend.card import write_card

    return write_card(spec.out, state.read_record(spec.out), record)


def _data(spec: ExtendSpec, plan: Plan, dealt: dict[str, Any]) -> Any:
    from ropectl.extend import data
    from ropectl.report.spec import RETENTION_DEFAULT

    root = spec.out / "data"
    retention = spec.retention_dataset or RETENTION_DEFAULT
    if not dealt and data.written(root):  # resumed: the split made once
        return data.read_splits(root, spec.dataset, retention)
    splits = data.write_splits(root, dealt, spec.dataset, retention)
    state.write_record(spec.out, {"identity": state.identity(spec), "plan": plan.to_dict(),
                                  "data": splits.to_dict()})
    return splits
