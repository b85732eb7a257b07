"""``patch_checkpoint``: the one core function behind ``ropectl patch``."""

from __future__ import annotations

import difflib
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ropectl import families
from ropectl.errors import OutputError, UsageError
from ropectl.io.files import (
    atomic_write_bytes,
    atomic_write_text,
    check_output_dir,
    default_mode,
    link_tree,
    staged_dir,
    why_not_writable,
)
from ropectl.io.ownership import note_written
from ropectl.io.resolve import HUB_ID, ResolvedModel, resolve_model
from ropectl.io.weight_files import WEIGHT_SUFFIXES, WeightCheck, check_weight_files
from ropectl.output import dumps
from ropectl.patch import advice, serving
from ropectl.patch import gguf as gguf_out
from ropectl.patch.cards import card_lines
from ropectl.patch.finetuned import finetuned_warning
from ropectl.patch.spec import PatchSpec
from ropectl.patch.summary import PatchResult, pair_counts, rope_state
from ropectl.patch.verify import expected_ropes, verify_config, verify_folder
from ropectl.readers import llama_cpp
from ropectl.rope.frequencies import softmax_mscale
from ropectl.rope.methods import owner_of
from ropectl.schema.apply import ConfigPlan, plan_config
from ropectl.schema.record import BaseRope, Record

CONFIG = "config.json"


def _is_hub_id(model: str) -> bool:
    return not Path(model).expanduser().exists() and bool(HUB_ID.match(model)) and not model.startswith((".", "/", "~"))


def _precheck(spec: PatchSpec) -> None:
    """Refusals that need no model: they must come before any download or work."""
    if _is_hub_id(spec.model) and spec.in_place:
        raise UsageError("a hub model cannot be patched in place (its cache is shared)", "pass --output DIR")
    if spec.model.lower().endswith(".gguf") and Path(spec.model).is_file():
        # Checked before the (slow) GGUF parse: a method or an output GGUF cannot take.
        gguf_out.check_method_for_gguf(spec.method.name)
        _check_gguf_output(spec, Path(spec.model))
    elif spec.output is not None and spec.output.suffix.lower() != ".gguf":
        check_output_dir(spec.output, Path(spec.model) if Path(spec.model).is_dir() else None, spec.force)


def _check_gguf_output(spec: PatchSpec, source: Path) -> None:
    if spec.in_place:
        raise UsageError("GGUF files are not patched in place", "pass --output NEW.gguf")
    if spec.output is not None:
        gguf_out.check_gguf_output(spec.output, source, spec.force)


def _check_outputs(spec: PatchSpec, model: ResolvedModel) -> None:
    if model.is_gguf:
        _check_gguf_output(spec, model.path)
    elif spec.output is not None and spec.output.suffix.lower() == ".gguf":
        raise UsageError("--output names a .gguf but the model is a Hugging Face checkpoint",
                         "pass an output folder; convert to GGUF with llama.cpp afterwards")
    elif spec.in_place and not os.access(model.folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write to '{model.folder}' ({why_not_writable(model.folder)})",
                          "use --output DIR instead")


def _gguf_config(model: ResolvedModel) -> dict[str, Any]:
    """The GGUF's HF-style config plus ropectl's base record, kept in ``ropectl.*`` keys."""
    config = dict(model.config)
    theta, context = model.gguf.get(gguf_out.BASE_THETA_KEY), model.gguf.get(gguf_out.BASE_CONTEXT_KEY)
    if theta:
        context = int(context or 0) or None
        record = Record.of(config).with_(base=BaseRope(float(theta), context, context))
        config = record.written_into(config)
    return config


def _dump(config: Mapping[str, Any]) -> str:
    return dumps(config, indent=2, ensure_ascii=False) + "\n"


def _diff(old: str, new: str, name: str) -> str:
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 f"a/{name}", f"b/{name}")
    return "".join(lines)


def _gguf_diff(meta: Mapping[str, Any], updates: Mapping[str, Any], remove: set[str], name: str) -> str:
    old = [f"{k} = {meta[k]!r}\n" for k in sorted(set(updates) | remove) if k in meta]
    new = [f"{k} = {v!r}\n" for k, v in sorted(updates.items())]
    return "".join(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}"))


def _write_folder(spec: PatchSpec, model: ResolvedModel, plan: ConfigPlan) -> dict[str, Any]:
    assert spec.output is not None
    text = _dump(plan.config)
    with staged_dir(spec.output, force=spec.force, command="patch") as staging:
        files, skipped = link_tree(model.folder, staging, spec.copy,
                                   exclude=lambda rel: rel.parent == Path(".") and rel.name.startswith(CONFIG),
                                   needed=lambda rel: rel.suffix in WEIGHT_SUFFIXES or rel.name.endswith(".index.json"))
        atomic_write_text(staging / CONFIG, text)
        verification = verify_folder(staging, expected_ropes(plan.rope, plan.layer_ropes), plan.before_config,
                                     plan.target_context, spec.forward)
    return {"output": str(spec.output), "files": [(CONFIG, "written"), *files], "verification": verification,
            "skipped": skipped}


