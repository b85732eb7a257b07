"""What the serving engines need for a patched checkpoint: each reader's view of the written config, the commands
that make vLLM and lm-eval serve the target, and the refusal of a method the model's vLLM code cannot build."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ropectl.errors import MethodError
from ropectl.io.resolve import ResolvedModel
from ropectl.patch.spec import PatchSpec
from ropectl.patch.verify import expected_ropes
from ropectl.readers.vllm import emit_vllm
from ropectl.rope.methods import TARGET, TRAINED, Method, owner_of
from ropectl.schema.apply import ConfigPlan


def reader_views(spec: PatchSpec, plan: ConfigPlan, model: ResolvedModel) -> list[Any]:
    """Every known reader's reading of the written config, against the RoPE ropectl means it to hold."""
    if model.is_gguf or spec.emit != "config":
        return []
    from ropectl.readers.parity import engine_views

    lengths = (None, plan.target_context) if plan.target_context else (None,)
    return engine_views(plan.config, expected_ropes(plan.rope, plan.layer_ropes), lengths)


def emit_vllm_for(where: str, plan: ConfigPlan, target: int) -> tuple[dict[str, Any], list[str]]:
    from ropectl.readers import vllm as vllm_reader

    return emit_vllm(where, plan.rope, plan.layer_ropes, plan.before.partial_rotary_factor, target,
                     plan.before.model_type, vllm_reader.override_path(plan.config))


def check_builds(plan: ConfigPlan, reader_module: Any) -> list[str]:
    """An emitted line whose overrides the engine's model code cannot build would print a command that crashes:
    refused. Where it builds other RoPE from the overrides, the warning says how. For the readers whose line
    overrides the config as their ``predict`` reads it (``CHECKS_OVERRIDES``: vLLM); SGLang checks its own line."""
    from ropectl.readers.parity import disagreement_warnings, engine_views

    views = [v for v in engine_views(plan.config, expected_ropes(plan.rope, plan.layer_ropes),
                                     (None, plan.target_context)) if v.reader.engine == reader_module.ENGINE]
    newest = next(v for v in views if v.reader is reader_module.newest())
    if not newest.reading.ok:
        raise MethodError(f"{newest.reader.label} cannot serve this: {newest.reading.error}",
                          f"pick a method this model's {reader_module.ENGINE} code builds (yarn for DeepSeek and gpt-oss)")
    fix = f"the command printed is that static equivalent, for {plan.target_context} tokens"
    return disagreement_warnings(with_dynamic_fix([v for v in views if not v.too_short], fix))  # it sets the length


def with_dynamic_fix(views: list[Any], fix: str) -> list[Any]:
    """Views where vLLM serves dynamic as static get this run's own fix, not the reader table's ``MODEL``/``F``
    template."""
    from ropectl.readers import sglang as sglang_reader
    from ropectl.readers import vllm as vllm_reader

    sglang_fix = "serve the static equivalent for one length: the same `ropectl patch` with --emit sglang"
    return [replace(v, fix=fix) if v.differs and vllm_reader.STATIC_DYNAMIC_NOTE in v.reading.notes else
            replace(v, fix=sglang_fix) if v.differs and sglang_reader.STATIC_DYNAMIC_NOTE in v.reading.notes else v
            for v in views]


def static_dynamic_command(spec: PatchSpec, plan: ConfigPlan, model: ResolvedModel) -> str:
    """The ``ropectl patch ... --emit vllm`` line for this model and factor, as run on what was written (or, for a
    dry run, on the source again; its --replace-existing then still needed)."""
    from ropectl.readers import vllm as vllm_reader

    where = str(spec.output or model.folder or spec.model)
    return vllm_reader.static_dynamic_fix(where, plan.rope.factor, spec.replace_existing and not spec.writes)


