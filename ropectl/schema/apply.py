"""Apply a scaling method to a config dict: the one code path shared by ``patch`` and the evaluation commands, in the
schema layer below both (it reads and writes configs, and needs nothing of either command).

Scaling always starts from the unscaled base (theta and trained context), recorded under
``config["ropectl"]["base"]`` (``ropectl.schema.record``) the first time ropectl patches a model, so patching twice replaces the
scaling instead of stacking factors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ropectl import families
from ropectl.errors import ConfigError, MethodError
from ropectl.rope.methods import (
    MethodSpec,
    apply_method,
    as_is_name,
    effective_factor,
    factor_for_target,
    get_method,
    is_prope,
    resolve_file,
)
from ropectl.rope.params import RopeParams
from ropectl.rope.reextend import reextension_of, shipped_context, with_carried_options
from ropectl.schema.read import ModelRope, read_model_rope
from ropectl.schema.record import KEY as RECORD_KEY
from ropectl.schema.record import BaseRope, Record
from ropectl.schema.write import allowed_types, check_schema, rope_holder, write_rope, written_max_positions

# transformers builds these models' rotary embedding from fixed values that no config key changes.
FIXED_ROPE_TYPES = {"gptj": "GPT-J", "codegen": "CodeGen"}


@dataclass(frozen=True)
class ConfigPlan:
    """What applying a method to a config changes: before, base, after."""

    config: dict[str, Any]
    before: ModelRope
    base: RopeParams
    rope: RopeParams
    layer_ropes: Mapping[str, RopeParams] = field(default_factory=dict)
    composed_from_record: bool = False
    warnings: tuple[str, ...] = ()
    method: MethodSpec | None = None  # the spec as applied: a target length turned into its factor
    reextension: str | None = None  # the summary line when an already-scaled yarn/llama3 model is re-extended
    before_config: Mapping[str, Any] | None = None  # the config as given (patch's forward check runs it too)
    carried: Mapping[str, Any] = field(default_factory=dict)  # shipped rope keys kept unchanged (``carried_keys``)

    @property
    def kept(self) -> bool:
        """The checkpoint as it is (``as-is``): the config was left unchanged."""
        return self.method is not None and get_method(self.method.name).keeps_checkpoint

    @property
    def factor(self) -> float | None:
        if self.kept:
            return effective_factor(self.rope)
        return self.method.factor if self.method is not None else self.rope.factor

    @property
    def trained_context(self) -> int | None:
        return self.rope.original_max_position_embeddings or self.base.trained_context

    @property
    def target_context(self) -> int | None:
        """The context the patched model is meant for (dynamic keeps max_position_embeddings lower)."""
        trained = self.trained_context
        if self.kept:
            return shipped_context(self.rope, trained)
        if trained is None:
            return self.rope.max_position_embeddings
        return int(round(trained * self.factor)) if self.factor else int(trained)


def is_scaled(model: ModelRope) -> bool:
    ropes = [model.rope, *model.layer_ropes.values()]
    return any(r.rope_type != "default" and not _unscaled_prope(r) for r in ropes)


def _unscaled_prope(rope: RopeParams) -> bool:
    return is_prope(rope) and (rope.factor or 1.0) == 1.0


def base_rope(model: ModelRope, replace_existing: bool = False) -> tuple[RopeParams, bool]:
    """The unscaled RoPE to scale from, and whether it came from ropectl's record."""
    base, from_record = _base_rope(model, replace_existing)
    if is_prope(model.rope):  # p-RoPE stays p-RoPE: its partial factor is part of the base
        partial = {"partial_rotary_factor": model.rope.scaling.get("partial_rotary_factor", 1.0)}
        base = base.with_(rope_type=model.rope.rope_type, scaling={**base.scaling, **partial})
    return base, from_record