def _backup_path(config: Path) -> Path:
    backup = config.with_name(CONFIG + ".bak")
    if backup.exists():
        backup = config.with_name(f"{CONFIG}.{time.strftime('%Y%m%d-%H%M%S')}.bak")
    return backup


def _write_in_place(spec: PatchSpec, model: ResolvedModel, plan: ConfigPlan) -> dict[str, Any]:
    path = model.folder / CONFIG
    verification = verify_config(plan.config, expected_ropes(plan.rope, plan.layer_ropes), plan.before_config,
                                 plan.target_context, spec.forward)
    backup = _backup_path(path)
    atomic_write_bytes(backup, path.read_bytes())
    os.chmod(backup, path.stat().st_mode & 0o777)
    atomic_write_text(path, _dump(plan.config))  # keeps the replaced file's mode
    note_written(model.folder, [backup.name])  # a later --force may replace the backup with its folder
    return {"output": str(model.folder), "files": [(CONFIG, "rewritten")], "backup": str(backup),
            "verification": verification}


def _gguf(spec: PatchSpec, model: ResolvedModel, plan: ConfigPlan) -> dict[str, Any]:
    gguf_out.check_expressible(plan.rope, plan.method.name if plan.method else plan.rope.rope_type)
    arch = str(model.gguf.get("general.architecture"))
    label = plan.method.label if plan.method else plan.rope.rope_type
    updates, remove = gguf_out.gguf_updates(arch, plan.rope, plan.base, label)
    if spec.dry_run or spec.output is None:
        return {"diff": _gguf_diff(model.gguf, updates, remove, model.path.name)}
    written = gguf_out.rewrite_gguf(model.path, spec.output, arch, updates, remove)
    os.chmod(spec.output, default_mode(0o666))  # the GGUF writer's temp file starts private
    how = f"new file, {written.tensors} tensors copied unchanged"
    verification = {"engine": "GGUF re-read", "keys": sorted(written.changed), "removed": list(written.removed),
                    "tensors_identical": written.tensors,
                    "covers": f"{len(written.changed)} keys as intended, the others kept, all {written.tensors} tensors "
                              "byte-identical to the source (whose tensor offsets and sizes were checked against its "
                              "file size when read)"}
    return {"output": str(spec.output), "files": [(spec.output.name, how)], "verification": verification}


def _emit(spec: PatchSpec, model: ResolvedModel, plan: ConfigPlan) -> tuple[dict[str, Any], list[str]]:
    """The serving line of the engine ``--emit`` names, from that reader's ``emit_line`` (readers.emitters)."""
    from ropectl.readers import serving_readers
    from ropectl.readers.base import ServeView

    reader = serving_readers()[spec.emit]
    differs = serving.check_builds(plan, reader) if getattr(reader, "CHECKS_OVERRIDES", False) else []
    view = ServeView(spec.model, plan.rope, plan.layer_ropes, plan.before.partial_rotary_factor,
                     int(plan.target_context or 0), plan.before.model_type, dict(model.config), plan.kept)
    emitted, warnings = reader.emit_line(view)
    return emitted, differs + warnings


def _warnings(spec: PatchSpec, plan: ConfigPlan, model: ResolvedModel) -> list[str]:
    out = []  # the source's own inconsistencies (plan.warnings) are all rewritten away by the patch
    if plan.kept:  # nothing rewritten: only what the engines make of the checkpoint as it is (serving_warnings)
        return out
    tuned = finetuned_warning(plan, dict(model.config))
    if tuned:
        out.append(tuned)
    if plan.reextension:
        out.append(plan.reextension)
    elif plan.before.rope.rope_type != "default" or plan.composed_from_record:
        out.append(advice.replaced(plan))
    original = dict(plan.method.options if plan.method else ()).get("original_max_position_embeddings")
    trained = plan.base.trained_context
    if original and trained and int(original) != trained and not plan.reextension:
        # A preset or --config written for another model (llama2-4k-... on a 2k model) would pass silently.
        out.append(f"original_max_position_embeddings {int(original):,} (from the method options) differs from the "
                   f"model's trained context {trained:,}: the scaling counts from {int(original):,}; leave it out "
                   "to count from the model's own")
    out.extend(advice.carried(plan))
    owner = owner_of(plan.rope.rope_type)
    if owner is not None and owner.patch_note:
        out.append(owner.patch_note)
    if owner is not None and owner.patch_note_for is not None:
        out.extend(n for n in [owner.patch_note_for(plan.rope, plan.before.rope)] if n)
    out.extend(advice.lowered(plan))
    if plan.before.model_type in families.SOFTMAX_MSCALE_TYPES:
        before, after = softmax_mscale(plan.before.rope), softmax_mscale(plan.rope)
        if before != after or after != 1.0:
            out.append(f"this attention also multiplies its softmax scale by mscale(factor, mscale_all_dim)²: "
                       f"x{before:.4g} before, x{after:.4g} after (transformers and vLLM alike)")
    if not model.is_gguf and spec.emit == "config" and spec.schema != "v5":
        out.append("re-saving this checkpoint with transformers 5 (save_pretrained) drops the v4 keys rope_scaling "
                   "and top-level rope_theta; patch again after re-saving if transformers 4 readers matter")
    return out


