"""Every length flag of every command parses one way, through the CLI: ``131072``, ``128k``, ``128K``, ``1e5`` and
``48.5k`` (k = 1024) are accepted, a length that is not a whole number of tokens (``1.3k``) is refused with the
same one-line error everywhere.

The oracle is hand arithmetic: 128 x 1024 = 131072, 48.5 x 1024 = 49664, 1.3 x 1024 = 1331.2 (not whole). The
sweep commands' parsed specs are read where the run would start (the sweep itself, of a 128k-token forward, is
not under test here); patch and inspect run for real on a tiny checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ropectl.cli.app import app
from ropectl.errors import UsageError
from tests.helpers.checkpoints import tiny_llama
from tests.helpers.cli import one_line

runner = CliRunner()
GOOD = {"131072": 131072, "128k": 131072, "128K": 131072, "1e5": 100000, "48.5k": 49664}
BAD_LINE = ("error: length '1.3k' is not a positive whole number of tokens. Fix: write a whole number of tokens: "
            "8192, 8k or 8K (k = 1024, m = 1024^2), 1e5, 48.5k (= 49664).")
STOP = "run not started"

# (command, flag, the other arguments it needs, where the spec keeps the value)
SWEEP_FLAGS = [
    ("eval-ppl", "-l", [], "lengths"),
    ("eval-ppl", "--stride", ["-l", "1m", "--mode", "sliding"], "stride"),
    ("eval-ppl", "--chunk-size", [], "chunk_size"),
    ("eval-ppl", "--bucket", [], "bucket"),
    ("eval-ppl", "--batch-tokens", [], "batch_tokens"),
    ("eval-passkey", "-l", [], "lengths"),
    ("eval-passkey", "--batch-tokens", [], "batch_tokens"),
    ("eval-tasks", "-l", [], "lengths"),
    ("eval-tasks", "--batch-tokens", [], "batch_tokens"),
    ("recommend", "-t", [], "target"),
]
RUNNERS = {"eval-ppl": ("ropectl.eval.tasks.ppl", "run_eval"),
           "eval-passkey": ("ropectl.eval.tasks.passkey", "run_passkey"),
           "eval-tasks": ("ropectl.eval.tasks.ruler.runner", "run_tasks"),
           "recommend": ("ropectl.recommend.run", "run")}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("len") / "llama")


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each sweep command's spec (recommend: its target) as the run would get it; the run stops there."""
    import importlib

    seen: list[Any] = []

    def stop(*args: Any, **_: Any) -> None:
        seen.append(args[0].target if hasattr(args[0], "target") else args[0])  # recommend's Request: its target
        raise UsageError(STOP, "none")

    for module, name in RUNNERS.values():
        monkeypatch.setattr(importlib.import_module(module), name, stop)
    return seen


def parsed(command: str, flag: str, value: str, extra: list[str], key: str, model: Path, seen: list[Any]) -> int:
    one_line([command, str(model), flag, value, *extra], STOP)
    got = seen.pop() if key == "target" else getattr(seen.pop(), key)
    return got[0] if key == "lengths" else got


@pytest.mark.parametrize(("command", "flag", "extra", "key"), SWEEP_FLAGS)
def test_sweep_length_flags_accept_every_form(llama: Path, captured: list[Any], command: str, flag: str,
                                              extra: list[str], key: str) -> None:
    for text, want in GOOD.items():
        assert parsed(command, flag, text, extra, key, llama, captured) == want, (command, flag, text)


def test_patch_target_length_accepts_every_form(llama: Path) -> None:
    for text, want in GOOD.items():
        result = runner.invoke(app, ["patch", str(llama), "-m", "linear", "-t", text, "--dry-run", "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["target_context"] == want and data["after"]["factor"] == pytest.approx(want / 256), text


def test_inspect_seq_len_accepts_every_form(llama: Path) -> None:
    for text, want in GOOD.items():
        result = runner.invoke(app, ["inspect", str(llama), "--seq-len", text, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["seq_len"] == want, text


ALL_FLAGS = [(c, f, e) for c, f, e, _ in SWEEP_FLAGS] + [("patch", "-t", ["-m", "yarn", "--dry-run"]),
                                                         ("inspect", "--seq-len", [])]


@pytest.mark.parametrize(("command", "flag", "extra"), ALL_FLAGS)
def test_a_fractional_token_count_is_refused_the_same_way_everywhere(llama: Path, captured: list[Any],
                                                                     command: str, flag: str,
                                                                     extra: list[str]) -> None:
    assert one_line([command, str(llama), flag, "1.3k", *extra]) == BAD_LINE
    assert not captured  # refused before any run
    for bad in ("0", "-4", "abc", "1e-3", "nan"):
        assert "is not a positive whole number of tokens" in one_line([command, str(llama), flag, bad, *extra])


def test_help_states_the_syntax() -> None:
    """Each length flag's help says k = 1024 and the accepted forms."""
    for command in ("patch", "eval-ppl", "eval-passkey", "eval-tasks", "recommend", "inspect"):
        text = " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "400"}).stdout.split())
        assert "k = 1024" in text and "48.5k (= 49664)" in text and "1e5" in text, command
