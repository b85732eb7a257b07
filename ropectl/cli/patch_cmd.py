"""``ropectl patch``: rewrite RoPE scaling so transformers, vLLM and llama.cpp read it the same way."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ropectl.cli.errors import handle_errors
from ropectl.cli.flags import (
    ForceOpt,
    JsonOpt,
    ModelArg,
    OutputOpt,
    method_option_parameters,
    opt,
    shared,
)
from ropectl.cli.render import print_title, print_warning, spaced
from ropectl.output import dumps, number
from ropectl.rope.methods import method_names

METHOD, OPTIONS, OUTPUT = "Method", "Method options", "Output"
OPT = "opt_"  # prefix of the generated method-option parameters

MethodOpt = Annotated[Optional[str], opt("--method", "-m", panel=METHOD,
                                         help=f"{method_names()} (or a spec such as yarn:4,beta_fast=16).")]
FactorOpt = Annotated[Optional[float], shared("--factor", panel=METHOD)]
TargetOpt = Annotated[Optional[str], shared("--target-length", panel=METHOD,
                                            detail="the factor is target / trained context.")]
PresetOpt = Annotated[Optional[str], shared("--preset", panel=METHOD, detail=(
    "configs/patch-NAME.toml, or a model card's recipe such as qwen3-128k (docs/reference/model-cards.md)."))]
ConfigOpt = Annotated[Optional[Path], shared("--config", panel=METHOD)]
SetOpt = Annotated[Optional[list[str]], shared("--set", panel=OPTIONS)]
LongFileOpt = Annotated[Optional[Path], opt("--longrope-file", panel=OPTIONS,
                                            help="longrope: JSON with short_factor/long_factor.")]
InPlaceOpt = Annotated[bool, opt("--in-place", panel=OUTPUT, help="Rewrite config.json in place (backup kept).")]
DryRunOpt = Annotated[bool, shared("--dry-run", panel=OUTPUT, detail=(
    "a unified diff of config.json. Only with --emit config: with --emit vllm / sglang / llama.cpp (which write "
    "nothing anyway) it is refused."))]
EmitOpt = Annotated[str, shared("--emit", panel=OUTPUT, detail="config, the default, writes.")]
SchemaOpt = Annotated[Optional[str], opt("--schema", panel=OUTPUT, help="both (default), v4 or v5 config keys.")]
MaxPosOpt = Annotated[str, opt("--max-positions", panel=OUTPUT,
                                help="max_position_embeddings written: target (default; what lm-eval and vLLM read as "
                                     "the length) or trained (the form transformers 4.43-4.50 need for yarn).")]
CopyOpt = Annotated[bool, opt("--copy", panel=OUTPUT, help="Copy weights instead of hardlinking them.")]
ReplaceOpt = Annotated[bool, opt("--replace-existing", panel=OUTPUT,
                                 help="Replace scaling already in a config that ropectl did not write.")]


def _render(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if result["emit"]:
        typer.echo(result["emit"]["command"])
        for warning in result["warnings"]:
            typer.echo(f"warning: {warning}", err=True)
        _render_notes(result)
        return
    if result["diff"] is not None:
        typer.echo(result["diff"] or "(no change)")
    before, after, pairs = result["before"], result["after"], result["pairs"]
    # longrope's factor lists (96 numbers for Phi-3) as their count: the title is a summary
    method = re.sub(r"\[[^\]]*\]", lambda m: f"[{m.group(0).count(',') + 1} values]", result["method"])
    print_title(console, f"{spaced(method)}  ({result['mode']})")
    table = Table(show_header=True, box=None)
    for col in ("", "before", "after"):
        table.add_column(col, style="bold cyan" if not col else None)
    for key, label in (("rope_type", "rope type"), ("rope_theta", "θ"), ("factor", "factor"),
                       ("attention_factor", "attention factor"), ("max_position_embeddings", "max positions")):
        table.add_row(label, number(before[key]), number(after[key]))
    table.add_row("context", number(result["trained_context"]), number(result["target_context"]))
    console.print(table)
    console.print(f"{pairs['total']} dimension pairs: [green]{pairs['kept']} kept[/green], "
                  f"[yellow]{pairs['interpolated']} interpolated[/yellow], {pairs['blended']} blended")
    for label, theta in result["other_layers"].items():
        console.print(f"[dim]{label} keeps θ={number(theta)}[/dim]")
    _render_files(result, console)
    for warning in result["warnings"]:
        print_warning(console, warning)
    _render_notes(result)


def _render_notes(result: dict[str, Any]) -> None:
    """A model card's lines go to stderr: stdout stays the pasteable command, diff or summary."""
    for note in result["notes"]:
        typer.echo(f"note: {note}", err=True)


