"""Each stage, a call into the package that owns its work: recommend's sweeps (zero-shot), search's study,
finetune's trainer, patch's one write path (ship), report's card (acceptance), verify's engines. Each takes the
run's ``Context`` and returns a JSON-able record of what it did, which ``state`` keeps for --resume."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropectl.extend.plan import Plan
from ropectl.extend.spec import FINETUNE_HELD_OUT, SEARCH_DOCS, SEARCH_HELD_OUT, ExtendSpec, zero_shot_sizes

MODEL = "model"


@dataclass(frozen=True, kw_only=True)
class Context:
    spec: ExtendSpec
    plan: Plan
    folders: dict[str, Path]  # the data splits
    trained: int
    say: Callable[[str], None]

    def stage_dir(self, name: str) -> Path:
        return self.spec.out / "stages" / name

    def minutes(self, name: str) -> float | None:
        from ropectl.extend.spec import SHARES

        return None if self.spec.budget_min is None else self.spec.budget_min * SHARES[name]


def zero_shot(ctx: Context) -> dict[str, Any]:
    """recommend's sweeps and rule on the search documents; *reached* by the rule in ``spec``."""
    from ropectl.recommend.run import run_sweeps

    out, s = ctx.stage_dir("zero-shot"), ctx.spec
    sweeps = run_sweeps(s.model, s.target, s.factor, out, s.dtype, s.device, s.max_regression,
                        serve_with=s.serve_with, engine_options={"dataset": str(ctx.folders["search"]),
                                                                 **({"engine": s.engine} if s.engine else {})},
                        resume=out.exists(), budget_min=ctx.minutes("zero-shot"), say=ctx.say,
                        sizes=zero_shot_sizes(s))
    rec = sweeps.recommendation
    return {"winner": rec.winner.method, "confident": rec.confident, "skipped": sweeps.skipped,
            "recommendation": rec.to_dict(), "folder": str(out)}  # what extend carries on: ``carry``, in flow


def carry(zero: dict[str, Any], max_regression: float, gguf: bool = False) -> dict[str, Any]:
    """The zero-shot record with the candidate extend carries on (``carries``, ``carry_why``) and whether it is
    *reached* (``reached``, ``why``). recommend's winner, unless it scales nothing (``none``, or the checkpoint as it
    is with no scaling): that serves no further than the trained context, so it is not an extension of it, and
    recommend crowns it wherever no method separates from it. Then the best-ranked eligible method that scales (within
    --max-regression in the window), which acceptance judges against MODEL; the winner only where none is eligible.
    A method a GGUF cannot hold (``gguf`` MODEL: dynamic) is passed over, since patch could not write it.
    A pure function of the stored recommendation, so a resumed run decides as an uninterrupted one."""
    from ropectl.rope.methods import get_method, parse_spec

    rec = zero["recommendation"]

    def unwritable(method: str) -> bool:  # patch's own GGUF refusal (``patch.gguf.check_method_for_gguf``)
        return gguf and bool(get_method(parse_spec(method).name).gguf_none)

    def scales(method: str) -> bool:
        m = get_method(parse_spec(method).name)
        if m.unscaled or unwritable(method):
            return False
        return not m.keeps_checkpoint or rec.get("ships") not in (None, "unknown")

    evidence = rec["evidence"]  # the winner first, then recommend's ranking
    chosen = evidence[0]
    why = "recommend's winner"
    if not scales(chosen["method"]):
        scaled = next((e for e in evidence[1:] if e["eligible"] and scales(e["method"])), None)
        if scaled is not None:
            chosen = scaled
            why = (f"the winner {evidence[0]['method']} "
                   + ("cannot be written into a GGUF" if unwritable(evidence[0]["method"]) else
                      "scales nothing, so it serves no further than the trained context")
                   + f"; {scaled['method']} is the best-ranked eligible method that scales")
        else:
            why = "recommend's winner; no eligible method scales"
    reached, reached_why = zero_shot_reached(chosen, max_regression)
    return {**zero, "carries": chosen["method"], "carry_why": why, "reached": reached, "why": reached_why}


def zero_shot_reached(chosen: dict[str, Any], max_regression: float) -> tuple[bool, str]:
    """recommend's evidence row of ``chosen`` against the rule in ``spec``."""
    from ropectl.eval.stats import wilson_interval
    from ropectl.report.spec import CONFIDENCE, THRESHOLD

    score, trials = chosen.get("score"), chosen.get("trials") or 0
    if score is None or not trials:
        return False, "no task score at the target"
    lo = wilson_interval(score * trials, trials, CONFIDENCE)[0]
    regress = chosen.get("regression") or 0.0
    if regress > max_regression:
        return False, f"in-window regression {regress:.2%} > {max_regression:.2%}"
    if lo < THRESHOLD:
        return False, f"task score {score:.0%} at the target, lower bound {lo:.3f} < {THRESHOLD}"
    return True, f"task score {score:.0%} at the target, lower bound {lo:.3f} >= {THRESHOLD}"


