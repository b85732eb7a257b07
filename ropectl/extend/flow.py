"""The stages in order, each run once: a finished stage's record (``state``) is reused on --resume, and a stop
inside one (Ctrl-C, SIGTERM) ends as one line with the command that resumes it.

Why each gated stage ran or not is part of the record: ``--search``/``--finetune`` always or never, else the rule
in ``spec`` (zero-shot not reached, and the plan kept the stage: its budget share holds enough trials or steps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ropectl.extend import stages as st
from ropectl.extend import state
from ropectl.extend.stages import Context


def once(ctx: Context, name: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``work``'s record, or the stored one of a finished stage."""
    from ropectl.runtime.interrupt import Interrupted

    kept = state.done(ctx.spec.out, name)
    if kept is not None:
        ctx.say(f"{name}: done earlier, reused ({ctx.spec.out / 'stages' / (name + '.json')})")
        return kept
    ctx.say(f"stage {name}")
    try:
        return state.finish(ctx.spec.out, name, work())
    except (Interrupted, KeyboardInterrupt) as exc:
        state.claim_all(ctx.spec.out)
        raise interrupted(ctx.spec, name, exc) from None


def gate(ctx: Context, name: str, zero: dict[str, Any]) -> tuple[bool, str]:
    """Whether a gated stage runs, and why (the rule in ``spec``)."""
    stage = ctx.plan.stage(name)
    if stage.runs == "never":
        return False, f"--{name} never" if getattr(ctx.spec, name) == "never" else stage.note or "not runnable here"
    if stage.runs == "yes":
        return True, f"--{name} always"
    if stage.runs == "cut":
        return False, next((c for c in ctx.plan.cut if c.startswith(name)), "cut by the plan")
    if zero["reached"]:
        return False, f"auto: zero-shot {zero['carries']} reached ({zero['why']})"
    return True, f"auto: zero-shot {zero['carries']} not reached ({zero['why']}) and the budget holds " \
                 f"{next(iter(stage.size.values()))} {next(iter(stage.size))}"


def stages(ctx: Context) -> dict[str, Any]:
    """Run (or reuse) every stage; returns each one's record and the decisions."""
    out: dict[str, Any] = {"decisions": {}}
    gguf = ctx.spec.model.lower().endswith(".gguf")
    zero = out["zero-shot"] = st.carry(once(ctx, "zero-shot", lambda: st.zero_shot(ctx)), ctx.spec.max_regression, gguf)
    method = zero["carries"]
    run, why = gate(ctx, "search", zero)
    out["decisions"]["search"] = {"ran": run, "why": why}
    if run:
        found = out["search"] = once(ctx, "search", lambda: st.search(ctx, ctx.plan.stage("search").size["trials"]))
        method = found["spec"]
    run, why = gate(ctx, "finetune", zero)
    out["decisions"]["finetune"] = {"ran": run, "why": why}
    if run:
        out["finetune"] = once(ctx, "finetune", lambda: st.finetune(ctx, method,
                                                                     ctx.plan.stage("finetune").size["steps"]))
        shipped = {"method": out["finetune"]["method"], "path": out["finetune"]["path"], "finetuned": True}
        out["ship"] = state.finish(ctx.spec.out, "ship", shipped)
        out["gguf"] = once(ctx, "gguf", lambda: gguf_of(ctx, shipped["path"]))
    else:
        out["ship"] = once(ctx, "ship", lambda: st.ship(ctx, method))
    extended = out["ship"]["path"]
    out["acceptance"] = once(ctx, "acceptance", lambda: st.acceptance(ctx, extended))
    out["engines"] = once(ctx, "engines", lambda: st.engines(ctx, out.get("gguf", {}).get("path") or extended))
    return out


def gguf_of(ctx: Context, folder: str) -> dict[str, Any]:
    """A GGUF source fine-tuned: its weights back in a GGUF, by llama.cpp's own converter where it is here."""
    if not ctx.spec.model.lower().endswith(".gguf"):
        return {"note": "MODEL is not a GGUF: no GGUF written"}
    from ropectl.extend.gguf import convert

    return convert(folder, ctx.spec.out / "model.gguf", ctx.spec.model)


def interrupted(spec: Any, stage: str, exc: BaseException) -> Any:
    """A stop inside ``stage``, in extend's words, with the command that resumes it."""
    from ropectl.runtime.interrupt import Interrupted, resume_line, terminated

    term = exc.terminated if isinstance(exc, Interrupted) else terminated(exc)
    line = resume_line(spec.out)
    return Interrupted(f"extend {'terminated' if term else 'interrupted'} in stage {stage}; finished stages are kept "
                       f"in {spec.out}", "rerun with --resume", terminated=term, resume=line)
