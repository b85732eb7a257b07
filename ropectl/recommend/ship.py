"""What ships the winner: the line that names which checkpoint it means, and the commands that ship it.

``none`` is the unscaled base and ``as-is`` the checkpoint unchanged; on a checkpoint that ships a scaling (a
fine-tune's yarn x2, Llama 3.1's llama3 x8) they are two different things to ship, and the line says which.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ropectl.rope.methods import as_is_name, find_method, get_method, parse_spec

VERIFY_PREFIX = "# then check it in the serving engines: "


def ship_line(result: Any, target: str, runs: dict[str, list[str]] | None = None) -> str:
    """``winner: ...``: what shipping the winner means for this checkpoint (``result``: a Recommendation; ``runs``:
    the rows of later --ppl runs, named by their model folder)."""
    winner, ships = result.winner.method, result.ships
    method = None if winner in (runs or {}) else find_method(winner.partition(":")[0].partition(",")[0])
    if method is not None and method.keeps_checkpoint:
        shipped = f"{winner}: {ships}" if ships else f"{winner}: " + ("it ships no scaling" if result.ships_known
                                                                       else "the RoPE its config ships")
        return f"winner: {winner} — ship the checkpoint unchanged ({shipped}) for {target}."
    if method is not None and method.unscaled:
        if result.ships_known and not ships:
            return (f"winner: {winner} — ship the model unchanged for {target}: it ships no scaling, so {winner} is "
                    f"the checkpoint as it is ({as_is_name()}).")
        said = f"the checkpoint ships {ships}; {winner} removes it" if ships else \
            "the results do not say whether the checkpoint ships a scaling"
        return f"winner: {winner} — ship the unscaled base ({said}) for {target}. Ship it with:"
    return f"winner: {winner}. Ship it with:"


def ship_commands(model: str, result: Any, runs: dict[str, list[str]] | None = None) -> list[str]:
    """The commands that ship the winner; a later --ppl run's model as it is (a fine-tune) ships as it stands, and
    a winner that is the checkpoint itself needs no patch (none where it ships no scaling: nothing to write)."""
    winner = result.winner.method
    engines = result.serve_with or ("vllm", "llama.cpp")
    if winner in (runs or {}):
        model, winner = (runs or {})[winner]
        if get_method(parse_spec(winner).name).keeps_checkpoint:
            return [f"# ship {model} as it is (its config already holds the RoPE it was evaluated with)"]
    method = get_method(parse_spec(winner).name)
    if (method.unscaled or method.keeps_checkpoint) and result.ships_known and not result.ships:
        return []  # it ships no scaling: none and as-is are the checkpoint itself, nothing to patch or override
    return patch_commands(model, winner, engines, result.ships_type, getattr(result, "target", None))


def patch_commands(model: str, method: str, serve_with: tuple[str, ...] = ("vllm", "llama.cpp"),
                   shipped_type: str | None = None, target: int | None = None) -> list[str]:
    """The commands that ship ``method``: write the checkpoint, and print the serving line of each engine in
    ``serve_with`` that has one (readers.emitters). The checkpoint as it is (as-is) writes nothing: its lines are
    ``patch MODEL --emit ENGINE`` with no method, checked against ``shipped_type``, the rope type it ships. With a
    ``target``, last (as a comment) the ``ropectl verify`` line that scores what was written in those engines
    against transformers: the readers' claims are what engines should compute; verify measures what they do."""
    path = Path(model)
    tag = method.replace(":", "").replace(",", "-").replace("=", "")
    # into the working folder, never beside the source (the embedded GGUF sits in site-packages)
    out = f"{path.stem}-{tag}.gguf" if path.suffix == ".gguf" else f"{path.name or model}-{tag}"
    from ropectl.readers import emitters, serving_readers

    kept = get_method(parse_spec(method).name).keeps_checkpoint
    base = ["ropectl", "patch", model, *([] if kept else ["-m", method])]
    commands = [] if kept else [shlex.join([*base, "-o", out])]
    kind = shipped_type if kept else parse_spec(method).name
    readers, served = serving_readers(), []
    for engine in (e for e in emitters() if e in serve_with):
        why_not = readers[engine].cannot_serve(kind) if kind else None
        # patch refuses --emit for a method the engine lacks: say so instead of printing a failing command
        commands.append(f"# not for {engine}: {why_not}" if why_not else shlex.join([*base, "--emit", engine]))
        served += [] if why_not else [engine]
    line = verify_line(model if kept else out, served, target) if target is not None else None
    return [*commands, *([line] if line else [])]


def verify_line(written: str, served: list[str], target: int) -> str | None:
    """A comment, not a step (it measures, minutes of forwards at the target; it ships nothing): verify on what was
    written, for each serving engine it can score there (an engine that runs only GGUF files cannot score a folder),
    against transformers. None where no engine but transformers is left."""
    from ropectl.verify.run import checkable
    from ropectl.verify.spec import DEFAULT_ENGINES

    others = [e for e in DEFAULT_ENGINES[1:] if e in served and checkable(e, written)]
    if not others:
        return None
    return VERIFY_PREFIX + shlex.join(["ropectl", "verify", written, "-t", str(target), "--engine",
                                       ",".join([DEFAULT_ENGINES[0], *others])])


def unmeasured_line(result: Any) -> str | None:
    """Where the checkpoint ships a scaling and the results hold no as-is row: the candidate that is missing."""
    kept = as_is_name()
    if not result.ships or any(e.method == kept for e in result.evidence):
        return None
    return (f"{kept} (the checkpoint unchanged: it ships {result.ships}) was not measured, so shipping it as it is "
            f"is not among the candidates: rerun eval-ppl (and eval-tasks) with -m {kept} beside the others")
