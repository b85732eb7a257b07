"""Options shared by several commands, declared once (huggingface_hub CLI style)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any, Optional

import typer


def opt(*names: str, panel: str, **kw: Any) -> Any:
    """A typer option in a help panel, its default stated in the help text rather than by typer."""
    return typer.Option(*names, rich_help_panel=panel, show_default=False, **kw)

ModelArg = Annotated[
    str,
    typer.Argument(help="Checkpoint folder, .gguf file, or Hugging Face hub id.", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one machine-readable JSON object instead of a summary.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Output folder (or .gguf file).")]
ForceOpt = Annotated[bool, typer.Option("--force", help=(
    "Use an existing output folder: patch and convert-layout replace one ropectl wrote, eval-ppl adds to it. "
    "Files ropectl did not write are never deleted."))]
# Every length flag of every command takes this syntax, through ropectl.runtime.lengths.parse_length.
LENGTH_SYNTAX = "8192, 8k or 8K (k = 1024), 1e5, 48.5k (= 49664): a whole number of tokens"
# --held-out in every command that holds documents out: a count drawn with the seed, or the documents by name.
HELD_OUT_SYNTAX = "a count K (a seeded draw) or ID,ID,... as the corpus names them, e.g. tragedies/hamlet"

# The options several commands take: each one's spellings and the first words of its help (what it means) are
# declared here once; a command adds what is its own (what its seed draws, its default) through shared().
# tests/cli/test_flag_vocabulary.py fails when two commands take a name that is not declared here, or when a
# command's help for it does not start with these words. docs/reference/flags.md is the table for users.
SHARED: dict[str, tuple[tuple[str, ...], str]] = {
    "--target-length": (("--target-length", "-t"), f"The context to extend to ({LENGTH_SYNTAX})"),
    "--factor": (("--factor", "-f"), "Context extension factor (> 1)"),
    "--seed": (("--seed",), "Seed of the random draws"),
    "--resume": (("--resume",), "Continue the stopped run in the output folder, skipping what it finished"),
    "--dataset": (("--dataset",), "The documents"),
    "--docs": (("--docs",), "Documents"),
    "--samples": (("--samples",), "Trials"),
    "--engine": (("--engine",), "Evaluation engine"),
    "--budget": (("--budget",), "Minutes the work may take"),
    "--batch-tokens": (("--batch-tokens",), "Tokens per forward or step"),
    "--held-out": (("--held-out",), f"Documents held out ({HELD_OUT_SYNTAX})"),
    "--dry-run": (("--dry-run",), "Print the plan and write nothing"),
    "--emit": (("--emit",), "Print a serving engine's flags (vllm, sglang, llama.cpp) instead of writing"),
    "--preset": (("--preset",), "A preset TOML of this command's options"),
    "--config": (("--config",), "A TOML file with a [patch] table"),
    "--set": (("--set",), "Any method option as key=value (repeatable)"),
    "--trials": (("--trials",), "Search trials (Optuna's), pruned and infeasible ones included"),
    "--steps": (("--steps",), "Optimizer steps of the fine-tune"),
    "--short-mix": (("--short-mix",), "Fraction of training sequences packed from short documents (0.4 = 40 %)"),
    "--doc-mask": (("--doc-mask/--no-doc-mask",), "Attention stays inside each document packed into a sequence"),
}


def shared(name: str, *more: str, panel: str, detail: str = "", **kw: Any) -> Any:
    """The option ``name`` as SHARED declares it, plus this command's extra short names and its ``detail``."""
    spellings, meaning = SHARED[name]
    return opt(*spellings, *more, panel=panel, help=f"{meaning}{': ' + detail if detail else '.'}", **kw)

# --max-regression in every command that judges in-window quality: one reference (the model unchanged) everywhere;
# each command states its own default.
def max_regression_opt(default: float, detail: str = "") -> Any:
    return opt("--max-regression", panel="Decision", help=(
        "Largest PPL increase over the unpatched model (`none`; report's BASE) allowed inside the trained context, "
        f"as a fraction (0.05 = 5 %){detail} [default: {default:g}]."))


MaxRegressionOpt = Annotated[Optional[float], max_regression_opt(0.05)]  # recommend's and search's default
SeqLenOpt = Annotated[
    Optional[str],
    typer.Option("--seq-len", help=f"Sequence length at which to evaluate length-dependent RoPE (dynamic, longrope): "
                                   f"{LENGTH_SYNTAX}.", show_default=False),
]

METHOD_OPTIONS_PANEL = "Method options"
_FLAG_TYPES: dict[type, Any] = {float: Optional[float], int: Optional[int], list: Optional[str], str: Optional[str]}


def method_option_parameters(prefix: str) -> list[inspect.Parameter]:
    """One flag per option in the method registry (declared once there): ``--beta-fast``, ``--no-truncate`` ...

    Each parameter is named ``prefix + option`` and defaults to None, so only the flags a user gives form a layer.
    A bool option gets ``--name/--no-name``; a list option takes comma-separated numbers.
    """
    from ropectl.rope.methods import METHODS  # the registry is pure Python: --help stays instant

    params: dict[str, Any] = {}
    helps: dict[str, dict[str, list[str]]] = {}  # option -> its help text -> the methods that say it
    for method in METHODS.values():
        for p in method.params:
            params.setdefault(p.name, p)
            default = "" if p.default is None or p.kind is bool else f" (default {p.default:g})"
            helps.setdefault(p.name, {}).setdefault(p.help + default, []).append(method.name)
    out = []
    for name, p in params.items():
        flag = "--" + name.replace("_", "-")
        text = "; ".join(f"{', '.join(users)}: {help_}" for help_, users in helps[name].items()) + "."
        if p.kind is bool:
            kind: Any = Optional[bool]
            option = typer.Option(f"{flag}/--no-{flag[2:]}", help=text, rich_help_panel=METHOD_OPTIONS_PANEL)
        else:
            kind = _FLAG_TYPES.get(p.kind, Optional[str])
            option = typer.Option(flag, help=text + (" Comma-separated." if p.kind is list else ""),
                                  rich_help_panel=METHOD_OPTIONS_PANEL, show_default=False,
                                  metavar="F,F,..." if p.kind is list else None)
        out.append(inspect.Parameter(prefix + name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                     annotation=Annotated[kind, option]))
    return out


def parse_held_out(text: str) -> tuple[int, tuple[str, ...]]:
    """--held-out as (count, ids): a count with no ids, or the named documents and their count."""
    if text.strip().isdigit():
        return int(text), ()
    ids = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    return len(ids), ids