def _render_files(result: dict[str, Any], console: Any) -> None:
    if result["output"]:
        hows: dict[str, int] = {}
        for f in result["files"]:
            hows[f["how"]] = hows.get(f["how"], 0) + 1
        console.print(f"wrote {result['output']}: " + ", ".join(f"{n} {how}" for how, n in hows.items()))
    if result["backup"]:
        console.print(f"backup of the old config: {result['backup']}")
    v = result["verification"]
    if not v:
        return
    from rich.markup import escape

    weights = escape(v["weights"]["covers"]) if v.get("weights") else None  # file names are not markup
    if v.get("skipped"):
        console.print(f"[yellow]not verified[/yellow]: {v['skipped']}")
        if weights:
            console.print(f"checked: {weights}")
        return
    # Say what "verified" covered: the RoPE transformers builds, and how far the weight files were looked at.
    detail = f"rope frequencies max relative error {v['max_rel_error']:.1e}" if "max_rel_error" in v else \
        v.get("covers", f"{v.get('tensors_identical', 0)} tensors identical")
    console.print(f"[green]verified[/green] with {v['engine']}: {detail}" + _forward(v.get("forward"))
                  + (f"; {weights}" if weights else ""))


def _forward(forward: dict[str, Any] | None) -> str:
    """What the tiny copy's forward showed, in the verified line."""
    if not forward:
        return ""
    if not forward["ran"]:
        return f"; the model's forward was not run ({forward['skipped']})"
    first, last = forward["positions"]
    from ropectl.output import count

    checked = forward["rotary_outputs_checked"]
    rotary = f", {count(checked, 'rotary output')} as computed" if checked else ""
    return f"; the model's forward ran ({forward['layers']}-layer copy, positions {first:,}-{last:,}: finite logits{rotary})"




def _template(
    model: ModelArg, method: MethodOpt = None, factor: FactorOpt = None, target_length: TargetOpt = None,
    preset: PresetOpt = None, config: ConfigOpt = None, set_: SetOpt = None, longrope_file: LongFileOpt = None,
    output: OutputOpt = None, in_place: InPlaceOpt = False, dry_run: DryRunOpt = False, emit: EmitOpt = "config",
    schema: SchemaOpt = None, max_positions: MaxPosOpt = "target", force: ForceOpt = False, copy: CopyOpt = False,
    replace_existing: ReplaceOpt = False, json_out: JsonOpt = False,
) -> None:
    """The hand-declared part of patch's signature; the method options come from the registry."""


@handle_errors
def patch(**kw: Any) -> None:
    """Rewrite a checkpoint's RoPE scaling (config.json or GGUF metadata), verified against transformers.

    The weight files are checked first (headers and sizes, as their loaders check them, not their values): a
    truncated or corrupt checkpoint is refused with nothing written, in --dry-run, --in-place and --emit too.
    """
    from ropectl.patch import MethodChoice, PatchSpec, build_choice, method_spec, patch_checkpoint

    options = {k[len(OPT):]: kw.pop(k) for k in list(kw) if k.startswith(OPT)}
    from ropectl.runtime.lengths import parse_length  # the one length parser: 32k here is 32k in eval-ppl and recommend

    target = None if kw["target_length"] is None else parse_length(kw["target_length"])
    flags = MethodChoice(None, kw["factor"], target, options, kw["longrope_file"], kw["schema"])
    choice = build_choice(kw["preset"], kw["config"], flags, kw["set_"] or (), spec=kw["method"])
    spec = PatchSpec(model=kw["model"], method=method_spec(choice, kw["emit"]), target_length=choice.target_length,
                     output=kw["output"], in_place=kw["in_place"], dry_run=kw["dry_run"], emit=kw["emit"],
                     schema=choice.schema or "both", force=kw["force"], copy=kw["copy"],
                     replace_existing=kw["replace_existing"], max_positions=kw["max_positions"])
    result = patch_checkpoint(spec).to_dict()
    if kw["json_out"]:
        typer.echo(dumps(result, indent=2))
    else:
        _render(result)


def _signature() -> inspect.Signature:
    """_template's parameters with one flag per registry option inserted after --set (help order)."""
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
              for p in inspect.signature(_template, eval_str=True).parameters.values()]
    at = [p.name for p in params].index("longrope_file")
    return inspect.Signature([*params[:at], *method_option_parameters(OPT), *params[at:]])


patch.__signature__ = _signature()  # type: ignore[attr-defined]


def register(app: typer.Typer) -> None:
    app.command("patch")(patch)