def vllm_serving(spec: PatchSpec, plan: ConfigPlan, model: ResolvedModel) -> tuple[Any, list[str]]:
    """The newest vLLM's serving length for the written config; when it is not the target, the exact override.
    Returns the reader that spoke (None when it had nothing to say) and its lines."""
    target = int(plan.target_context or 0)
    if model.is_gguf or spec.emit != "config" or not target:
        return None, []
    from ropectl.readers import vllm as vllm_reader

    reader = vllm_reader.newest()
    reading = vllm_reader.predict(reader, plan.config)
    # where vLLM computes other RoPE than transformers (dynamic is static there), the command is printed even at the
    # target length: it is what serves the method's meaning at that length
    exact = vllm_reader.cannot_serve(plan.rope.rope_type) is None
    if not reading.ok or (reading.serving_length == target and exact):
        return None, []
    served = int(reading.serving_length or 0)
    try:
        emitted, notes = emit_vllm_for(str(spec.output or model.folder or spec.model), plan, target)
    except MethodError as exc:  # per-layer partial rotary: no override command to print, so say what is known
        return reader, [f"{reader.label}: derives a max length of {served} from this config, not the target {target}; "
                        f"ropectl prints no override for it: {exc.problem}"]
    if served > target and exact:  # longer is still the same RoPE: a cap, not a fix
        return None, [f"{reader.label}: accepts up to {served} tokens from this config (max_position_embeddings x "
                      f"factor), above the target {target}; to cap it there: {emitted['command']}"]
    return reader, [f"{reader.label}: derives a max length of {served} from this config, not the target {target}; "
                    f"serve it with: {emitted['command']}", *notes]


def lm_eval_serving(spec: PatchSpec, plan: ConfigPlan, model: ResolvedModel, views: list[Any]) -> list[str]:
    """lm-eval left-truncates prompts past max_position_embeddings: when that is below the target, the command."""
    from ropectl.readers import lm_eval

    short = next((v for v in views if v.reader.engine == lm_eval.ENGINE and v.too_short), None)
    if short is None:
        return []

    target = int(plan.target_context or 0)
    where = str(spec.output or model.folder or spec.model)
    return [f"{short.reader.label}: takes max_position_embeddings ({short.reading.serving_length}) as the longest "
            f"prompt and left-truncates longer ones; run it with: {lm_eval.command(where, target)}"]


def legacy_form_hint(spec: PatchSpec, plan: ConfigPlan, views: list[Any]) -> list[str]:
    """The target form costs transformers 4.43-4.50 their yarn reading: name the opt-in that serves them."""
    owner = owner_of(plan.rope.rope_type)
    if spec.max_positions != TARGET or owner is None or not _forms_differ(owner):
        return []
    from ropectl.readers import transformers as hf_reader

    if not any(v.reader.engine == hf_reader.ENGINE and v.reading.ok and v.differs and not v.too_short for v in views):
        return []
    return ["for the transformers releases named above, patch with --max-positions trained (max_position_embeddings "
            "stays the trained length; lm-eval then needs max_length=N and vLLM the override patch prints)"]


def _forms_differ(method: Method) -> bool:
    """Whether --max-positions trained writes another max_position_embeddings than the target form (yarn, linear)."""
    return method.written_max_positions(TRAINED) != method.written_max_positions(TARGET)


def serving_warnings(spec: PatchSpec, plan: ConfigPlan, model: ResolvedModel, views: list[Any]) -> list[str]:
    """Each reader that differs, once per run of versions, then the commands that serve the target; a reader whose
    only trouble is a short default length is said once, by the line that carries its command."""
    from ropectl.readers.parity import disagreement_warnings

    views = with_dynamic_fix(views, static_dynamic_command(spec, plan, model))
    said, vllm_lines = vllm_serving(spec, plan, model)
    lm_eval_lines = lm_eval_serving(spec, plan, model, views)
    from ropectl.readers import lm_eval

    spoken = ({said.engine} if said else set()) | ({lm_eval.ENGINE} if lm_eval_lines else set())
    differ = disagreement_warnings([v for v in views if not (v.reader.engine in spoken and v.too_short)])
    return differ + vllm_lines + lm_eval_lines + legacy_form_hint(spec, plan, views)