def _base_rope(model: ModelRope, replace_existing: bool) -> tuple[RopeParams, bool]:
    recorded = Record.from_json(model.record).base
    if recorded is not None:
        max_pos = recorded.max_position_embeddings or recorded.trained_context
        trained = recorded.context
        scaling = {} if not trained or trained == max_pos else {"original_max_position_embeddings": int(trained)}
        return RopeParams("default", recorded.rope_theta, model.rotary_dim, max_pos, scaling), True
    rope = model.rope
    if is_scaled(model):
        if not replace_existing and reextension_of(rope) is None:
            raise ConfigError(
                f"the model is already scaled (rope type '{rope.rope_type}', factor {effective_factor(rope) or 1:g}) "
                "and config.json "
                "has no ropectl record of its unscaled base, so a new factor would silently stack on the old one",
                "pass --replace-existing to replace the existing scaling, taking rope_theta and the original "
                "context from the config as the base",
            )
        trained = families.shipped_original(model.model_type, rope.rope_type, rope.factor,
                                            rope.max_position_embeddings) or rope.trained_context
        return RopeParams("default", rope.rope_theta, model.rotary_dim, trained, {}), False
    native = model.native_context  # a model card's pretraining length under a longer max_position_embeddings
    scaling = {"original_max_position_embeddings": native} if native and native != rope.max_position_embeddings else {}
    return RopeParams("default", rope.rope_theta, model.rotary_dim, rope.max_position_embeddings, scaling), False


def _check_model(model: ModelRope, rope: RopeParams, transformers: bool) -> None:
    types, reason = families.PATCH_REFUSED.get(model.model_type, ((), ""))
    if types is None or rope.rope_type in types:
        raise MethodError(f"cannot write rope type '{rope.rope_type}' for {model.model_type}: {reason}",
                          "use another method (see docs/reference/families.md, Refusals), or the model at its trained context")
    if model.model_type in FIXED_ROPE_TYPES:
        name = FIXED_ROPE_TYPES[model.model_type]
        raise MethodError(
            f"transformers' {name} builds its rotary embedding with a fixed base and no scaling, "
            "so no config key can change it",
            "scale a model whose config has rope_theta / rope_scaling (Llama, Qwen, Mistral, Gemma, Phi, GPT-NeoX ...)",
        )
    if model.layer_ropes and rope.scaling.get("truncate") is False:
        raise MethodError(
            "transformers 5 reads yarn 'truncate' only from a flat rope section, so truncate=false would be "
            "ignored on this per-layer-type model",
            "drop truncate=false (keep the default rounding of the ramp ends)",
        )
    allowed = allowed_types(model.model_type) if transformers else None
    if allowed is not None and rope.rope_type not in allowed:
        raise MethodError(
            f"transformers' {model.model_type} config accepts only rope types {', '.join(allowed)}, "
            f"but this method writes '{rope.rope_type}'",
            "use --method ntk or --method longrope for this model",
        )


def _check_theta_known(config: Mapping[str, Any]) -> None:
    """A null rope_theta would be read as the default base and written back as if it were the model's."""
    from ropectl.schema.validate import null_theta_warning

    if null_theta_warning(config) and not Record.of(config).base:
        raise ConfigError(
            "config.json has \"rope_theta\": null (transformers 5 saves that after `config.rope_scaling = {...}` "
            "on a config without rope_theta), so the model's base theta is unknown and patching would write the "
            "default 10000 as if it were the model's",
            "set rope_theta in config.json to the model's base (its model card or original config), then patch again",
        )


def _record(model: ModelRope, base: RopeParams, spec: MethodSpec) -> Record:
    """The record with the unscaled base and the method; other parts (layout ...) are kept."""
    recorded = BaseRope(float(base.rope_theta), base.max_position_embeddings, base.trained_context)
    # the record spells a factors file's lists out: the written config must not depend on that file
    return Record.from_json(model.record).with_(base=recorded, method=replace(spec, file=None).label)


def effective_spec(base: RopeParams, spec: MethodSpec, target_length: int | None) -> MethodSpec:
    """``spec`` with the factor a target length implies, so labels and records name the real factor."""
    method = get_method(spec.name)
    if target_length is None or not method.uses_factor:
        return replace(spec, name=method.name)
    original = dict(spec.options).get("original_max_position_embeddings")
    if original:  # the target is measured from the pretraining length the user gave
        base = base.with_(scaling={"original_max_position_embeddings": int(original)})
    return replace(spec, name=method.name, factor=factor_for_target(base, target_length))


def carried_keys(before: RopeParams, rope: RopeParams) -> dict[str, Any]:
    """The shipped section's keys that no scaling method writes (the model's own: ``families.SCALING_ROPE_KEYS``),
    unchanged, with the scaling keys the model's attention reads beside them where ``rope`` has none."""
    from ropectl.rope.methods import METHODS

    modelled = families.SCALING_ROPE_KEYS | {p.name for m in METHODS.values() for p in m.params}
    kept = {k: v for k, v in before.scaling.items() if k not in modelled}
    for key in list(kept):
        for needed in families.ATTENTION_ROPE_KEYS.get(key, ()):
            if needed not in rope.scaling and before.scaling.get(needed) is not None:
                kept[needed] = before.scaling[needed]
    return kept


