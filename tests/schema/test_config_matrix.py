"""Every published config (tests/fixtures/configs) through every command path, against one table of outcomes.

Each config runs as a 2-layer seeded copy with its RoPE, attention and layer-type keys as published
(tests/helpers/published.py), built once per session. The cells (tests/helpers/config_matrix.py): inspect --engines;
patch with every method of the registry (--dry-run --json), and with the config's own scaling in every output mode
(-o, then transformers' own forward of what was written; --in-place on a copy; --dry-run; --schema v4 and v5);
--emit for vLLM, SGLang and llama.cpp with that scaling and without -m; eval-ppl and eval-tasks with none and that
scaling (transformers' forward); recommend's plan. The table (tests/helpers/config_matrix_table.py) says what each
cell must do: work, or be refused for one reason. A new refusal fails as a crash does, and no cell may end in the
CLI's "unexpected" line. Pending cells (a known bug) are strict xfails that flip when the bug is fixed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.config_matrix import Cell, Seen, cells, describe, forward_runs, run_cell, scaling
from tests.helpers.config_matrix_table import RULES, Pending, Refused, Works, expected
from tests.helpers.published import names

CELLS = cells()


def _param(cell: Cell) -> object:
    outcome = expected(cell)
    marks = [pytest.mark.xfail(strict=True, reason=outcome.bug)] if isinstance(outcome, Pending) else []
    return pytest.param(cell, id=cell.id, marks=marks)


def check(outcome: Works | Refused, seen: Seen) -> None:
    """The cell did what ``outcome`` says, and nothing ended in the CLI's catch-all for unknown exceptions."""
    assert "unexpected" not in seen.error and "report it" not in seen.error, describe(seen)
    assert "Traceback" not in seen.err, describe(seen)
    if isinstance(outcome, Works):
        assert seen.code == 0, describe(seen)
        for pattern in outcome.says:
            assert re.search(pattern, seen.out, re.IGNORECASE), f"stdout does not say /{pattern}/:\n{seen.out}"
        return
    errors = [ln for ln in seen.err.splitlines() if ln.startswith("error: ")]
    assert seen.code != 0 and len(errors) == 1 and ". Fix: " in errors[0], describe(seen)
    problem = errors[0][len("error: "):].split(". Fix: ")[0]
    assert re.search(outcome.reason, problem, re.IGNORECASE), f"refused, but not for /{outcome.reason}/: {problem}"


@pytest.fixture(scope="session")
def matrix_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.eval_data import write_corpus

    return write_corpus(tmp_path_factory.mktemp("matrix-corpus"), [300, 200])


@pytest.fixture(scope="session")
def tiny_copy(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - a getter
    """The tiny copy of a published config, built on first use and shared by every cell of that config."""
    from tests.helpers.published import build_tiny

    root, built = tmp_path_factory.mktemp("published-tiny"), {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build_tiny(name, root / name)
        return built[name]

    return get


@pytest.fixture(scope="session")
def eval_runs(tmp_path_factory: pytest.TempPathFactory, matrix_corpus: Path, tiny_copy):  # noqa: ANN001, ANN201
    """eval-ppl / eval-tasks of a config: none and its scaling in one run (one model load, one plot); where that
    run fails, each method on its own, so each cell says what its own method does."""
    root, seen = tmp_path_factory.mktemp("matrix-eval"), {}

    def get(cell: Cell) -> Seen:
        both = Cell(cell.config, cell.command, "-", f"none,{scaling(cell.config)}")
        for key in (both, cell):
            if key not in seen:
                work = root / re.sub(r"[^\w.-]", "_", key.id)
                work.mkdir()
                seen[key] = run_cell(key, tiny_copy(key.config), work, matrix_corpus)
            if seen[key].code == 0:
                return seen[key]
        return seen[cell]

    return get


@pytest.mark.parametrize("cell", [_param(c) for c in CELLS])
def test_cell(cell: Cell, tiny_copy, eval_runs, matrix_corpus: Path, tmp_path: Path,  # noqa: ANN001
              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the eval commands' token cache and default folders stay in the test's own folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    outcome = expected(cell)
    outcome = outcome.after if isinstance(outcome, Pending) else outcome
    folder = tiny_copy(cell.config)
    seen = eval_runs(cell) if cell.command.startswith("eval-") else run_cell(cell, folder, tmp_path, matrix_corpus)
    check(outcome, seen)
    if cell.mode == "output" and isinstance(outcome, Works):
        assert forward_runs(tmp_path / "out") == "", "transformers' forward of the written checkpoint failed"


@pytest.mark.parametrize("name", names())
def test_tiny_copy_rotates_as_published(name: str, tiny_copy, tmp_path: Path) -> None:  # noqa: ANN001
    """The copy's rotary embedding, as transformers builds it, is the published model's (the copy keeps the keys)."""
    import shutil

    from tests.helpers.model_sweep import transformers_ropes
    from tests.helpers.published import FIXTURES

    shutil.copy(FIXTURES / f"{name}.json", tmp_path / "config.json")
    assert transformers_ropes(tiny_copy(name)) == transformers_ropes(tmp_path)


def test_every_rule_decides_a_cell() -> None:
    """A rule no cell reaches (a renamed config, a method gone) is a stale line of the table."""
    idle = [rule for rule in RULES if not any(rule.matches(c) and expected(c) == rule.outcome for c in CELLS)]
    assert not idle, idle


@pytest.mark.parametrize(("outcome", "seen"), [
    (Works(), Seen(1, "", "error: unexpected TypeError: x. Fix: rerun with ROPECTL_DEBUG=1 and report it.\n")),
    (Refused("bad factor"), Seen(1, "", "error: unexpected TypeError: bad factor. Fix: report it.\n")),
    (Refused("bad factor"), Seen(2, "", "error: the model is fine. Fix: pass a bad factor.\n")),  # only the problem
    (Refused("bad factor"), Seen(0, "", "")),
    (Works(says=("dual chunk",)), Seen(0, "same", "")),
    (Works(), Seen(2, "", "error: no such method. Fix: pick one.\n")),
])
def test_check_fails_what_it_must(outcome: Works | Refused, seen: Seen) -> None:
    """Negative controls: a crash, another reason, a success where a refusal is due, a silent 'same'."""
    with pytest.raises(AssertionError):
        check(outcome, seen)
