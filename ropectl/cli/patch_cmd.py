"""``ropectl patch``: rewrite RoPE scaling so transformers, vLLM and llama.cpp read it the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ropectl.cli.errors import handle_errors
from ropectl.cli.options import ForceOpt, JsonOpt, ModelArg, OutputOpt

METHOD, OPTIONS, OUTPUT = "Method", "Method options", "Output"


def _opt(*names: str, help: str, panel: str = OPTIONS, **kw: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=panel, show_default=False, **kw)


MethodOpt = Annotated[Optional[str], _opt("--method", "-m", panel=METHOD,
                                          help="linear, ntk, dynamic, yarn, llama3, longrope or none "
                                               "(or a spec such as yarn:4,beta_fast=16).")]
FactorOpt = Annotated[Optional[float], _opt("--factor", "-f", panel=METHOD, help="Context extension factor (> 1).")]
TargetOpt = Annotated[Optional[int], _opt("--target-length", "-t", panel=METHOD,
                                          help="Target context; the factor is target / trained context.")]
PresetOpt = Annotated[Optional[str], _opt("--preset", panel=METHOD, help="A preset from configs/patch-NAME.toml.")]
ConfigOpt = Annotated[Optional[Path], _opt("--config", panel=METHOD, help="A TOML file with a \\[patch] table.")]
SetOpt = Annotated[Optional[list[str]], _opt("--set", help="Any method option as key=value (repeatable).")]
OrigOpt = Annotated[Optional[int], _opt("--original-max-position-embeddings",
                                        help="Pretraining context (yarn, llama3, longrope).")]
FloatOpt = Optional[float]
BetaFastOpt = Annotated[FloatOpt, _opt("--beta-fast", help="yarn: ramp end, in rotations (default 32).")]
BetaSlowOpt = Annotated[FloatOpt, _opt("--beta-slow", help="yarn: ramp start, in rotations (default 1).")]
AttnOpt = Annotated[FloatOpt, _opt("--attention-factor", help="yarn/longrope: cos/sin scale.")]
MscaleOpt = Annotated[FloatOpt, _opt("--mscale", help="yarn: DeepSeek-style mscale.")]
MscaleAllOpt = Annotated[FloatOpt, _opt("--mscale-all-dim", help="yarn: DeepSeek-style mscale_all_dim.")]
NoTruncOpt = Annotated[bool, _opt("--no-truncate", help="yarn: do not round the ramp ends to whole dimensions.")]
LowOpt = Annotated[FloatOpt, _opt("--low-freq-factor", help="llama3: low frequency factor (default 1).")]
HighOpt = Annotated[FloatOpt, _opt("--high-freq-factor", help="llama3: high frequency factor (default 4).")]
ShortOpt = Annotated[Optional[str], _opt("--short-factor", help="longrope: rotary_dim/2 comma-separated factors.")]
LongOpt = Annotated[Optional[str], _opt("--long-factor", help="longrope: rotary_dim/2 comma-separated factors.")]
LongFileOpt = Annotated[Optional[Path], _opt("--longrope-file", help="longrope: JSON with short_factor/long_factor.")]
InPlaceOpt = Annotated[bool, _opt("--in-place", panel=OUTPUT, help="Rewrite config.json in place (backup kept).")]
DryRunOpt = Annotated[bool, _opt("--dry-run", panel=OUTPUT, help="Print a unified diff of config.json; write nothing.")]
EmitOpt = Annotated[str, _opt("--emit", panel=OUTPUT, help="config (write), or print vllm / llama.cpp flags.")]
SchemaOpt = Annotated[Optional[str], _opt("--schema", panel=OUTPUT, help="both (default), v4 or v5 config keys.")]
CopyOpt = Annotated[bool, _opt("--copy", panel=OUTPUT, help="Copy weights instead of hardlinking them.")]
ReplaceOpt = Annotated[bool, _opt("--replace-existing", panel=OUTPUT,
                                  help="Replace scaling already in a config that ropectl did not write.")]


def _flag_choice(method: str | None, factor: float | None, target: int | None, options: dict[str, Any],
                 longrope_file: Path | None, schema: str | None) -> Any:
    from ropectl.patch.spec import MethodChoice
    from ropectl.rope.methods import parse_spec

    if method and (":" in method or "," in method):
        parsed = parse_spec(method)
        method, factor = parsed.name, factor if factor is not None else parsed.factor
        options = {**dict(parsed.options), **options}
    return MethodChoice(method, factor, target, {k: v for k, v in options.items() if v is not None},
                        longrope_file, schema)


def _render(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if result["emit"]:
        typer.echo(result["emit"]["command"])
        for warning in result["warnings"]:
            typer.echo(f"warning: {warning}", err=True)
        return
    if result["diff"] is not None:
        typer.echo(result["diff"] or "(no change)")
    before, after, pairs = result["before"], result["after"], result["pairs"]
    table = Table(title=f"{result['method']}  ({result['mode']})", show_header=True, box=None)
    for col in ("", "before", "after"):
        table.add_column(col, style="bold cyan" if not col else None)
    for key, label in (("rope_type", "rope type"), ("rope_theta", "θ"), ("factor", "factor"),
                       ("attention_factor", "attention factor"), ("max_position_embeddings", "max positions")):
        table.add_row(label, _fmt(before[key]), _fmt(after[key]))
    table.add_row("context", _fmt(result["trained_context"]), _fmt(result["target_context"]))
    console.print(table)
    console.print(f"{pairs['total']} dimension pairs: [green]{pairs['kept']} kept[/green], "
                  f"[yellow]{pairs['interpolated']} interpolated[/yellow], {pairs['blended']} blended")
    for label, theta in result["other_layers"].items():
        console.print(f"[dim]{label} keeps θ={_fmt(theta)}[/dim]")
    _render_files(result, console)
    for warning in result["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def _render_files(result: dict[str, Any], console: Any) -> None:
    if result["output"]:
        hows: dict[str, int] = {}
        for f in result["files"]:
            hows[f["how"]] = hows.get(f["how"], 0) + 1
        console.print(f"wrote {result['output']}: " + ", ".join(f"{n} {how}" for how, n in hows.items()))
    if result["backup"]:
        console.print(f"backup of the old config: {result['backup']}")
    if result["verification"]:
        v = result["verification"]
        detail = f"max relative error {v['max_rel_error']:.1e}" if "max_rel_error" in v else \
            f"{v.get('tensors_identical', 0)} tensors identical"
        console.print(f"[green]verified[/green] with {v['engine']}: {detail}")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.6g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


@handle_errors
def patch(
    model: ModelArg, method: MethodOpt = None, factor: FactorOpt = None, target_length: TargetOpt = None,
    preset: PresetOpt = None, config: ConfigOpt = None, set_: SetOpt = None, original: OrigOpt = None,
    beta_fast: BetaFastOpt = None, beta_slow: BetaSlowOpt = None, attention_factor: AttnOpt = None,
    mscale: MscaleOpt = None, mscale_all_dim: MscaleAllOpt = None, no_truncate: NoTruncOpt = False,
    low_freq_factor: LowOpt = None, high_freq_factor: HighOpt = None, short_factor: ShortOpt = None,
    long_factor: LongOpt = None, longrope_file: LongFileOpt = None, output: OutputOpt = None,
    in_place: InPlaceOpt = False, dry_run: DryRunOpt = False, emit: EmitOpt = "config", schema: SchemaOpt = None,
    force: ForceOpt = False, copy: CopyOpt = False, replace_existing: ReplaceOpt = False, json_out: JsonOpt = False,
) -> None:
    """Rewrite a checkpoint's RoPE scaling (config.json or GGUF metadata), verified against transformers."""
    from ropectl.patch import PatchSpec, build_choice, method_spec, patch_checkpoint

    options = {"original_max_position_embeddings": original, "beta_fast": beta_fast, "beta_slow": beta_slow,
               "attention_factor": attention_factor, "mscale": mscale, "mscale_all_dim": mscale_all_dim,
               "truncate": False if no_truncate else None, "low_freq_factor": low_freq_factor,
               "high_freq_factor": high_freq_factor, "short_factor": short_factor, "long_factor": long_factor}
    flags = _flag_choice(method, factor, target_length, options, longrope_file, schema)
    choice = build_choice(preset, config, flags, set_ or ())
    spec = PatchSpec(model=model, method=method_spec(choice), target_length=choice.target_length, output=output,
                     in_place=in_place, dry_run=dry_run, emit=emit, schema=choice.schema or "both", force=force,
                     copy=copy, replace_existing=replace_existing)
    result = patch_checkpoint(spec).to_dict()
    if json_out:
        typer.echo(json.dumps(result, indent=2))
    else:
        _render(result)


def register(app: typer.Typer) -> None:
    app.command("patch")(patch)
