"""Everything ``report`` checks before it writes anything: the two models' tokenizers and contexts, the lengths, the
candidate tasks that fit the reference length, the retention text. Each refusal is one error with its fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ropectl.errors import ConfigError, UsageError
from ropectl.report.spec import ReportSpec, default_lengths, reference_length


@dataclass(frozen=True, kw_only=True)
class Inputs:
    base_label: str
    extended_label: str
    trained: int  # BASE's trained context: what the extension extends
    reference: int
    lengths: tuple[int, ...]
    candidates: tuple[str, ...]  # tasks whose prompt fits the reference length
    too_long: tuple[str, ...]  # tasks whose prompt does not
    retention: str  # eval-ppl's --dataset for retention
    ppl_lengths: tuple[int, ...]


def preflight(spec: ReportSpec) -> Inputs:
    from ropectl.eval.tasks.ruler import resolve_tasks
    from ropectl.report.retention import check_not_finetune_data, retention_dataset
    from ropectl.runtime.lengths import length_label as label
    from ropectl.runtime.model import model_source, trained_context

    base, extended = model_source(spec.base), model_source(spec.extended)
    trained = trained_context(base.config)
    if not trained:
        raise ConfigError("BASE names no trained context", "pass a BASE whose config has max_position_embeddings")
    if spec.target <= trained:
        raise UsageError(f"the target {label(spec.target)} is at or below BASE's trained context {label(trained)}: "
                         "there is no extension to judge", f"pass a target above it, e.g. -t {label(2 * trained)}")
    tokenizer = _same_tokenizer(base, extended)
    reference = reference_length(trained)
    lengths = tuple(sorted({*(spec.lengths or default_lengths(trained, spec.target)), spec.target}))
    if min(lengths) <= reference or max(lengths) > spec.target:
        raise UsageError(f"--lengths must lie above the reference length {label(reference)} and at most the target",
                         f"pass lengths between {label(reference + 1)} and {label(spec.target)}")
    ppl_lengths = tuple(sorted({reference, trained, spec.target}))
    check_not_finetune_data(extended.config, spec.retention_dataset, spec.docs)
    fits, too_long = _fitting(tokenizer, resolve_tasks(spec.tasks), reference, spec.dataset, spec.seed)
    return Inputs(base_label=base.label, extended_label=extended.label, trained=trained, reference=reference,
                  lengths=lengths, candidates=fits, too_long=too_long,
                  retention=retention_dataset(spec.retention_dataset, max(ppl_lengths)), ppl_lengths=ppl_lengths)


def _same_tokenizer(base: Any, extended: Any) -> Any:
    from ropectl.runtime.corpus import tokenizer_identity
    from ropectl.runtime.model import load_tokenizer

    a, b = load_tokenizer(base.path, base.kwargs), load_tokenizer(extended.path, extended.kwargs)
    if tokenizer_identity(a) != tokenizer_identity(b):
        raise UsageError("BASE and EXTENDED have different tokenizers (vocabulary, merges or special tokens), so "
                         "their trials and documents are not the same tokens",
                         "compare an extension with the checkpoint it was extended from")
    return a


def _fitting(tokenizer: Any, tasks: tuple[str, ...], reference: int, dataset: str | None, seed: int,
             ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tasks whose prompt fits the reference length (one trial built for each), and those that do not."""
    from ropectl.eval.tasks.ruler.runner import build_trials
    from ropectl.eval.tasks.ruler.spec import build_tasks_spec
    from ropectl.runtime.corpus import make_source

    texts = [t for _, t in make_source(dataset).texts()]
    fits, too_long = [], []
    for task in tasks:
        try:
            build_trials(tokenizer, build_tasks_spec(model="-", tasks=task, lengths=[reference], samples=1, seed=seed),
                         iter(texts))
        except UsageError:  # "length N is too short for task T"
            too_long.append(task)
        else:
            fits.append(task)
    if not fits:
        raise UsageError(f"no candidate task fits the reference length {reference} (a quarter of the trained context)",
                         "pass --task with shorter tasks (niah_single_1, passkey)")
    return tuple(fits), tuple(too_long)
