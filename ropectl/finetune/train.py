"""``ropectl finetune``'s run: plan, data, the patched model, transformers' Trainer, the final checkpoint.

transformers' Trainer (``trainer.py`` says why not TRL) gives AdamW, the warm-up schedule, clipping, accumulation,
bf16 autocast, DDP / FSDP2 through accelerate (``sharding.py``; ``torchrun`` and ``accelerate launch`` both work,
multi-node is the same command) and checkpoint-N resume.

State lives in a run folder beside the output (``OUT.run/``: ``run.json`` with the run's identity, ``train_log.jsonl``,
``checkpoint-N/``). Ctrl-C or SIGTERM finishes the current step, saves a checkpoint and raises ``FinetuneInterrupted``
(the CLI prints the command that resumes); ``--resume`` continues from its last checkpoint; the run folder is
removed once the output is written.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropectl.errors import OutputError, UsageError
from ropectl.finetune import sharding
from ropectl.finetune.plan import RunPlan
from ropectl.finetune.runs import (
    FinetuneInterrupted,
    any_rank,
    last_checkpoint,
    prepare_run_dir,
    run_dir_for,
    stop_signals,
)
from ropectl.finetune.spec import FinetuneSpec
from ropectl.finetune.trainer import make_trainer, training_arguments
from ropectl.output import count
from ropectl.runtime import read_jsonl

__all__ = ["FinetuneInterrupted", "FinetuneResult", "dry_run_plan", "finetune", "prepare", "run_dir_for"]


@dataclass(frozen=True)
class FinetuneResult:
    output: Path
    plan: dict[str, Any]
    provenance: dict[str, Any]
    final_loss: float | None
    evaluation: dict[str, Any] | None
    written: Any = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        written = self.written.to_dict() if hasattr(self.written, "to_dict") else self.written
        return {"output": str(self.output), "plan": self.plan, "provenance": self.provenance,
                "final_loss": self.final_loss, "evaluation": self.evaluation, "written": written, "notes": self.notes}


@dataclass(frozen=True)
class Prepared:
    """Everything before the first weight loads: checked, planned, tokenized."""

    spec: FinetuneSpec
    source: Any  # runtime.model.ModelSource
    plan: RunPlan
    tokenizer: Any
    split: Any  # data.Split
    corpus: str
    device: str
    dtype: str
    dtype_why: str


def prepare(spec: FinetuneSpec, world_size: int = 1, local_rank: int = 0) -> Prepared:
    """Model config, plan (the patch path), output checks, tokenizer and data: every refusal before any training."""
    from ropectl.finetune.data import split
    from ropectl.finetune.output import check_output
    from ropectl.finetune.plan import make_plan
    from ropectl.runtime import (
        load_corpus,
        load_tokenizer,
        make_source,
        model_source,
        resolve_device,
        resolve_dtype_choice,
        trained_context,
    )

    if spec.lora is not None:
        _require_peft()
    source = model_source(spec.model)
    sharding.check(spec.fsdp, world_size, spec.eval_every)
    plan = make_plan(spec, source.config, trained_context(source.config), world_size)
    if not spec.dry_run:  # the writer's own refusals, before any training
        check_output(spec.output, source.resolved.path, spec.force)
    device = resolve_device(spec.device, local_rank)
    dtype, why = resolve_dtype_choice(spec.dtype, device)
    tokenizer = load_tokenizer(source.path, source.kwargs)
    data = make_source(spec.data, spec.split, spec.text_field)
    if data.identity.get("kind") == "hub" and spec.max_docs is None:  # a stream has no end to wait for
        raise UsageError(f"'{spec.data}' is a hub dataset, streamed document by document, and would be read to its end",
                         "pass --max-docs N (e.g. 2000) to train on its first N documents")
    corpus = load_corpus(data, tokenizer, spec.max_docs)
    parts = split(corpus.documents, plan.span, spec.held_out, plan.target, spec.seed,
                  tokenizer.bos_token_id, tokenizer.eos_token_id, corpus.name, spec.held_out_docs,
                  short=(plan.trained, plan.seq_len) if spec.short_mix else None)
    return Prepared(spec, source, plan, tokenizer, parts, corpus.name, device, dtype, why)


def _require_peft() -> None:
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        raise UsageError("--lora trains peft adapters, and peft is not installed",
                         "pip install 'ropectl[finetune]' (or drop --lora for a full fine-tune)")


def provenance(p: Prepared, steps_done: int) -> dict[str, Any]:
    s = p.spec
    return {"base_model": s.model, "method": p.plan.method, "mode": s.mode, "window": p.plan.window,
            "target": p.plan.target, "trained": p.plan.trained, "steps": steps_done,
            "tokens": steps_done * p.plan.tokens_per_step, "tokens_per_step": p.plan.tokens_per_step,
            "data": p.corpus, "held_out": p.split.held_out_ids, "train_docs": p.split.train_docs, "seed": s.seed,
            "lr": s.lr, "warmup": p.plan.warmup, "dtype": p.dtype, "short_mix": s.short_mix, "doc_mask": s.doc_mask,
            "lora": None if s.lora is None else {"r": s.lora, "alpha": s.lora_scale,
                                                 "embeddings_norms": s.train_embeddings_norms, "merged": s.merge}}


def finetune(spec: FinetuneSpec, on_progress: Callable[[Any], None] | None = None) -> FinetuneResult:
    """Train and write ``spec.output``; raises FinetuneInterrupted on Ctrl-C / SIGTERM (a checkpoint is saved)."""
    from ropectl.io.gguf_once import parse_once
    from ropectl.runtime import leave_group, world_from_env

    world = world_from_env()
    with parse_once():  # a GGUF's config and tokenizer from one parse of its metadata
        p = prepare(spec, world.size, world.local_rank)
    run_dir = run_dir_for(spec.output)
    resume_from = prepare_run_dir(spec, run_dir, world.is_main)
    try:
        result = _train(spec, p, world, run_dir, resume_from, on_progress)
    except FinetuneInterrupted:
        leave_group()  # every rank stopped at the same step (any_rank)
        raise
    except BaseException:
        if not spec.resume and world.is_main and last_checkpoint(run_dir) is None:
            shutil.rmtree(run_dir, ignore_errors=True)  # a failed fresh run leaves no folder that blocks the next
        raise
    leave_group()  # ranks end at different times (rank 0 writes): none may exit with the group up
    return result


def _train(spec: FinetuneSpec, p: Prepared, world: Any, run_dir: Path, resume_from: Path | None,
           on_progress: Callable[[Any], None] | None) -> FinetuneResult:
    from transformers import set_seed

    from ropectl.eval.engines import get_engine
    from ropectl.finetune import monitor
    from ropectl.finetune.build import add_lora, build_model
    from ropectl.finetune.data import PackedExamples

    log = run_dir / monitor.LOG if world.is_main else None
    if log is not None and spec.resume:  # no checkpoint yet (a killed run): the log starts again
        monitor.keep_rows_until(log, int(resume_from.name.split("-")[-1]) if resume_from else -1)
    if on_progress is not None and world.is_main:
        on_progress(monitor.TrainProgress(0, p.plan.steps, 0, None, None, None, None, message=_header(p, resume_from)))
    set_seed(spec.seed)  # LoRA's initial A matrices
    # FSDP: built on CPU; fully_shard moves each rank's shard to its device, so no device holds the whole model
    model = build_model(p.source, p.plan.config, "cpu" if spec.sharded else p.device)
    if spec.lora is not None:
        model = add_lora(model, spec)
    dataset = PackedExamples(p.split.spans, p.plan.steps * p.plan.global_batch, spec.seed, p.plan.window,
                             p.plan.target, spec.pose, segments=p.split.segments, short_spans=p.split.short_spans,
                             short_segments=p.split.short_segments, short_mix=spec.short_mix, doc_mask=spec.doc_mask)
    evaluate_now = None
    if spec.eval_every and world.is_main:
        engine = get_engine("transformers").from_loaded(p.source, model, p.tokenizer, p.device, p.dtype)
        lengths = sorted({p.plan.trained, p.plan.target})
        evaluate_now = _evaluator(model, engine, p.split.held_out, lengths, p.dtype)
    with stop_signals() as stopped, warnings.catch_warnings():
        # transformers' own deprecation notes about its internals (gradient_checkpointing names) are not the user's
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
        callback = monitor.make_callback(log=log, tokens_per_step=p.plan.tokens_per_step, steps=p.plan.steps,
                                         on_progress=on_progress if world.is_main else None, evaluate_now=evaluate_now,
                                         eval_every=spec.eval_every, stop_requested=lambda: any_rank(bool(stopped())),
                                         start_step=int(resume_from.name.split("-")[-1]) if resume_from else 0)
        args = training_arguments(spec, p.plan, run_dir, p.device, p.dtype)
        trainer = make_trainer(model, args, dataset, spec.chunk_size, [callback])
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        why = stopped()
    step = trainer.state.global_step
    if why is not None or step < p.plan.steps:
        raise FinetuneInterrupted(run_dir, step, why == "SIGTERM")
    try:
        return _finish(p, trainer, run_dir, log)
    except KeyboardInterrupt:  # the last step's checkpoint is saved: --resume only writes the output again
        raise FinetuneInterrupted(run_dir, step, False) from None
    except OSError as exc:
        raise OutputError(f"writing '{p.spec.output}' failed ({exc.strerror or exc}); the trained weights are kept in "
                          f"{run_dir}", "fix that, then rerun the same command with --resume") from None


def _header(p: Prepared, resume_from: Path | None) -> str:
    """The run's first progress line: what trains, how much, in what dtype, sharded or resumed."""
    plan, spec = p.plan, p.spec
    return (f"{plan.line()}; a step is {plan.tokens_per_step:,} tokens ({plan.global_batch} sequences), "
            f"{plan.steps} steps = {plan.total_tokens:,} tokens; dtype {p.dtype} ({p.dtype_why})"
            + (f"; FSDP2 over {count(plan.world, 'process')}" if spec.sharded else "")
            + (f"; resuming after step {resume_from.name.split('-')[-1]}" if resume_from else ""))