def plan_config(
    config: Mapping[str, Any], spec: MethodSpec, target_length: int | None = None, schema: str = "both",
    *, replace_existing: bool = False, transformers: bool = True, max_positions: str = "target",
) -> ConfigPlan:
    """Everything ``apply_to_config`` computes, with the before/base state for summaries.

    ``transformers=False`` skips the checks of what transformers' config classes accept (for GGUF outputs).
    """
    check_schema(schema)
    if get_method(spec.name).keeps_checkpoint:
        return _kept(config, spec)
    _check_theta_known(config)
    spec = resolve_file(spec)  # a longrope:F,file=PATH spec's lists, before options are carried or recorded
    before = read_model_rope(config)
    # `none` (the unscaled method) on a config that names its original length removes the scaling: nothing stacks,
    # nothing is guessed
    undo = get_method(spec.name).unscaled and before.rope.original_max_position_embeddings is not None
    base, from_record = base_rope(before, replace_existing or undo)
    re = None if from_record or replace_existing else reextension_of(before.rope)
    if re is not None:  # a shipped yarn/llama3 scaling: the new one counts from the original length, same options
        spec = with_carried_options(re, spec)
    spec = effective_spec(base, spec, target_length)
    _check_own_lists(before, spec)
    rope = apply_method(base, spec)
    kept = carried_keys(before.rope, rope)
    rope = rope.with_(scaling={**rope.scaling, **kept}) if kept else rope
    if transformers:  # the RoPE as written: max_position_embeddings in the form most config readers agree on
        rope = rope.with_(max_position_embeddings=written_max_positions(rope, base.trained_context, max_positions))
    _check_model(before, rope, transformers)
    layers = {**before.layer_ropes, before.main_layer or "full_attention": rope} if before.layer_ropes else {}
    new = write_rope(config, before, rope, schema, layer_ropes=layers or None, trained=base.trained_context)
    new = _record(before, base, spec).written_into(new)
    if rope_holder(new) is not new:
        rope_holder(new).pop(RECORD_KEY, None)
    line = re.summary(rope, spec.factor) if re is not None else None
    return ConfigPlan(new, before, base, rope, layers, from_record, before.warnings, spec, line, dict(config), kept)


def _check_own_lists(before: ModelRope, spec: MethodSpec) -> None:
    """A method with list options (longrope's factors) named without them on a checkpoint that ships its own: a new
    scaling never reuses the shipped lists, and serving the shipped ones is as-is."""
    method = get_method(spec.name)
    given = dict(spec.options)
    missing = [k for k in method.factors_file if not given.get(k)]
    if missing and before.rope.rope_type == method.rope_type:
        raise MethodError(f"-m {method.name} needs {' and '.join(missing)} of its own: a new scaling does not reuse "
                          f"the {method.rope_type} factors this checkpoint ships",
                          f"to serve the checkpoint as it ships, drop -m (patch MODEL --emit ENGINE; -m "
                          f"{as_is_name()} elsewhere); to rescale it, pass --longrope-file FILE with both lists")


def _kept(config: Mapping[str, Any], spec: MethodSpec) -> ConfigPlan:
    """The checkpoint as it is (as-is): its config unchanged, its own RoPE; the base is where it scales from."""
    before = read_model_rope(config)
    base, from_record = base_rope(before, replace_existing=True)
    return ConfigPlan(dict(config), before, base, before.rope, dict(before.layer_ropes), from_record, before.warnings,
                      replace(spec, name=get_method(spec.name).name))


def apply_to_config(
    config: Mapping[str, Any], spec: MethodSpec, target_length: int | None = None, schema: str = "both",
    *, replace_existing: bool = False, max_positions: str = "target",
) -> tuple[dict[str, Any], RopeParams]:
    """Apply ``spec`` to a loaded config dict exactly as ``ropectl patch`` does.

    Returns the new config dict (the caller's is not modified) and the RoPE it now describes (the
    full-attention one for per-layer models). Raises MethodError / ConfigError on bad input, and
    ConfigError for an already-scaled model without a ropectl record unless ``replace_existing``.
    """
    plan = plan_config(config, spec, target_length, schema, replace_existing=replace_existing,
                       max_positions=max_positions)
    return plan.config, plan.rope
