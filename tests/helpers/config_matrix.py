"""The config matrix: every published config (tests/fixtures/configs) through every command path, in-process.

A cell is (config, command, mode, method); ``cells()`` lists them, ``run_cell`` runs one on the config's tiny copy
(tests/helpers/published.py) and returns what the user would see, ``check`` compares that with the table
(tests/helpers/config_matrix_table.py). The commands are the CLI's own (typer's CliRunner), except recommend's
plan, which has no command of its own: it is built as the sweeps build it, every candidate applied to the
config before any weight loads.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tests.helpers.published import names, published

# Each scaling runs at twice the context the model ships: its own factor x 2 (x 2 where it ships none).
PATCH_MODES = ("output", "in-place", "dry-run", "schema-v4", "schema-v5")  # with the config's own scaling
EMIT_ENGINES = ("vllm", "sglang", "llama.cpp")
AS_IS = "as-is"  # the checkpoint as it stands: --emit without -m, and the method spec once there is one
# Published configs whose scaling ropectl replaces only on --replace-existing (its type is not re-extendable), and
# the Phi-3 family, whose transformers config takes no rope type but default and longrope.
REPLACES = {"gemma-3-4b-it", "phi-3.5-mini-instruct", "phi-4-mini-instruct"}
PHI3 = {"phi-3.5-mini-instruct", "phi-4", "phi-4-mini-instruct"}
PPL_LENGTH, TASK_LENGTH = "64", "320"  # passkey's prompt needs up to 270 tokens of the char tokenizer
# eval-tasks scores through the same load, rotary switch and forward as eval-ppl, which runs on every config; it
# runs on one config per kind of model the corpus holds, so the default suite stays within its time (each eval run
# costs about a second, most of it the plots): a shipped llama3 or yarn, a vision-language wrapper (with per-layer
# RoPE, with Ministral's extra rope key), LongRoPE, MLA, eager attention with sinks, DCA, Llama 4's chunked NoPE layers.
TASKS_ON = {"llama-3.1-8b-instruct", "qwen3-8b-yarn", "gemma-3-4b-it", "ministral-3-8b", "phi-3.5-mini-instruct",
            "deepseek-v3", "gpt-oss-20b", "qwen2.5-7b-instruct-1m", "llama-4-scout-17b-16e"}


@dataclass(frozen=True)
class Cell:
    config: str
    command: str  # inspect, patch, emit, eval-ppl, eval-tasks, recommend
    mode: str  # patch: dry-run-json or one of PATCH_MODES; emit: the engine; else "-"
    method: str  # a method name or spec, AS_IS, "-"; eval runs take several, comma-separated

    @property
    def id(self) -> str:
        return "-".join(p for p in (self.config, self.command, self.mode, self.method) if p != "-")


@dataclass(frozen=True)
class Seen:
    """What a cell printed: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    @property
    def error(self) -> str:
        lines = [ln for ln in self.err.splitlines() if ln.startswith("error: ")]
        return lines[-1] if lines else ""


# --- what each config is run with ------------------------------------------------------------------------------

def shipped(name: str) -> tuple[str | None, float]:
    """The rope type a published config ships and its factor (1 where none), read from the JSON itself."""
    config = published(name)
    text = config.get("text_config", config)
    section = text.get("rope_scaling") or text.get("rope_parameters") or {}
    kind = section.get("rope_type") or section.get("type")
    if kind in (None, "default", "mrope"):
        return None, 1.0
    factor = section.get("factor")
    if factor is None:  # longrope states none: max positions / original
        factor = text["max_position_embeddings"] / text.get("original_max_position_embeddings",
                                                             section.get("original_max_position_embeddings"))
    return kind, float(factor)


def factor(name: str) -> float:
    return 2 * shipped(name)[1]


def scaling(name: str) -> str:
    """The config's own scaling, re-extended (yarn or llama3), else ntk for Phi-3 (its config takes no other
    type), else yarn: the method the patch modes, the emits and the eval cells use."""
    kind, _ = shipped(name)
    method = kind if kind in ("yarn", "llama3") else "ntk" if name in PHI3 else "yarn"
    return f"{method}:{factor(name):g}"


@cache
def methods() -> tuple[str, ...]:
    """Every method of the registry, and as-is once patch takes it as a method."""
    from ropectl.errors import RopectlError
    from ropectl.rope.methods import METHODS, parse_spec

    out = list(METHODS)
    try:
        parse_spec(AS_IS)
    except RopectlError:
        return tuple(out)
    return tuple(dict.fromkeys([*out, AS_IS]))


def spec(method: str, name: str) -> str:
    """A method name as a spec at the config's factor ("yarn" -> "yarn:32"); a spec with its factor unchanged."""
    from ropectl.rope.methods import find_method

    found = None if ":" in method else find_method(method)
    return f"{method}:{factor(name):g}" if found is not None and found.uses_factor else method


def cells() -> list[Cell]:
    out = []
    for name in names():
        own = scaling(name)
        out.append(Cell(name, "inspect", "engines", "-"))
        out += [Cell(name, "patch", "dry-run-json", m) for m in methods()]
        out += [Cell(name, "patch", mode, own) for mode in PATCH_MODES]
        out += [Cell(name, "emit", e, m) for e in EMIT_ENGINES for m in (own, AS_IS)]
        out += [Cell(name, cmd, "-", m) for cmd in ("eval-ppl", "eval-tasks") for m in ("none", own)
                if cmd == "eval-ppl" or name in TASKS_ON]
        out.append(Cell(name, "recommend", "plan", "-"))
    return out