def _evaluator(model: Any, engine: Any, held_out: Any, lengths: list[int], dtype: str) -> Callable[[], dict[str, Any]]:
    """Held-out scoring in eval mode under the training autocast, back to train mode after."""
    import torch

    from ropectl.finetune.monitor import evaluate

    def run() -> dict[str, Any]:
        was = model.training
        model.eval()
        try:
            with torch.autocast("cpu" if engine.device == "cpu" else "cuda", dtype=torch.bfloat16,
                                enabled=dtype == "bf16"):
                return evaluate(engine, held_out, lengths)
        finally:
            model.train(was)

    return run


def _finish(p: Prepared, trainer: Any, run_dir: Path, log: Path | None) -> FinetuneResult:
    """Rank 0 writes the checkpoint (ft-output's write_checkpoint), then the log and plot beside it."""
    from ropectl.finetune import monitor, output
    from ropectl.io.files import atomic_write_text
    from ropectl.io.ownership import note_written
    from ropectl.runtime import world_from_env

    is_main = world_from_env().is_main
    # FSDP: every rank all-gathers (first: nothing rank 0 alone does may stand between the ranks' collectives), rank 0
    # keeps full weights; an adapter without --merge needs only the trained ones (the base is written from the source)
    sharding.gather_full_weights(trainer.model, is_main, trainable_only=p.spec.lora is not None and not p.spec.merge)
    prov = provenance(p, trainer.state.global_step)
    prov["parallel"] = {"processes": p.plan.world, "fsdp": bool(getattr(trainer, "is_fsdp_enabled", False))}
    rows = read_jsonl(log) if log is not None else []
    losses = [r["loss"] for r in rows if "loss" in r]
    evals = [r["eval"] for r in rows if "eval" in r]
    if not is_main:
        return FinetuneResult(p.spec.output, p.plan.to_dict(), prov, None, None)
    model = trainer.accelerator.unwrap_model(trainer.model)
    source = p.source.resolved.path  # the folder or the .gguf file trained from (the adapter layout's base)
    written = output.write_checkpoint(p.spec.output, model, p.tokenizer, p.plan.config, prov, merge=p.spec.merge,
                                      dtype=p.dtype, force=p.spec.force, source=source, target=p.plan.target)
    assert log is not None
    atomic_write_text(p.spec.output / monitor.LOG, log.read_text(encoding="utf-8"))
    monitor.plot_loss(log, p.spec.output / monitor.PLOT)
    note_written(p.spec.output, [monitor.LOG, monitor.PLOT])
    shutil.rmtree(run_dir, ignore_errors=True)
    notes = []
    if p.source.resolved.is_gguf and not getattr(written, "notes", None):
        notes.append("the GGUF input was dequantized and trained; convert the output back with llama.cpp's "
                     "convert_hf_to_gguf.py")
    return FinetuneResult(p.spec.output, p.plan.to_dict(), prov, losses[-1] if losses else None,
                          evals[-1] if evals else None, written, notes)


