"""``ropectl verify``: the checkpoint a user ships, scored on the same token ids in every engine that serves it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ropectl.cli import eval_flags as eo
from ropectl.cli.errors import handle_errors
from ropectl.cli.flags import JsonOpt, opt, shared

RUN, SERVE = eo.RUN, "Serving"
ModelArg = Annotated[str, typer.Argument(help="The checkpoint you ship: folder, .gguf or hub id.", show_default=False)]
TargetOpt = Annotated[Optional[str], shared("--target-length", panel=RUN, detail=(
    "the longest length scored [default: the context the config serves]."))]
# --engines is inspect's switch (one flag name, one kind): verify's list is --engine, repeatable or comma-separated
EnginesOpt = Annotated[Optional[list[str]], shared("--engine", panel=RUN, detail=(
    "the engines to check, repeatable or comma-separated; transformers is the reference and always runs "
    "[default: transformers,vllm,llama.cpp,sglang]."))]
ServeOpt = Annotated[Optional[list[str]], opt("--serve", panel=SERVE, help=(
    "ENGINE=ARGS, repeatable: run ENGINE with your own serving flags, verbatim, e.g. vllm=\"--hf-overrides '{...}' "
    "--max-model-len 16384\" or llama.cpp=\"--rope-scaling yarn --rope-scale 4 ...\" [default: what `patch --emit "
    "ENGINE` prints]."))]
GgufOpt = Annotated[Optional[str], opt("--gguf", panel=SERVE, help=(
    "Your own GGUF conversion of MODEL, run by llama.cpp as its metadata says (with --serve llama.cpp=..., with "
    "those flags)."))]
PythonOpt = Annotated[Optional[list[str]], opt("--engine-python", panel=SERVE, help=(
    "ENGINE=PATH, repeatable: run ENGINE in that venv's Python (vLLM and SGLang pin their own torch), importing "
    "ropectl from here."))]
SamplesOpt = Annotated[int, shared("--samples", panel=RUN, detail="documents every engine scores [default: 2].")]
DatasetOpt = Annotated[Optional[str], shared("--dataset", panel=eo.DATA, detail=(
    "held-out text, a .txt/.md/.jsonl/.parquet file or folder, or a hub dataset [default: the embedded plays]."))]
OutOpt = Annotated[Optional[Path], opt("--out", "-o", "--output", panel=eo.OUT, help=(
    "Folder for verify.json and the ΔNLL plot [default: none; nothing is written]."))]


@handle_errors
def verify_cmd(
    model: ModelArg, target_length: TargetOpt = None, engines: EnginesOpt = None,
    serve: ServeOpt = None, gguf: GgufOpt = None, engine_python: PythonOpt = None, samples: SamplesOpt = 2,
    dataset: DatasetOpt = None, dtype: eo.DtypeOpt = None, device: eo.DeviceOpt = None, out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Score MODEL on the same token ids in every engine that will serve it, each against transformers.

    Lengths: the trained context, the target, and where a length-dependent rule bites. Each engine runs with what
    `patch --emit ENGINE` prints, or with your own flags (--serve, --gguf). Per engine: PPL per length, |ΔNLL| per
    token by position band, and a verdict: same (within the calibrated tolerance), differs (where, by how much) or
    not checked (why). docs/reference/verify.md.
    """
    from ropectl.runtime.lengths import parse_length
    from ropectl.verify import VerifySpec, run_verify
    from ropectl.verify.spec import DEFAULT_ENGINES
    from ropectl.verify.table import table

    spec = VerifySpec(model=model, target=parse_length(target_length) if target_length else None,
                      engines=tuple(e.strip() for v in engines or DEFAULT_ENGINES for e in v.split(",") if e.strip()),
                      serve=_pairs("--serve", serve), gguf=gguf, engine_python=_pairs("--engine-python", engine_python),
                      samples=samples, dataset=dataset, dtype=dtype or "auto", device=device or "auto",
                      out=str(out) if out else None)
    result = run_verify(spec, lambda line: typer.echo(line, err=True))
    if json_out:
        from ropectl.output import dumps

        typer.echo(dumps(result.to_dict()))
        return
    for line in table(result):
        typer.echo(line)


def _pairs(flag: str, values: list[str] | None) -> tuple[tuple[str, str], ...]:
    from ropectl.errors import UsageError

    out = []
    for value in values or ():
        name, sep, rest = value.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"{flag} '{value}' is not ENGINE=VALUE", f"pass e.g. {flag} vllm=...")
        out.append((name.strip(), rest))
    return tuple(out)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_cmd)
