"""``ropectl verify``: the checkpoint a user ships, scored on the same token ids by every engine that will serve it,
each engine against transformers (the reference) per token and position band.

Each engine runs where it can (``score.run_job`` in this process, or ``remote.run_worker`` in the Python named by
``--engine-python``); a refusal leaves its row "not checked" with the engine's own reason and the others run on.
SGLang's row is its config and rotary code only (``rotary``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ropectl.errors import RopectlError
from ropectl.verify import compare
from ropectl.verify.plan import REFERENCE, ROTARY_ONLY, Plan, make_plan, token_ids
from ropectl.verify.score import Job, normalized, run_job
from ropectl.verify.spec import NOT_CHECKED, REFERENCE_ROW, EngineRow, VerifyResult, VerifySpec

Say = Callable[[str], None]


def run_verify(spec: VerifySpec, say: Say) -> VerifyResult:
    """Every engine's row, and the files written under ``spec.out`` (the JSON and the ΔNLL plot)."""
    from ropectl.runtime.model import load_tokenizer, model_source

    source = model_source(spec.model)
    plan = make_plan(spec, source.config)
    say(f"verify: {source.label}, trained {plan.trained}, target {plan.target}; lengths "
        f"{', '.join(map(str, plan.lengths))}; engines {', '.join(plan.engines)} ({plan.dtype})")
    ids = token_ids(spec.dataset, load_tokenizer(source.path, source.kwargs), spec.samples, max(plan.lengths), say)
    return verify_ids(spec, plan, ids, say)


def verify_ids(spec: VerifySpec, plan: Plan, ids: tuple[tuple[int, ...], ...], say: Say, method: Any = None,
               ) -> VerifyResult:
    """The rows on these token ids (search passes its held-out documents, and its winner as ``method`` where it
    wrote no folder: every engine then runs the model with that method, vLLM with what ``--emit vllm`` prints)."""
    from ropectl.eval.engines import get_engine

    floors = any(get_engine(n).quantized_weights for n in plan.engines if n not in ROTARY_ONLY)
    cache: dict[str, dict[str, Any]] = {}

    def reference() -> dict[str, Any]:  # scored when first needed: nothing runs where no engine can
        if not cache:
            say(f"transformers: scoring {_docs(len(ids))} at {', '.join(map(str, plan.lengths))} tokens")
            cache["answer"] = normalized(_answer(_job(spec, plan, ids, REFERENCE, spec.model, floors, method),
                                                 spec.python_for(REFERENCE)))
        return cache["answer"]

    rows = []
    for name in plan.engines[1:]:
        rows.append(_row(spec, plan, ids, name, reference, say, method))
        say(_line(rows[-1]))
    if cache or REFERENCE in spec.engines:
        ref = reference()
        rows.insert(0, EngineRow(engine="transformers", verdict=REFERENCE_ROW, why="the reference",
                                 serve_line=ref["serve_line"], ppl={n: compare.ppl(v) for n, v in ref["nll"].items()},
                                 max_abs_dnll=0.0))
    result = VerifyResult(rows=tuple(rows), lengths=plan.lengths, trained=plan.trained, target=plan.target,
                          documents=len(ids), dtype=plan.dtype)
    if spec.out:
        from ropectl.verify.output import write

        result = write(result, spec.out)
    return result


def checkable(engine: str, model: str) -> bool:
    """Whether ``verify MODEL --engine ENGINE`` can score the engine without more input: an engine that runs only
    GGUF files needs a GGUF (``--gguf``) beside a folder."""
    from ropectl.eval.engines import get_engine

    return engine in ROTARY_ONLY or not get_engine(engine).loads_gguf or model.lower().endswith(".gguf")


def _job(spec: VerifySpec, plan: Plan, ids: Any, engine: str, model: str, floor: bool, method: Any = None) -> Job:
    return Job(engine=engine, model=model, serve=spec.serve_args(engine), lengths=plan.lengths, ids=ids,
               trained=plan.trained, target=plan.target, dtype=plan.dtype, device=plan.device, floor=floor,
               method=method)