def _mode(spec: PatchSpec) -> str:
    if spec.emit != "config":
        return "emit"
    return "dry-run" if spec.dry_run else "in-place" if spec.in_place else "output"


def _execute(spec: PatchSpec, model: ResolvedModel, plan: ConfigPlan) -> tuple[dict[str, Any], list[str]]:
    # The checkpoint as it is: its lines restate ropectl's reading of the config, so transformers must build that
    # reading first (no forward: nothing changed); a dry run of it changes nothing (PatchSpec refuses writing it).
    kept = verify_config(plan.config, expected_ropes(plan.rope, plan.layer_ropes), forward=False) \
        if plan.kept and not model.is_gguf else None
    if spec.emit != "config":
        emitted, warnings = _emit(spec, model, plan)
        return {"emit": emitted}, warnings
    if plan.kept:
        return {"diff": "", "verification": kept}, []
    if model.is_gguf:
        return _gguf(spec, model, plan), llama_cpp.gguf_warnings(str(model.gguf.get("general.architecture")), plan.rope)
    if spec.dry_run:
        verification = verify_config(plan.config, expected_ropes(plan.rope, plan.layer_ropes), plan.before_config,
                                     plan.target_context, spec.forward)
        old = (model.folder / CONFIG).read_text(encoding="utf-8")
        return {"diff": _diff(old, _dump(plan.config), CONFIG), "verification": verification}, []
    return (_write_in_place(spec, model, plan) if spec.in_place else _write_folder(spec, model, plan)), []


def _check_weights(spec: PatchSpec, model: ResolvedModel) -> WeightCheck | None:
    """The weight files' headers and sizes, before anything is written: refuses a truncated or corrupt checkpoint.

    Every mode checks them: output, --in-place and --dry-run (which refuses what the real run would), and --emit on a
    local folder, whose printed line serves those very files. A hub model's --emit fetches only config.json; a GGUF
    is checked when it is read.
    """
    if model.is_gguf or (spec.emit != "config" and model.kind == "hub"):
        return None
    return check_weight_files(model.folder)


def _result(spec: PatchSpec, model: ResolvedModel, plan: ConfigPlan, done: dict[str, Any],
            warnings: list[str], weights: WeightCheck | None = None) -> PatchResult:
    target = plan.target_context
    files = tuple(done.get("files", ()))
    if done.get("skipped"):
        warnings.append(f"not brought along: {', '.join(done['skipped'])}")
    if any(how == "symlink" for _, how in files):
        warnings.append("the filesystem refused hardlinks, so files are symlinks to the source: keep the source, "
                        "or rerun with --copy")
    verification = done.get("verification")
    warnings.extend(getattr(verification, "warnings", ()))
    if verification is not None and hasattr(verification, "to_dict"):
        verification = verification.to_dict()
    if verification is not None and weights is not None:
        verification = {**verification, "weights": weights.to_dict()}
    others = {k: float(v.rope_theta) for k, v in plan.layer_ropes.items() if k != "full_attention"}
    return PatchResult(
        model=spec.model, kind=model.kind, method=plan.method.label if plan.method else plan.rope.rope_type,
        mode=_mode(spec), schema="gguf" if model.is_gguf else spec.schema,
        before=rope_state(plan.before.rope), after=rope_state(plan.rope, factor=plan.factor),
        trained_context=plan.trained_context, target_context=target,
        pairs=pair_counts(plan.base, plan.rope, int(target or 0) or None, plan.factor),
        other_layers=others, composed_from_record=plan.composed_from_record, output=done.get("output"),
        files=files, backup=done.get("backup"), verification=verification, diff=done.get("diff"),
        emit=done.get("emit"), warnings=tuple(dict.fromkeys(warnings)),
    )


def patch_checkpoint(spec: PatchSpec) -> PatchResult:
    """Patch (or dry-run, or emit flags for) one model as ``spec`` says; see ``ropectl patch --help``."""
    _precheck(spec)
    model = resolve_model(spec.model, weights=_is_hub_id(spec.model) and spec.writes)
    if model.kind == "hub" and spec.writes and spec.output is None:
        raise UsageError("a hub model's patched copy must go to a folder", "pass --output DIR")
    _check_outputs(spec, model)
    config = _gguf_config(model) if model.is_gguf else dict(model.config)
    advice.refuse_dual_chunk(config)
    plan = plan_config(config, spec.method, spec.target_length, spec.schema, replace_existing=spec.replace_existing,
                       transformers=not model.is_gguf, max_positions=spec.max_positions)
    views = serving.reader_views(spec, plan, model)
    weights = _check_weights(spec, model)
    done, emit_warnings = _execute(spec, model, plan)
    engine_lines = serving.serving_warnings(spec, plan, model, views)
    result = _result(spec, model, plan, done, _warnings(spec, plan, model) + engine_lines + emit_warnings, weights)
    card, notes = card_lines(spec.model, plan)
    return replace(result, readers=tuple(v.to_json() for v in views), card=card, notes=notes)