def search(ctx: Context, trials: int) -> dict[str, Any]:
    import json

    from ropectl.search.output import run_search
    from ropectl.search.run import SearchRequest
    from ropectl.search.spaces import default_space

    out, s = ctx.stage_dir("search"), ctx.spec
    req = SearchRequest(model=s.model, target=s.target, space=s.space or default_space(), out=out, trials=trials,
                        docs=SEARCH_DOCS, held_out=SEARCH_HELD_OUT, dataset=str(ctx.folders["search"]),
                        max_regression=s.max_regression, seed=s.seed, dtype=s.dtype, device=s.device,
                        resume=(out / "study.db").is_file(),
                        check_with=())  # the engines stage verifies what ships on --serve-with's engines
    result = run_search(req, ctx.say)
    rows = json.loads((out / "trials.json").read_text())
    best = result.summary["best"]
    # A trial stopped by Ctrl-C or SIGTERM (failed) measured nothing and was run again on --resume: the card lists
    # the measured trials, as an uninterrupted run's does, and counts the stopped ones apart.
    measured = [{k: t.get(k) for k in ("number", "state", "spec", "fitness")} for t in rows if t["state"] != "fail"]
    return {"spec": result.spec, "found": best["found"], "closed_form": best["closed_form"], "beats": best["beats"],
            "space": req.space, "trials": measured, "stopped_trials": len(rows) - len(measured),
            "search_docs": result.summary["search_docs"], "held_out_docs": result.summary["held_out_docs"],
            "lines": list(result.lines), "folder": str(out)}


def finetune(ctx: Context, method: str, steps: int) -> dict[str, Any]:
    """finetune's defaults (PoSE at the trained window) on the finetune documents; written to OUT/model through
    finetune's writer, which patches the config by patch's own path."""
    from ropectl.finetune.runs import run_dir_for
    from ropectl.finetune.spec import FinetuneSpec
    from ropectl.finetune.train import finetune as train
    from ropectl.rope.methods import get_method, parse_spec

    s, output = ctx.spec, ctx.spec.out / MODEL
    parsed = parse_spec(method)
    # nothing to train with where it scales nothing, or scales per sequence (dynamic: finetune refuses it)
    scaled = not get_method(parsed.name).unscaled and not get_method(parsed.name).inference_only
    window = ctx.plan.stage("finetune").size["window"]
    spec = FinetuneSpec(model=s.model, method=parsed if scaled else parse_spec(unscaled_fallback()), output=output,
                        target_length=None if scaled else s.target, data=str(ctx.folders["finetune"]), steps=steps,
                        window=None if window == ctx.trained else window, held_out=FINETUNE_HELD_OUT, seed=s.seed,
                        dtype=s.dtype if s.dtype in ("auto", "bf16", "fp32") else "auto", device=s.device,
                        resume=(run_dir_for(output) / "run.json").is_file(), force=True)
    result = train(spec)
    prov = result.provenance
    return {"method": prov["method"], "mode": prov["mode"], "window": prov["window"], "steps": prov["steps"],
            "tokens": prov["tokens"], "lr": prov["lr"], "final_loss": result.final_loss,
            "evaluation": result.evaluation, "train_docs": prov["train_docs"], "held_out": prov["held_out"],
            "notes": result.notes, "path": str(output)}


def ship(ctx: Context, method: str) -> dict[str, Any]:
    """patch's one write path: OUT/model (a folder, or model.gguf for a GGUF source, at its own quantization)."""
    from ropectl.patch import PatchSpec, patch_checkpoint
    from ropectl.rope.methods import get_method, parse_spec

    s = ctx.spec
    parsed = parse_spec(method)
    if get_method(parsed.name).unscaled or get_method(parsed.name).keeps_checkpoint:
        return {"method": method, "path": s.model, "note": "the model as it is ships: nothing to write"}
    target = s.out / (MODEL + ".gguf" if s.model.lower().endswith(".gguf") else MODEL)
    result = patch_checkpoint(PatchSpec(model=s.model, method=parsed, output=target, force=True))
    return {"method": result.method, "path": str(target), "verification": result.verification,
            "warnings": list(result.warnings)}


def acceptance(ctx: Context, extended: str) -> dict[str, Any]:
    """report's card of the shipped model against MODEL, on the acceptance and retention documents."""
    import shutil

    from ropectl.report.card import finite
    from ropectl.report.run import run_report
    from ropectl.report.spec import ReportSpec

    s, out = ctx.spec, ctx.stage_dir("acceptance")
    shutil.rmtree(out, ignore_errors=True)  # report does not resume: an unfinished card is redone whole
    stage = ctx.plan.stage("acceptance")
    card = run_report(ReportSpec(base=s.model, extended=extended, target=s.target, out=out,
                                 samples=stage.size["samples"], dataset=str(ctx.folders["acceptance"]),
                                 **({"tasks": s.tasks} if s.tasks else {}), docs=stage.size["docs"],
                                 retention_dataset=str(ctx.folders["retention"]), max_regression=s.max_regression,
                                 dtype=s.dtype, device=s.device, engine=s.engine, seed=s.seed), ctx.say)
    return {"verdict": card.verdict.line, "status": card.data["verdict"]["status"], "card": finite(card.data),
            "folder": str(out)}


def engines(ctx: Context, extended: str) -> dict[str, Any]:
    """verify's rows for the engines in --serve-with (transformers is the one acceptance measured)."""
    wanted = tuple(e for e in ctx.spec.serve_with if e != "transformers")
    if not wanted:
        return {"rows": [], "note": "no engine beyond transformers in --serve-with"}
    from ropectl.verify import VerifySpec, run_verify

    s = ctx.spec
    result = run_verify(VerifySpec(model=extended, target=s.target, engines=wanted, dtype=s.dtype,
                                   device=s.device, out=ctx.stage_dir("engines")), ctx.say)
    return {"rows": [r.to_dict() for r in result.rows], "result": result.to_dict()}


def unscaled_fallback() -> str:
    """The method a fine-tune scales with when zero-shot's winner scales nothing: the one search takes by default
    (the registry's ``search_default``), so the two stages that move off the closed forms start from the same one."""
    from ropectl.rope.methods.registry import search_spaces

    return next(name for name, m in search_spaces().items() if m.search_default)
