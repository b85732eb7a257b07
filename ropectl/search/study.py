"""The Optuna study a search lives in: where it is stored, which sampler proposes, what it belongs to.

Why Optuna: a maintained optimiser with TPE (good on a few bounded, noisy parameters with no gradient) and CMA-ES
(through ``cmaes``), median pruning on intermediate values, and storage that outlives the process: SQLite in OUT
by default, any RDB URL or Optuna's journal file (``--storage FILE.log``, for machines sharing a file system), so a
search resumes after Ctrl-C, several workers (one per GPU or machine) share one study, and optuna-dashboard reads it.

Every study carries its identity in a user attribute: the model (config and weight files), the space and its
bounds, the target, the search documents and seed, the fitness settings. A storage holding a study from another
search is refused in one line rather than mixed into it.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ropectl.errors import OutputError, UsageError
from ropectl.io.files import atomic_write_text
from ropectl.output import dumps

STUDY = "ropectl-search"
DB = "study.db"
IDENTITY = "ropectl_search"
JOURNAL_SUFFIXES = (".log", ".journal", ".jsonl")
SAMPLERS = ("tpe", "cmaes")
TRIALS_JSON, TRIALS_CSV = "trials.json", "trials.csv"


def storage_url(out: Path, storage: str | None) -> str:
    """``--storage`` as given, else SQLite in OUT."""
    return storage or f"sqlite:///{(out / DB).resolve()}"


def open_storage(url: str) -> Any:
    """An RDB URL (heartbeats: a killed worker's trial is marked failed, not left running), or a journal file."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if "://" not in url:
        if not url.endswith(JOURNAL_SUFFIXES):
            raise UsageError(f"--storage '{url}' is neither a database URL nor a journal file",
                             f"pass e.g. sqlite:///study.db, postgresql://..., or a file ending in {JOURNAL_SUFFIXES[0]}")
        return optuna.storages.JournalStorage(JournalFileBackend(url))
    import warnings

    import sqlalchemy.exc  # Optuna's own dependency for RDB storage

    shown = _without_password(url)
    try:
        with warnings.catch_warnings():  # heartbeats are marked experimental; what they do here is documented above
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, heartbeat_interval=60, grace_period=180)
    except ImportError:  # Optuna's words: "Failed to import DB access module for the specified storage URL"
        raise UsageError(f"--storage '{shown}' needs a database driver that is not installed",
                         "install the driver for that database (e.g. psycopg2-binary for postgresql://), or pass "
                         f"sqlite:///FILE or a journal file FILE{JOURNAL_SUFFIXES[0]}") from None
    except sqlalchemy.exc.NoSuchModuleError:
        raise UsageError(f"--storage '{shown}' names a database SQLAlchemy does not know",
                         f"pass sqlite:///FILE, postgresql://..., mysql://... or a journal file "
                         f"FILE{JOURNAL_SUFFIXES[0]}") from None
    except sqlalchemy.exc.SQLAlchemyError as exc:  # the database refused: a missing folder, no server, no rights
        why = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise OutputError(f"cannot open the study storage '{shown}' ({why})",
                          "check that its folder exists and is writable (or that the database server is up), or "
                          "leave --storage out for sqlite in OUT") from None


def _without_password(url: str) -> str:
    """The URL as an error line may show it: a password in it is masked."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:  # not a URL SQLAlchemy parses: nothing in it is known to be a password
        return url


def sampler(name: str, seed: int | None, budget: int | None) -> Any:
    import warnings

    import optuna

    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed)
    if name != "tpe":
        raise UsageError(f"unknown --sampler '{name}'", f"use one of: {', '.join(SAMPLERS)}")
    # TPE's default 10 random start-up trials would be most of a small budget: a third of it, 3 to 10.
    startup = 10 if budget is None else max(3, min(10, budget // 3))
    with warnings.catch_warnings():  # multivariate TPE is marked experimental (stable since Optuna 2.2)
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True)


def pruner() -> Any:
    import optuna

    # Pruned against the median of earlier trials at the same length (lengths above the trained context only), in
    # either kind of space: a longrope candidate is pruned as a box trial is.
    return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=0)


def open_study(url: str, identity: Mapping[str, Any], proposer: Any) -> Any:
    """The study for ``identity`` in ``url``: created, or joined when it is this search's (resume, workers).
    ``proposer`` is the space's sampler (TPE or CMA-ES for a box, the evolution for longrope)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url)
    wanted = json.loads(dumps(identity))
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        found = summary.user_attrs.get(IDENTITY)
        if found != wanted:
            raise UsageError(f"the study storage '{url}' holds a study from another search ({_first_difference(found, wanted)})",
                             "use a new -o OUT (or --storage) for this search, or rerun the search that made it")
    study = optuna.create_study(storage=storage, study_name=STUDY, direction="minimize", load_if_exists=True,
                                sampler=proposer, pruner=pruner())
    study.set_user_attr(IDENTITY, wanted)
    return study


def _first_difference(found: Any, wanted: Mapping[str, Any]) -> str:
    if not isinstance(found, Mapping):
        return "not a ropectl search"
    for key, value in wanted.items():
        if found.get(key) != value:
            return f"its {key} is {_short(found.get(key))}, this one's {_short(value)}"
    return "other settings"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def counted(study: Any) -> int:
    """Trials that count against --trials: finished or pruned (a failed one, e.g. stopped by Ctrl-C, does not)."""
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def trial_rows(study: Any, params: Callable[[Mapping[str, Any]], dict[str, Any]] = dict) -> list[dict[str, Any]]:
    """Every trial as a record (what ``ropectl.search.plot.plot_trials`` draws): number, state (complete, pruned,
    infeasible, fail), params (as the space shows them: ``params``), fitness (None unless complete), the lengths
    measured, what the fitness measured, seconds."""
    from optuna.trial import TrialState

    rows = []
    for t in study.get_trials(deepcopy=False):
        seconds = (t.datetime_complete - t.datetime_start).total_seconds() if t.datetime_complete and t.datetime_start else None
        state = "infeasible" if t.user_attrs.get("feasible") is False else t.state.name.lower()
        rows.append({"number": t.number, "state": state, "params": params(t.params),
                     "fitness": t.value if t.state == TrialState.COMPLETE else None, **t.user_attrs, "seconds": seconds})
    return rows


def write_trials(out: Path, rows: list[dict[str, Any]]) -> tuple[Path, Path]:
    """trials.json as the rows are; trials.csv flat: a column per parameter, lists as JSON."""
    atomic_write_text(out / TRIALS_JSON, dumps(rows, indent=2) + "\n")
    flat = []
    for row in rows:
        one = {k: v for k, v in row.items() if k != "params"}
        one.update({f"param_{k}": v for k, v in (row.get("params") or {}).items()})
        flat.append({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in one.items()})
    fields = list(dict.fromkeys(k for r in flat for k in r))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)
    atomic_write_text(out / TRIALS_CSV, buffer.getvalue())
    return out / TRIALS_JSON, out / TRIALS_CSV