def dry_run_plan(spec: FinetuneSpec) -> dict[str, Any]:
    """The plan, memory estimates of PoSE and full-length training, and an ETA; loads no weights, writes nothing."""
    from ropectl.finetune.plan import ASSUMED_MFU, estimates, lora_params, matmul_flops, shape_of
    from ropectl.runtime import world_from_env

    world = world_from_env()
    p = prepare(spec, world.size, world.local_rank)
    shape = shape_of(p.plan.config)
    trainable = shape.params if spec.lora is None else lora_params(shape, spec.lora)
    speed = matmul_flops(p.dtype) if p.device == "cpu" else None
    shards = p.plan.world if spec.sharded else 1
    est = estimates(p.plan, shape, trainable, p.dtype == "bf16", spec.chunk_size, speed * ASSUMED_MFU if speed else None,
                    shards, mask=spec.doc_mask or spec.short_mix > 0)
    return {"plan": p.plan.to_dict(), **est, "fsdp": spec.sharded, "dtype": p.dtype,
            "dtype_why": p.dtype_why, "params": shape.params,
            "trainable": trainable, "data": p.corpus, "train_spans": len(p.split.spans),
            "held_out": p.split.held_out_ids,
            "eta_basis": f"{ASSUMED_MFU:.0%} of a measured {speed / 1e9:.0f} GFLOP/s {p.dtype} matmul" if speed else ""}
