"""Options shared by several commands, declared once (huggingface_hub CLI style)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

ModelArg = Annotated[
    str,
    typer.Argument(help="Checkpoint folder, .gguf file, or Hugging Face hub id.", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one machine-readable JSON object instead of a summary.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Output folder (or .gguf file).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Write into an existing non-empty output folder.")]
SeqLenOpt = Annotated[
    Optional[int],
    typer.Option("--seq-len", min=1, help="Sequence length at which to evaluate length-dependent RoPE (dynamic, longrope)."),
]