def _row(spec: VerifySpec, plan: Plan, ids: Any, name: str, reference: Callable[[], dict[str, Any]], say: Say,
         method: Any = None) -> EngineRow:
    from ropectl.eval.engines import get_engine

    python = spec.python_for(name)
    if name in ROTARY_ONLY:
        from ropectl.verify.rotary import rotary_row

        return rotary_row(name, spec, plan, python)
    factory = get_engine(name)
    model = spec.gguf or spec.model if factory.loads_gguf else spec.model
    if not checkable(name, model):
        return _not_checked(name, f"{name} loads a GGUF file, not the folder '{model}'. Fix: convert it with "
                            "llama.cpp's convert_hf_to_gguf.py (python convert_hf_to_gguf.py FOLDER --outfile "
                            "MODEL.gguf) and pass --gguf MODEL.gguf")
    job = _job(spec, plan, ids, name, model, factory.quantized_weights, method)
    where = f" (Python {python})" if python else ""
    say(f"{name}{where}: scoring {_docs(len(ids))} at {', '.join(map(str, plan.lengths))} tokens")
    try:
        answer = normalized(_answer(job, python))
    except RopectlError as exc:
        why = f"{exc.problem}. Fix: {exc.fix}" if exc.fix else exc.problem
        if not python and "pip install" in (exc.fix or ""):
            why += f", or run it from its own venv with --engine-python {name}=PATH"
        return _not_checked(name, why)
    return judge(name, answer, reference(), plan)


def _answer(job: Job, python: str | None) -> dict[str, Any]:
    """The job run here, or by ``python`` (another venv's: --engine-python ENGINE=PATH)."""
    if not python:
        return run_job(job)
    from ropectl.verify.remote import run_worker

    return run_worker(python, job.to_dict())


def judge(name: str, answer: dict[str, Any], reference: dict[str, Any], plan: Plan) -> EngineRow:
    """The row of one engine's answer against the reference's, per length and band."""
    per_length = {n: compare.deltas(answer["nll"][n], reference["nll"][n]) for n in answer["nll"]}
    floor = None
    if answer.get("floor") is not None and reference.get("floor") is not None:
        inside = compare.deltas(answer["floor"], reference["floor"])
        floor = math.fsum(d for doc in inside for d in doc) / max(1, sum(len(doc) for doc in inside))
    tol = compare.tolerance(plan.dtype, floor)
    ppl = {n: compare.ppl(v) for n, v in answer["nll"].items()}
    skipped = "; ".join(f"not checked at {n}: {why}" for n, why in sorted(answer["skipped"].items()))
    if not per_length:
        return _not_checked(name, skipped or "no length scored", answer.get("serve_line", ""))
    verdict, why, mean, top = compare.verdict(per_length, plan.lengths, tol)
    if floor is not None:
        why += (f"; the file's floor inside {plan.trained} tokens {floor:.2e} (tolerance = "
                f"{compare.allowance(plan.dtype):g} + floor x {1 + compare.FLOOR_MARGIN:g})")
    longest = max(per_length)
    deltas = per_length[longest]
    curve = [math.fsum(doc[k] for doc in deltas) / len(deltas) for k in range(min(map(len, deltas)))]
    return EngineRow(engine=name, verdict=verdict, why=f"{why}; {skipped}" if skipped else why, ppl=ppl,
                     max_abs_dnll=top, serve_line=answer["serve_line"], mean_abs_dnll=mean, tolerance=tol,
                     floor=floor, bands=compare.bands(per_length, plan.lengths), deltas={longest: curve})


def _not_checked(name: str, why: str, line: str = "") -> EngineRow:
    return EngineRow(engine=name, verdict=NOT_CHECKED, why=why, ppl={}, max_abs_dnll=None, serve_line=line)


def _line(row: EngineRow) -> str:
    return f"{row.engine}: {row.verdict} ({row.why})"


def _docs(n: int) -> str:
    return f"{n} document{'' if n == 1 else 's'}"