# --- running a cell ---------------------------------------------------------------------------------------------

@cache
def _command() -> Any:
    """The app as the click command typer's CliRunner builds on every call: built once here (it costs about
    0.05 s a call, which the matrix's hundreds of cells would pay again and again)."""
    from typer.main import get_command

    from ropectl.cli.app import app

    return get_command(app)


def invoke(args: list[str]) -> Seen:
    from click.testing import CliRunner  # typer's CliRunner is this one, given get_command(app) per call

    result = CliRunner().invoke(_command(), args)
    return Seen(result.exit_code, result.stdout, result.stderr)


def _method_args(cell: Cell, folder: Path, work: Path) -> list[str]:
    """-m SPEC, the longrope factors file its rotary dim needs, and --replace-existing where the config needs it."""
    given = [] if cell.method == AS_IS and cell.command == "emit" else cell.method.split(",")  # eval: several
    args = [a for m in given for a in ("-m", spec(m, cell.config))]
    if cell.method.startswith("longrope"):
        from tests.helpers.model_sweep import transformers_ropes

        pairs = len(next(iter(transformers_ropes(folder).values()))[0])  # transformers' own rotary class
        path = work / "longrope.json"
        path.write_text(json.dumps({"short_factor": [1.0] * pairs, "long_factor": [factor(cell.config)] * pairs}))
        args += ["--longrope-file", str(path)]
    return args + (["--replace-existing"] if cell.config in REPLACES and cell.method != AS_IS else [])


def _patch_args(cell: Cell, folder: Path, work: Path) -> list[str]:
    model = str(folder)
    if cell.mode == "in-place":
        model = str(shutil.copytree(folder, work / "copy"))
    mode = {"dry-run-json": ["--dry-run", "--json"], "output": ["-o", str(work / "out")], "in-place": ["--in-place"],
            "dry-run": ["--dry-run"], "schema-v4": ["--dry-run", "--schema", "v4"],
            "schema-v5": ["--dry-run", "--schema", "v5"]}[cell.mode]
    return ["patch", model, *_method_args(cell, folder, work), *mode]


def run_cell(cell: Cell, folder: Path, work: Path, corpus: Path) -> Seen:
    """Run one cell on ``folder`` (the config's tiny copy), writing under ``work``."""
    if cell.command == "inspect":
        return invoke(["inspect", str(folder), "--engines"])
    if cell.command == "patch":
        return invoke(_patch_args(cell, folder, work))
    if cell.command == "emit":
        return invoke(["patch", str(folder), *_method_args(cell, folder, work), "--emit", cell.mode])
    if cell.command == "recommend":
        return recommend_plan(folder)
    common = [*_method_args(cell, folder, work), "--dtype", "fp32", "-o", str(work / "out"), "--json"]
    if cell.command == "eval-ppl":
        return invoke(["eval-ppl", str(folder), "-d", str(corpus), "-l", PPL_LENGTH, "-n", "1", *common])
    return invoke(["eval-tasks", str(folder), "--task", "passkey", "-l", TASK_LENGTH, "-n", "1", *common])


def recommend_plan(folder: Path) -> Seen:
    """recommend's plan for twice the trained context, as its sweeps make it (``recommend.run.plan_grid``), with
    every candidate applied to the model's config as the sweeps then apply it; the plan lines it would print.
    Errors end as the CLI's one handler ends them."""
    import typer

    from ropectl.cli.errors import handle_errors

    lines: list[str] = []

    @handle_errors
    def plan() -> None:
        from ropectl.readers import serving_engines_for
        from ropectl.recommend.plan import plan_lines
        from ropectl.recommend.run import Request, plan_grid
        from ropectl.rope.methods import parse_spec
        from ropectl.runtime.model import method_states, model_source, trained_context

        source = model_source(str(folder))
        target = 2 * (trained_context(source.config) or 0)
        grid, _, _ = plan_grid(Request(model=str(folder), target=target, serve_with=serving_engines_for(str(folder))))
        method_states(source.config, tuple(parse_spec(m) for m in grid.methods))
        lines.extend(plan_lines(grid, None))

    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            plan()
            code = 0
        except typer.Exit as exc:
            code = exc.exit_code
    return Seen(code, "\n".join(lines), err.getvalue())


def forward_runs(folder: Path) -> str:
    """'' when transformers loads ``folder`` (a patched output) and the forward of 16 tokens gives finite logits;
    else what failed."""
    import torch

    from tests.helpers.published import model_class

    try:  # the class the written config's architectures names, as from_pretrained of the published model builds
        cls = model_class(json.loads((folder / "config.json").read_text()))
        model = cls.from_pretrained(str(folder), dtype=torch.float32).eval()
        # transformers 5.24's Llama4ForConditionalGeneration.forward reads image_outputs from its language model's
        # output, which has none (AttributeError on any text-only input, patched or not): where the wrapper holds a
        # whole causal LM, that model's own forward is the text forward
        language = getattr(model, "language_model", None)
        runner = language if language is not None and hasattr(language, "lm_head") else model
        with torch.no_grad():
            logits = runner(input_ids=torch.arange(3, 19).unsqueeze(0)).logits
    except Exception as exc:  # the oracle's own failure is the finding: report it, whatever it is
        return f"{type(exc).__name__}: {exc}"
    return "" if bool(torch.isfinite(logits).all()) else "non-finite logits"


def describe(seen: Any) -> str:
    return f"exit {seen.code}; stderr: {seen.err.strip()[-600:]}"
